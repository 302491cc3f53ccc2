package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// Recover takes up every run the journal has as unfinished (at the
// daemon's start, before serving): the attempts that were running are
// marked interrupted (their sandboxes, gone with the old daemon, are
// deleted anyway, errors ignored) and their steps run again, with their
// next attempt number, from the snapshot they started from; the steps
// that had ended keep their state. Each run gets the events
// run.interrupted and run.resumed and one more Resumes. A run whose
// document no longer compiles ends failed. Errors of single runs are
// joined and returned once every run was tried.
func (e *Engine) Recover(ctx context.Context) error {
	e.take.Lock()
	defer e.take.Unlock()
	recs, err := e.j.Unfinished(ctx)
	if err != nil {
		return fmt.Errorf("recover workflow runs: %w", err)
	}
	var errs []error
	for _, rec := range recs {
		if e.active(rec.Run.ID) != nil {
			continue
		}
		if api.RunEnded(rec.Run.State) {
			if err := e.collectGarbage(ctx, rec); err != nil {
				errs = append(errs, fmt.Errorf("clean up run %s: %w", rec.Run.ID, err))
			}
			continue
		}
		if err := e.recoverRun(ctx, rec); err != nil {
			errs = append(errs, fmt.Errorf("recover run %s: %w", rec.Run.ID, err))
		}
	}
	return errors.Join(errs...)
}

// recoverRun takes up one unfinished run.
func (e *Engine) recoverRun(ctx context.Context, rec *Record) error {
	// Events journalled after the record's last save (a crash between the
	// two writes) keep their numbers.
	for {
		evs, err := e.j.Events(ctx, rec.Run.ID, rec.LastSeq, eventBatch)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		if len(evs) == 0 {
			break
		}
		rec.LastSeq = max(rec.LastSeq, evs[len(evs)-1].Seq)
		if len(evs) < eventBatch {
			break
		}
	}
	plan, err := e.compile(rec.Document, rec.Added)
	if err != nil {
		_, cerr := e.failRecord(ctx, rec, fmt.Sprintf("the run's document no longer compiles: %v", err))
		return errors.Join(err, cerr)
	}
	r := newRun(e, rec, plan)
	r.mu.Lock()
	now := e.now()
	var sandboxes, steps []string
	for _, ps := range plan.Steps {
		st := r.step(ps.ID)
		switch st.State {
		case api.StepRunning:
			if sb := r.endStale(st, AttemptInterrupted, "the daemon stopped", now); sb != "" {
				sandboxes = append(sandboxes, sb)
			}
			st.State = api.StepPending
			steps = append(steps, ps.ID)
		case api.StepRetrying:
			st.State = api.StepPending
		}
	}
	msg := "the daemon stopped"
	if len(steps) > 0 {
		msg += "; interrupted: " + strings.Join(steps, ", ")
	}
	r.emit(api.WorkflowEvent{Type: api.WfRunInterrupted, Message: msg})
	rec.Run.Resumes++
	r.emit(api.WorkflowEvent{Type: api.WfRunResumed, Message: "taken up after a restart"})
	err = r.commit()
	r.mu.Unlock()
	for _, sb := range sandboxes {
		r.deleteSandbox(ctx, sb)
	}
	if err != nil {
		r.stop()
		return err
	}
	return e.startRun(r)
}

// endStale ends the latest attempt of st, a step journalled as running
// that no engine runs (its daemon stopped), with state and why, and puts
// the snapshot that attempt took in the trash. It returns the attempt's
// sandbox, for the caller to delete outside the run's lock ("" for none).
// Called with mu held.
func (r *run) endStale(st *api.WorkflowStep, state, why string, now time.Time) string {
	sb := ""
	if a := attemptOf(st, st.Attempt); a != nil && a.State == api.StepRunning {
		a.State, a.Ended, a.Error = state, &now, why
		sb = a.Sandbox
	}
	if st.Snapshot != "" {
		r.trash = append(r.trash, st.Snapshot)
		st.Snapshot = ""
	}
	return sb
}

// failRecord ends a run that cannot be scheduled as failed.
func (e *Engine) failRecord(ctx context.Context, rec *Record, msg string) (*api.WorkflowRun, error) {
	now := e.now()
	rec.Run.State = api.RunFailed
	rec.Run.Error = msg
	rec.Run.Ended = &now
	rec.Run.Updated = now
	rec.LastSeq++
	ev := api.WorkflowEvent{Seq: rec.LastSeq, Time: now, Run: rec.Run.ID, Type: api.WfRunFailed, Message: msg}
	if err := e.j.SaveRun(ctx, rec, []api.WorkflowEvent{ev}); err != nil {
		return nil, err
	}
	return &rec.Run, nil
}

// collectGarbage deletes the light snapshots a run that ended left to
// delete when its daemon stopped (Record.Garbage) and journals it clean.
func (e *Engine) collectGarbage(ctx context.Context, rec *Record) error {
	gone := e.deleteSnapshots(ctx, rec.Owner, rec.Run.ID, rec.Garbage)
	for i := range rec.Run.Steps {
		if st := &rec.Run.Steps[i]; gone[st.Snapshot] {
			st.Snapshot = ""
		}
	}
	rec.Garbage = nil
	return e.j.SaveRun(ctx, rec, nil)
}
