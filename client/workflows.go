package client

import (
	"context"

	"github.com/moat-sandbox/moat/api"
)

// CreateWorkflow validates a workflow document and starts a run of it. It
// returns the run as it starts (state pending or running); follow it with
// [Client.WorkflowEvents] or [Client.WaitWorkflow]. An invalid document is
// an error with code invalid_argument whose message names the line.
func (c *Client) CreateWorkflow(ctx context.Context, req api.CreateWorkflow) (*api.WorkflowRun, error) {
	return c.workflowCall(ctx, api.OpWorkflowCreate, req)
}

// ListWorkflows lists the caller's workflow runs, newest first.
func (c *Client) ListWorkflows(ctx context.Context, req api.ListWorkflows) ([]api.WorkflowRun, error) {
	var l api.WorkflowList
	if err := c.call(ctx, api.OpWorkflowList, req, &l); err != nil {
		return nil, err
	}
	return l.Runs, nil
}

// Workflow describes one run of the caller's ([IsNotFound] when there is no
// such run, or it is another tenant's).
func (c *Client) Workflow(ctx context.Context, run string) (*api.WorkflowRun, error) {
	return c.workflowCall(ctx, api.OpWorkflowGet, api.WorkflowRef{Run: run})
}

// CancelWorkflow cancels a run: its running steps are killed and the
// waiting ones never start.
func (c *Client) CancelWorkflow(ctx context.Context, run string) (*api.WorkflowRun, error) {
	return c.workflowCall(ctx, api.OpWorkflowCancel, api.WorkflowRef{Run: run})
}

// ResumeWorkflow runs a failed or cancelled run again from req.From (or
// from the steps that did not succeed), keeping the results and snapshots
// of the steps before it.
func (c *Client) ResumeWorkflow(ctx context.Context, req api.ResumeWorkflow) (*api.WorkflowRun, error) {
	return c.workflowCall(ctx, api.OpWorkflowResume, req)
}

// AddWorkflowStep adds a step to a running concurrent group of a run.
func (c *Client) AddWorkflowStep(ctx context.Context, req api.AddWorkflowStep) (*api.WorkflowRun, error) {
	return c.workflowCall(ctx, api.OpWorkflowAdd, req)
}

// WorkflowEvents streams a run's events after req.After to fn; with
// req.Follow it returns when the run has ended, with the run's final
// state. An error fn returns ends the stream and is returned.
func (c *Client) WorkflowEvents(ctx context.Context, req api.WorkflowEvents, fn func(api.WorkflowEvent) error) (*api.WorkflowRun, error) {
	return runEvents(ctx, c, api.OpWorkflowEvents, req, func(ev api.Event) *api.WorkflowEvent { return ev.Workflow }, fn,
		func(r *api.WorkflowRun) string { return r.ID }, func() (*api.WorkflowRun, error) { return c.Workflow(ctx, req.Run) })
}

// WaitWorkflow waits for a run to end and returns its final state.
func (c *Client) WaitWorkflow(ctx context.Context, run string) (*api.WorkflowRun, error) {
	return c.WorkflowEvents(ctx, api.WorkflowEvents{Run: run, Follow: true}, func(api.WorkflowEvent) error { return nil })
}

func (c *Client) workflowCall(ctx context.Context, name string, req any) (*api.WorkflowRun, error) {
	return callFor[api.WorkflowRun](ctx, c, name, req)
}
