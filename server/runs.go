package server

import (
	"context"
	"errors"

	"github.com/moat-sandbox/moat/api"
)

// What the handlers of agent runs (agents.go) and workflow runs
// (workflows.go) do alike.

// runnerSentinels are the sentinel errors of a runner (package agent's,
// package workflow/engine's) that runnerError maps to the API's codes.
type runnerSentinels struct {
	notFound, conflict, invalid, closed error
}

// runnerError maps a runner's errors to the API's: an API error stays
// itself, an unknown run (or another tenant's) is not_found, a call the
// run's state does not allow conflict, an invalid request
// invalid_argument with the runner's message, a stopping runner
// unavailable; any other error is err.
func runnerError(err error, s runnerSentinels) error {
	var ae *api.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, s.notFound):
		return api.Errorf(api.CodeNotFound, "%v", err)
	case errors.Is(err, s.conflict):
		return api.Errorf(api.CodeConflict, "%v", err)
	case errors.Is(err, s.invalid):
		return api.Errorf(api.CodeInvalidArgument, "%v", err)
	case errors.Is(err, s.closed):
		return api.Errorf(api.CodeUnavailable, "the server is shutting down")
	}
	return err
}

// checkRun refuses an empty run id before the runner is asked.
func checkRun(run string) error {
	if run == "" {
		return api.Errorf(api.CodeInvalidArgument, "run is required")
	}
	return nil
}

// runRefRequest is a request that names one run and nothing else
// (agent.get and agent.cancel, workflow.get and workflow.cancel).
type runRefRequest interface {
	api.AgentRunRef | api.WorkflowRef
}

// runRefFields are the fields every runRefRequest has.
type runRefFields struct {
	Run string
}

// decodeRunRef decodes in's request, a Q, and returns the run it names,
// which must not be empty.
func decodeRunRef[Q runRefRequest](in *input) (string, error) {
	req, err := decode[Q](in)
	if err != nil {
		return "", err
	}
	run := runRefFields(*req).Run
	if err := checkRun(run); err != nil {
		return "", err
	}
	return run, nil
}

// runEventsRequest is the request of a run's event stream: agent.events
// and workflow.events ask the same (a run, the sequence number to start
// after, whether to follow), so one is converted to the other's fields.
type runEventsRequest interface {
	api.AgentEvents | api.WorkflowEvents
}

// runEventsFields are the fields every runEventsRequest has.
type runEventsFields struct {
	Run    string
	After  uint64
	Follow bool
}

// serveRunEvents serves op, the event stream of one of the caller's runs
// (agent.events: Q api.AgentEvents; workflow.events: Q
// api.WorkflowEvents), with the runner's get and events: a missing run
// (or another tenant's) is a plain error before the stream begins, a
// follower is told the stream is up before the first event, each event
// goes out as wrap makes it, and the answer is the run as events returns
// it. runErr maps the runner's errors to the API's. A transport that
// cannot stream is invalid_argument.
func serveRunEvents[Q runEventsRequest, R, E any](ctx context.Context, c Caller, in *input, op string,
	get func(ctx context.Context, tenant, id string) (R, error),
	events func(ctx context.Context, tenant, id string, after uint64, follow bool, emit func(E) error) (R, error),
	wrap func(ev E) api.Event, runErr func(error) error) (any, error) {
	if in.emit == nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "%s is a stream", op)
	}
	dec, err := decode[Q](in)
	if err != nil {
		return nil, err
	}
	req := runEventsFields(*dec)
	if err := checkRun(req.Run); err != nil {
		return nil, err
	}
	// A missing run is a plain 404, before the stream begins.
	if _, err := get(ctx, c.Tenant, req.Run); err != nil {
		return nil, runErr(err)
	}
	if req.Follow && in.open != nil {
		// A follower knows the stream is up before the first event.
		in.open()
	}
	run, err := events(ctx, c.Tenant, req.Run, req.After, req.Follow, func(ev E) error {
		return in.emit(wrap(ev))
	})
	if err != nil {
		return nil, runErr(err)
	}
	return run, nil
}
