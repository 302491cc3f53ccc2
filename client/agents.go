package client

import (
	"context"

	"github.com/moat-sandbox/moat/api"
)

// AgentRun starts a run of agent req.Agent of the agents document
// req.Document on req.Task, and returns the run as it starts (state
// pending or running); follow it with [Client.AgentEvents] or
// [Client.WaitAgentRun]. The daemon's own model providers serve the run:
// a document with a providers section is refused (invalid_argument, the
// line named) unless the section is the daemon's own (a private daemon
// started with --models on that file). A daemon without providers
// answers unimplemented; an invalid document invalid_argument naming its
// line; a tenant with too many runs unfinished resource_exhausted.
func (c *Client) AgentRun(ctx context.Context, req api.CreateAgentRun) (*api.AgentRun, error) {
	return c.agentCall(ctx, api.OpAgentCreate, req)
}

// AgentRuns lists the caller's agent runs, newest first.
func (c *Client) AgentRuns(ctx context.Context, req api.ListAgentRuns) ([]api.AgentRun, error) {
	var l api.AgentRunList
	if err := c.call(ctx, api.OpAgentList, req, &l); err != nil {
		return nil, err
	}
	return l.Runs, nil
}

// AgentRunGet describes one run of the caller's: its agents, usage and
// answer ([IsNotFound] when there is no such run, or it is another
// tenant's).
func (c *Client) AgentRunGet(ctx context.Context, run string) (*api.AgentRun, error) {
	return c.agentCall(ctx, api.OpAgentGet, api.AgentRunRef{Run: run})
}

// CancelAgentRun cancels a run: its model call and tool call under way
// are stopped and its sandboxes deleted.
func (c *Client) CancelAgentRun(ctx context.Context, run string) (*api.AgentRun, error) {
	return c.agentCall(ctx, api.OpAgentCancel, api.AgentRunRef{Run: run})
}

// ResumeAgentRun takes up an ended or interrupted run, its agents'
// conversations kept: with req.Task as a new message to its agent, or,
// without, from where it stopped.
func (c *Client) ResumeAgentRun(ctx context.Context, req api.ResumeAgentRun) (*api.AgentRun, error) {
	return c.agentCall(ctx, api.OpAgentResume, req)
}

// AgentEvents streams a run's events after req.After to fn (model turns,
// tool calls with their decisions and results, handoffs); with
// req.Follow it returns when the run has ended, with the run's final
// state. An error fn returns ends the stream and is returned.
func (c *Client) AgentEvents(ctx context.Context, req api.AgentEvents, fn func(api.AgentEvent) error) (*api.AgentRun, error) {
	return runEvents(ctx, c, api.OpAgentEvents, req, func(ev api.Event) *api.AgentEvent { return ev.Agent }, fn,
		func(r *api.AgentRun) string { return r.ID }, func() (*api.AgentRun, error) { return c.AgentRunGet(ctx, req.Run) })
}

// WaitAgentRun waits for a run to end and returns its final state.
func (c *Client) WaitAgentRun(ctx context.Context, run string) (*api.AgentRun, error) {
	return c.AgentEvents(ctx, api.AgentEvents{Run: run, Follow: true}, func(api.AgentEvent) error { return nil })
}

func (c *Client) agentCall(ctx context.Context, name string, req any) (*api.AgentRun, error) {
	return callFor[api.AgentRun](ctx, c, name, req)
}
