package engine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/workflow"
)

// cleanupTimeout bounds the cleanup calls (delete a sandbox or a
// snapshot) made after the call that needed them was cancelled.
const cleanupTimeout = time.Minute

// pass is what one scheduling pass leaves to do outside the run's lock.
type pass struct {
	// wakeAt is when the next retrying step may start (zero: none).
	wakeAt time.Time
	// release are budgets whose groups ended.
	release []*budgetSlot
	// trash are snapshots to delete.
	trash []string
	// end: the scheduler returns (the run ended, or the engine closes);
	// success: every step succeeded, and light are the light snapshots to
	// delete before the run is marked succeeded.
	end     bool
	success bool
	light   []string
}

// loop is the run's scheduler: it runs passes until the run ends, waking
// on every change (an attempt ended, a step was added, a cancel), on the
// end of a retry's backoff, and on its context.
func (r *run) loop() {
	defer r.e.wg.Done()
	defer r.e.finished(r)
	ctxDone := r.ctx.Done()
	for {
		r.mu.Lock()
		p := r.pass()
		r.mu.Unlock()
		r.cleanup(p.trash, p.release)
		if p.end {
			if p.success {
				r.succeed(p.light)
			}
			r.releaseAll()
			// An attempt deletes its sandbox after its report: the run
			// is done (Cancel answers, Close returns) once they are gone.
			r.attempts.Wait()
			return
		}
		var timer *time.Timer
		var fire <-chan time.Time
		if !p.wakeAt.IsZero() {
			timer = time.NewTimer(max(p.wakeAt.Sub(r.e.now()), 0))
			fire = timer.C
		}
		select {
		case <-r.wake:
		case <-fire:
		case <-ctxDone:
			ctxDone = nil // from now on, wait for the attempts to report
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// pass is one scheduling pass: it skips the steps whose waits ended badly,
// starts the ready steps the groups' caps allow (by priority, then in the
// order they became ready), and ends the run when nothing is left to run.
func (r *run) pass() (p pass) {
	p.trash, r.trash = r.trash, nil
	if r.ctx.Err() != nil {
		if !r.cancelled {
			p.end = r.active == 0 // the engine closes: journal nothing
			return p
		}
		r.cancelWaiting()
		if r.active == 0 {
			r.endRun(api.RunCancelled, api.WfRunCancelled, cmp.Or(r.rec.Run.Error, "cancelled"))
			p.end = true
		}
		r.commit()
		return p
	}
	now := r.e.now()
	changed := r.propagate(now)
	ready, left, wakeAt := r.readySteps(now)
	p.wakeAt = wakeAt
	if r.startReady(ready, now) {
		changed = true
	}
	for _, gr := range r.groups {
		if gr.used && r.groupEnded(gr.g.ID) {
			gr.used = false
			p.release = append(p.release, gr.budget)
		}
	}
	switch {
	case left == 0:
		p.end = true
		if r.allSucceeded() {
			p.success = true
			p.light = r.lightSnapshots()
		} else {
			r.endRun(api.RunFailed, api.WfRunFailed, r.failure())
			changed = true
		}
	case r.active == 0 && p.wakeAt.IsZero():
		// Nothing runs and nothing will: a step waits for something that
		// cannot happen. The plan's validation rules this out; end the run
		// rather than hang.
		for _, ps := range r.plan.Steps {
			if st := r.step(ps.ID); !api.StepEnded(st.State) {
				r.skip(ps.ID, "it can never start: what it waits for will not happen", now)
			}
		}
		r.endRun(api.RunFailed, api.WfRunFailed, "no step can start")
		p.end, changed = true, true
	}
	if changed {
		r.commit()
	}
	return p
}

// readySteps lists the steps that may start now, in the order they start
// (by priority, then in the order they became ready); left counts the
// steps not ended, wakeAt is the end of the first backoff still running.
func (r *run) readySteps(now time.Time) (ready []*stepRT, left int, wakeAt time.Time) {
	for _, ps := range r.plan.Steps {
		st := r.step(ps.ID)
		rt := r.steps[ps.ID]
		switch st.State {
		case api.StepPending:
		case api.StepRetrying:
			if rt.readyAt.After(now) {
				if wakeAt.IsZero() || rt.readyAt.Before(wakeAt) {
					wakeAt = rt.readyAt
				}
				left++
				continue
			}
		default:
			if !api.StepEnded(st.State) {
				left++
			}
			continue
		}
		left++
		if ok, _ := r.verdict(ps); ok {
			if rt.order == 0 {
				r.order++
				rt.order = r.order
			}
			ready = append(ready, rt)
		}
	}
	slices.SortFunc(ready, func(a, b *stepRT) int {
		return cmp.Or(cmp.Compare(rank(a.ps.Priority), rank(b.ps.Priority)), cmp.Compare(a.order, b.order))
	})
	return ready, left, wakeAt
}

// startReady starts the ready steps the groups' caps allow and reports
// whether it started one (the scheduler then looks again: a step that
// starts can make another ready, the consumer of its stdout).
func (r *run) startReady(ready []*stepRT, now time.Time) bool {
	started := false
	for _, rt := range ready {
		if r.slotFree(rt.ps) {
			r.start(rt, now)
			started = true
		}
	}
	if started {
		r.poke()
	}
	return started
}

// verdict says whether a pending (or retrying) step may start: every step
// it waits for, starts from or takes outputs from has succeeded, and its
// stdin's producer has started. cause is set when it never will (one of
// those failed, was skipped or cancelled).
func (r *run) verdict(ps *workflow.PlanStep) (ready bool, cause string) {
	ready = true
	need := func(id, how string, started bool) {
		st := r.step(id)
		if st == nil {
			cause = cmp.Or(cause, fmt.Sprintf("%s %s, which is not a step of the run", how, id))
			return
		}
		switch st.State {
		case api.StepSucceeded:
		case api.StepFailed, api.StepSkipped, api.StepCancelled:
			cause = cmp.Or(cause, fmt.Sprintf("%s %s, which %s", how, id, endedWord(st.State)))
		case api.StepRunning:
			if !started {
				ready = false
			}
		default:
			ready = false
		}
	}
	for _, w := range ps.Waits {
		need(w, "it needs", false)
	}
	if ps.From != "" {
		need(ps.From, "it starts from", false)
	}
	for _, id := range slices.Sorted(maps.Keys(ps.Inputs)) {
		need(id, "it takes the outputs of", false)
	}
	if ps.StdinFrom != "" {
		need(ps.StdinFrom, "it reads the stdout of", true)
	}
	return ready && cause == "", cause
}

// endedWord is a step's final state in a sentence.
func endedWord(state string) string {
	switch state {
	case api.StepFailed:
		return "failed"
	case api.StepSkipped:
		return "was skipped"
	default:
		return "was cancelled"
	}
}

// propagate skips every pending step that can never start, until none is
// left (skips cascade); a retrying step whose re-run chain failed fails.
func (r *run) propagate(now time.Time) (changed bool) {
	for again := true; again; {
		again = false
		for _, ps := range r.plan.Steps {
			st := r.step(ps.ID)
			if st.State != api.StepPending && st.State != api.StepRetrying {
				continue
			}
			_, cause := r.verdict(ps)
			if cause == "" {
				continue
			}
			if st.State == api.StepRetrying {
				r.fail(ps.ID, "cannot retry: "+cause, now)
			} else {
				r.skip(ps.ID, cause, now)
			}
			again, changed = true, true
		}
	}
	return changed
}

// skip ends a pending step without running it.
func (r *run) skip(id, cause string, now time.Time) {
	st := r.step(id)
	st.State = api.StepSkipped
	st.Error = cause
	st.Ended = &now
	r.emit(api.WorkflowEvent{Type: api.WfStepSkipped, Step: id, Group: st.Group, Message: cause})
}

// fail ends a step as failed (its retries are used up or impossible).
func (r *run) fail(id, msg string, now time.Time) {
	st := r.step(id)
	st.State = api.StepFailed
	st.Error = msg
	st.Ended = &now
	r.emit(api.WorkflowEvent{Type: api.WfStepFailed, Step: id, Group: st.Group, Attempt: st.Attempt, Message: msg, Result: st.Result})
}

// cancelWaiting cancels the steps of a cancelled run that are not running.
func (r *run) cancelWaiting() {
	now := r.e.now()
	for _, ps := range r.plan.Steps {
		st := r.step(ps.ID)
		if st.State != api.StepPending && st.State != api.StepRetrying {
			continue
		}
		st.State = api.StepCancelled
		st.Ended = &now
		r.emit(api.WorkflowEvent{Type: api.WfStepCancelled, Step: ps.ID, Group: st.Group, Message: "the run was cancelled"})
	}
}

// endRun gives the run its final state.
func (r *run) endRun(state, event, msg string) {
	now := r.e.now()
	r.rec.Run.State = state
	r.rec.Run.Ended = &now
	if state != api.RunSucceeded {
		r.rec.Run.Error = msg
	}
	r.emit(api.WorkflowEvent{Type: event, Message: msg})
}

// failure says why a failed run failed: its first failed step.
func (r *run) failure() string {
	for _, st := range r.rec.Run.Steps {
		if st.State == api.StepFailed {
			return fmt.Sprintf("step %s failed: %s", st.ID, st.Error)
		}
	}
	for _, st := range r.rec.Run.Steps {
		if st.State != api.StepSucceeded {
			return fmt.Sprintf("step %s %s", st.ID, endedWord(st.State))
		}
	}
	return "failed"
}

func (r *run) allSucceeded() bool {
	for _, st := range r.rec.Run.Steps {
		if st.State != api.StepSucceeded {
			return false
		}
	}
	return true
}

// lightSnapshots lists the light snapshots the run keeps.
func (r *run) lightSnapshots() []string {
	var ids []string
	for _, ps := range r.plan.Steps {
		if st := r.step(ps.ID); st.Snapshot != "" && ps.Snapshot != workflow.SnapshotFull {
			ids = append(ids, st.Snapshot)
		}
	}
	return ids
}

// succeed marks the run succeeded, then deletes its light snapshots once
// the sandboxes of its attempts are gone (a sandbox started from one
// holds it): the answer does not wait for the clean-up, which the record
// keeps as Garbage until it is done.
func (r *run) succeed(light []string) {
	r.mu.Lock()
	r.rec.Garbage = light
	r.endRun(api.RunSucceeded, api.WfRunSucceeded, "")
	r.commit()
	r.mu.Unlock()
	r.attempts.Wait()
	r.collectGarbage()
}

// collectGarbage deletes the snapshots of the record's Garbage and
// journals what is left: nothing (a snapshot that could not be deleted,
// used by another sandbox of the tenant, is logged and left to them).
func (r *run) collectGarbage() {
	r.mu.Lock()
	garbage := slices.Clone(r.rec.Garbage)
	r.mu.Unlock()
	if len(garbage) == 0 {
		return
	}
	gone := r.deleteSnapshots(garbage)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.rec.Run.Steps {
		if st := &r.rec.Run.Steps[i]; gone[st.Snapshot] {
			st.Snapshot = ""
		}
	}
	r.rec.Garbage = nil
	r.commit()
}

// slotFree reports whether every group around the step has room for one
// more running step.
func (r *run) slotFree(ps *workflow.PlanStep) bool {
	for _, g := range ps.Groups {
		gr := r.groups[g]
		if gr != nil && gr.g.MaxParallel > 0 && r.busy[g] >= gr.g.MaxParallel {
			return false
		}
	}
	return true
}

// cleanup deletes snapshots and releases budgets, outside the run's lock.
func (r *run) cleanup(trash []string, release []*budgetSlot) {
	r.deleteSnapshots(trash)
	for _, b := range release {
		b.close()
	}
}

// releaseAll releases every budget of the run (its scheduler returns:
// no attempt runs).
func (r *run) releaseAll() {
	r.mu.Lock()
	var bs []*budgetSlot
	for _, gr := range r.groups {
		if gr.budget != nil {
			gr.used = false
			bs = append(bs, gr.budget)
		}
	}
	r.mu.Unlock()
	for _, b := range bs {
		b.close()
	}
}

// deleteSnapshots deletes snapshots the run no longer needs, logging
// failures; it returns those deleted.
func (r *run) deleteSnapshots(ids []string) map[string]bool {
	return r.e.deleteSnapshots(r.ctx, r.rec.Owner, r.id, ids)
}

// deleteSnapshots deletes snapshots of run, logging failures; it returns
// those deleted. A snapshot that another one is layered on cannot go
// before it (a chain of `from` steps makes such layers): newest first
// (ids are in the order they were taken), and passes until one deletes
// nothing more.
func (e *Engine) deleteSnapshots(ctx context.Context, o Owner, run string, ids []string) map[string]bool {
	gone := map[string]bool{}
	if len(ids) == 0 {
		return gone
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	left := slices.Clone(ids)
	slices.Reverse(left)
	errs := map[string]error{}
	for len(left) > 0 {
		var next []string
		for _, id := range left {
			if err := e.b.DeleteSnapshot(ctx, o, id); err != nil {
				errs[id] = err
				next = append(next, id)
				continue
			}
			gone[id] = true
		}
		if len(next) == len(left) || ctx.Err() != nil {
			break
		}
		left = next
	}
	for id, err := range errs {
		if !gone[id] {
			e.log.Warn("workflow: delete snapshot", "run", run, "snapshot", id, "err", err)
		}
	}
	return gone
}

// rank orders priorities: critical first, background last.
func rank(priority string) int {
	switch priority {
	case workflow.Critical:
		return 0
	case workflow.Background:
		return 2
	default:
		return 1
	}
}

// cpuWeight is the CPU weight of a step's sandbox by its priority
// (cgroup v2 cpu.weight units).
func cpuWeight(priority string) int {
	switch priority {
	case workflow.Critical:
		return 1000
	case workflow.Background:
		return 10
	default:
		return 100
	}
}

// backoff is the wait after the tries-th failed attempt: base, doubled
// for each further failure, at most workflow.MaxBackoff.
func backoff(base time.Duration, tries int) time.Duration {
	d := base
	for i := 1; i < tries && d < workflow.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, workflow.MaxBackoff)
}

// chain lists the `from` ancestors of a step, nearest first.
func (r *run) chain(ps *workflow.PlanStep) []string {
	var ids []string
	for f := ps.From; f != "" && !slices.Contains(ids, f); {
		ids = append(ids, f)
		rt := r.steps[f]
		if rt == nil {
			break
		}
		f = rt.ps.From
	}
	return ids
}

// joinIDs lists step ids in a sentence.
func joinIDs(ids []string) string { return strings.Join(ids, ", ") }
