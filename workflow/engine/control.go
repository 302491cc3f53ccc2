package engine

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/workflow"
)

// Cancel cancels a run of the tenant: its running attempts are stopped
// and their sandboxes deleted, its waiting steps never start, and the run
// ends cancelled. It returns the run once it has ended (or when ctx is
// done, with ctx's error). A run that has already ended is ErrConflict.
func (e *Engine) Cancel(ctx context.Context, tenant, id string) (*api.WorkflowRun, error) {
	if r := e.owned(tenant, id); r != nil {
		r.mu.Lock()
		if api.RunEnded(r.rec.Run.State) {
			state := r.rec.Run.State
			r.mu.Unlock()
			return nil, fmt.Errorf("run %s has %s: %w", id, state, ErrConflict)
		}
		r.cancelled = true
		r.mu.Unlock()
		r.stop()
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return e.Get(ctx, tenant, id)
	}
	e.take.Lock()
	defer e.take.Unlock()
	if e.active(id) != nil { // taken up meanwhile
		return nil, fmt.Errorf("run %s was just taken up; cancel it again: %w", id, ErrConflict)
	}
	rec, err := e.load(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if api.RunEnded(rec.Run.State) {
		return nil, fmt.Errorf("run %s has %s: %w", id, rec.Run.State, ErrConflict)
	}
	// A run the journal has as unfinished that no engine schedules (the
	// daemon stopped and Recover has not taken it up): cancel it in the
	// journal, deleting what its running attempts left.
	return e.cancelRecord(ctx, rec)
}

// cancelRecord cancels a run that is only in the journal.
func (e *Engine) cancelRecord(ctx context.Context, rec *Record) (*api.WorkflowRun, error) {
	plan, err := e.compile(rec.Document, rec.Added)
	if err != nil {
		plan = &workflow.Plan{}
	}
	r := newRun(e, rec, plan)
	defer r.stop()
	r.mu.Lock()
	now := e.now()
	var sandboxes []string
	for i := range rec.Run.Steps {
		st := &rec.Run.Steps[i]
		if api.StepEnded(st.State) {
			continue
		}
		if st.State == api.StepRunning {
			if sb := r.endStale(st, api.StepCancelled, "the run was cancelled", now); sb != "" {
				sandboxes = append(sandboxes, sb)
			}
		}
		st.State, st.Ended = api.StepCancelled, &now
		r.emit(api.WorkflowEvent{Type: api.WfStepCancelled, Step: st.ID, Group: st.Group, Message: "the run was cancelled"})
	}
	r.endRun(api.RunCancelled, api.WfRunCancelled, "cancelled")
	err = r.commit()
	v := r.view()
	trash := r.trash
	r.mu.Unlock()
	for _, sb := range sandboxes {
		r.deleteSandbox(ctx, sb)
	}
	r.deleteSnapshots(trash)
	if err != nil {
		return nil, fmt.Errorf("cancel run %s: %w", rec.Run.ID, err)
	}
	return v, nil
}

// Resume runs a failed or cancelled run of the tenant again and returns
// it. With from empty, every step that did not succeed runs again; with
// from a step, that step, every step downstream of it and every step that
// did not succeed run again. The steps that run again keep their attempt
// history (their attempt numbers continue) and their retry budget starts
// anew; the others keep their state, snapshots and outputs. A run in
// another state, or a step that would start from a snapshot (or take
// outputs) that no longer exists, is ErrConflict; an unknown step is
// ErrInvalid.
func (e *Engine) Resume(ctx context.Context, tenant, id, from string) (*api.WorkflowRun, error) {
	e.take.Lock()
	defer e.take.Unlock()
	if r := e.owned(tenant, id); r != nil {
		// The run is scheduled: it can be resumed only once it has ended
		// (its scheduler may still be returning).
		r.mu.Lock()
		state := r.rec.Run.State
		r.mu.Unlock()
		if !api.RunEnded(state) {
			return nil, fmt.Errorf("run %s is %s: %w", id, state, ErrConflict)
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	rec, err := e.load(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if s := rec.Run.State; s != api.RunFailed && s != api.RunCancelled {
		return nil, fmt.Errorf("run %s is %s (only failed or cancelled runs resume): %w", id, s, ErrConflict)
	}
	plan, err := e.compile(rec.Document, rec.Added)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	if from != "" && plan.Step(from) == nil {
		return nil, fmt.Errorf("resume from %q: %w: no such step in run %s", from, ErrInvalid, id)
	}
	r := newRun(e, rec, plan)
	r.mu.Lock()
	again := r.resumeSet(from)
	if err := r.checkResume(again); err != nil {
		r.mu.Unlock()
		r.stop()
		return nil, err
	}
	for _, ps := range plan.Steps {
		if again[ps.ID] {
			r.reset(ps.ID)
		}
	}
	rec.Run.State = api.RunRunning
	rec.Run.Ended = nil
	rec.Run.Error = ""
	rec.Run.Resumes++
	msg := "the steps that did not succeed run again"
	if from != "" {
		msg = "from step " + from
	}
	r.emit(api.WorkflowEvent{Type: api.WfRunResumed, Step: from, Message: msg})
	err = r.commit()
	v := r.view()
	r.mu.Unlock()
	if err != nil {
		r.stop()
		return nil, fmt.Errorf("resume run %s: %w", id, err)
	}
	if err := e.startRun(r); err != nil {
		return nil, err
	}
	return v, nil
}

// resumeSet lists the steps a resume runs again.
func (r *run) resumeSet(from string) map[string]bool {
	again := map[string]bool{}
	for _, st := range r.rec.Run.Steps {
		if st.State != api.StepSucceeded {
			again[st.ID] = true
		}
	}
	if from != "" {
		again[from] = true
		for _, id := range r.plan.Downstream(from) {
			again[id] = true
		}
	}
	return again
}

// checkResume verifies that every step that runs again finds what it
// takes from the steps that do not: their snapshot, outputs and stdout.
func (r *run) checkResume(again map[string]bool) error {
	for _, ps := range r.plan.Steps {
		if !again[ps.ID] {
			continue
		}
		if f := ps.From; f != "" && !again[f] {
			if r.step(f).Snapshot == "" {
				return fmt.Errorf("step %s starts from step %s, whose snapshot was deleted: resume from %s: %w", ps.ID, f, f, ErrConflict)
			}
		}
		for p := range ps.Inputs {
			if again[p] {
				continue
			}
			dir, err := r.stepDir(p)
			if err == nil {
				_, err = os.Stat(outDir(dir))
			}
			if err != nil {
				return fmt.Errorf("step %s takes the outputs of step %s, which are gone (%v): resume from %s: %w", ps.ID, p, err, p, ErrConflict)
			}
		}
		if err := r.checkBuildSource(ps, again); err != nil {
			return err
		}
		if p := ps.StdinFrom; p != "" && !again[p] {
			dir, err := r.stepDir(p)
			if err == nil {
				_, err = os.Stat(stdoutFile(dir, r.step(p).Attempt))
			}
			if err != nil {
				return fmt.Errorf("step %s reads the stdout of step %s, which is gone (%v): resume from %s: %w", ps.ID, p, err, p, ErrConflict)
			}
		}
	}
	return nil
}

// AddStep adds a step (the document's syntax, JSON or YAML) to a
// concurrent group of a running run and returns the run. The step joins
// the group's queue at its priority. A run that is not running, or a group
// whose steps have all ended, is ErrConflict; an unknown group is
// ErrNotFound; an invalid step is ErrInvalid.
func (e *Engine) AddStep(ctx context.Context, tenant, id, group string, step []byte) (*api.WorkflowRun, error) {
	r := e.owned(tenant, id)
	if r == nil {
		rec, err := e.load(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("run %s is %s: %w", id, rec.Run.State, ErrConflict)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if api.RunEnded(r.rec.Run.State) || r.ctx.Err() != nil {
		return nil, fmt.Errorf("run %s is %s: %w", id, r.rec.Run.State, ErrConflict)
	}
	g := r.plan.Group(group)
	if g == nil {
		return nil, fmt.Errorf("run %s has no group %q: %w", id, group, ErrNotFound)
	}
	if g.Mode != workflow.Concurrent {
		return nil, fmt.Errorf("group %s is %s: %w: steps are added to concurrent groups only", group, g.Mode, ErrInvalid)
	}
	if r.groupEnded(group) {
		return nil, fmt.Errorf("group %s has ended: %w", group, ErrConflict)
	}
	ps, err := r.plan.AddStep(group, step)
	if err != nil {
		return nil, invalid(err)
	}
	r.rec.Added = append(r.rec.Added, AddedStep{Group: group, Step: slices.Clone(step)})
	r.sync()
	r.emit(api.WorkflowEvent{Type: api.WfStepAdded, Step: ps.ID, Group: group, Message: ps.Priority})
	if err := r.commit(); err != nil {
		return nil, fmt.Errorf("add step to run %s: %w", id, err)
	}
	r.poke()
	return r.view(), nil
}
