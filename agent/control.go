package agent

import (
	"context"
	"fmt"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
)

// ended reports whether a run's state is final.
func ended(state string) bool {
	return state == api.AgentSucceeded || state == api.AgentFailed || state == api.AgentCancelled
}

// Cancel cancels a run of the tenant: its model or tool call under way is
// stopped, its sandboxes are deleted, every tool call without an answer
// is answered "not run" (so that its conversations can go on when it is
// resumed), and it ends cancelled. It waits for that end (bounded by ctx)
// and returns the run. An ended run is ErrConflict.
func (e *Engine) Cancel(ctx context.Context, tenant, id string) (*api.AgentRun, error) {
	if r := e.owned(tenant, id); r != nil {
		r.mu.Lock()
		if ended(r.rec.Run.State) {
			r.mu.Unlock()
			return nil, fmt.Errorf("run %s has ended (%s): %w", id, r.rec.Run.State, ErrConflict)
		}
		r.cancelled = true
		r.mu.Unlock()
		r.stop()
		return e.Wait(ctx, tenant, id)
	}
	e.take.Lock()
	defer e.take.Unlock()
	if e.owned(tenant, id) != nil {
		return nil, fmt.Errorf("run %s was taken up meanwhile: %w", id, ErrConflict)
	}
	rec, err := e.load(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if ended(rec.Run.State) {
		return nil, fmt.Errorf("run %s has ended (%s): %w", id, rec.Run.State, ErrConflict)
	}
	// A run the journal has as running that no engine runs (its daemon
	// stopped and it was not taken up yet): end it here.
	r := newRun(e, rec, nil)
	r.cancelled = true
	r.stop()
	r.end(nil, nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.view(), nil
}

// Resume takes up an ended run of the tenant, its conversations kept:
// with task, a new user message to its first agent (for any ended run);
// without, a failed or cancelled run goes on from where it stopped (the
// model call that failed is made again). The first agent's max_turns
// count starts again. It returns the run as it restarts; a running run,
// or a succeeded one without a task, is ErrConflict.
func (e *Engine) Resume(ctx context.Context, tenant, id, task string) (*api.AgentRun, error) {
	if e.isClosed() {
		return nil, ErrClosed
	}
	if task != "" {
		if err := checkTask(task); err != nil {
			return nil, err
		}
	}
	e.take.Lock()
	defer e.take.Unlock()
	if e.owned(tenant, id) != nil {
		return nil, fmt.Errorf("run %s is running: %w", id, ErrConflict)
	}
	rec, err := e.load(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	switch {
	case !ended(rec.Run.State):
		return nil, fmt.Errorf("run %s is %s (a daemon's start takes it up): %w", id, rec.Run.State, ErrConflict)
	case task == "" && rec.Run.State == api.AgentSucceeded:
		return nil, fmt.Errorf("run %s succeeded: give a task to resume it: %w", id, ErrConflict)
	}
	d, err := Compile([]byte(rec.Document))
	if err != nil {
		return nil, err
	}
	first := rec.Run.Agent
	if d.Agent(first) == nil {
		return nil, fmt.Errorf("%w: no agent %q in the run's document", ErrInvalid, first)
	}
	r := newRun(e, rec, d)
	r.mu.Lock()
	run := &r.rec.Run
	run.State, run.Error, run.Answer, run.Ended = api.AgentRunning, "", "", nil
	run.Resumes++
	r.progress(first).Turns = 0
	r.emit(api.AgentEvent{Type: api.AgentEvRunResumed, Agent: first, Text: "resumed"})
	if task != "" {
		r.add(first, model.Message{Role: model.RoleUser, Text: task})
		r.emit(api.AgentEvent{Type: api.AgentEvMessage, Agent: first, Text: task})
	}
	err = r.commit()
	v := r.view()
	r.mu.Unlock()
	if err != nil {
		r.stop()
		return nil, err
	}
	if err := e.startRun(r); err != nil {
		return nil, err
	}
	return v, nil
}
