package engine

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/workflow"
)

// run is one run the engine is scheduling. Everything below mu is guarded
// by it; mu is never held across a Backend call (journal calls are made
// under it, so that the journal sees transitions in order).
type run struct {
	e    *Engine
	id   string
	ctx  context.Context // cancelled by Cancel and by the engine's Close
	stop context.CancelFunc
	done chan struct{} // closed when the run's scheduler has returned
	wake chan struct{} // capacity 1: something changed, schedule again

	mu   sync.Mutex
	rec  *Record
	plan *workflow.Plan
	// idx is a step id's index in rec.Run.Steps.
	idx    map[string]int
	steps  map[string]*stepRT
	groups map[string]*groupRT
	// busy counts, per group id, the running attempts of its steps at any
	// depth; active counts every running attempt of the run.
	busy   map[string]int
	active int
	// order numbers steps as they become ready (FIFO among equals).
	order uint64
	// attempts counts the run's attempt goroutines until their sandboxes
	// are deleted: the light snapshots go only after them.
	attempts sync.WaitGroup
	// cancelled: workflow.cancel was called. When ctx is done and
	// cancelled is false, the engine is closing: nothing more is
	// journalled, the run stays running for Recover.
	cancelled bool
	// batch holds the events emitted since the last commit.
	batch []api.WorkflowEvent
	// changed is closed (and replaced) at every commit: followers of the
	// run's events wait on it.
	changed chan struct{}
	// trash holds snapshots the run no longer needs (light snapshots of
	// steps that run again), deleted by the scheduler outside mu.
	trash []string
}

// stepRT is what the engine keeps of a step besides its api.WorkflowStep.
type stepRT struct {
	ps *workflow.PlanStep
	// readyAt is when a retrying step may start its next attempt.
	readyAt time.Time
	// order is the step's place in the ready queue (0 = not queued).
	order uint64
	// cancel stops the running attempt.
	cancel context.CancelFunc
	// tee is the stdout of the step's latest attempt, for a step another
	// step takes its stdin from.
	tee *tee
}

// groupRT is a group of the plan with its budget.
type groupRT struct {
	g *workflow.Group
	// budget is nil for a group without one; used says that a step of the
	// group started since the budget was last released.
	budget *budgetSlot
	used   bool
}

// newRun makes the scheduling state of rec, whose plan is plan. The
// caller starts it (Engine.startRun).
func newRun(e *Engine, rec *Record, plan *workflow.Plan) *run {
	ctx, stop := context.WithCancel(e.ctx)
	r := &run{
		e: e, id: rec.Run.ID, ctx: ctx, stop: stop,
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
		rec:     rec,
		plan:    plan,
		idx:     map[string]int{},
		steps:   map[string]*stepRT{},
		groups:  map[string]*groupRT{},
		busy:    map[string]int{},
		changed: make(chan struct{}),
	}
	if rec.Tries == nil {
		rec.Tries = map[string]int{}
	}
	r.sync()
	return r
}

// sync brings the run's steps and groups in line with the plan: it adds
// what the plan has and the run does not (a new run, an added step) and
// refreshes what the plan decides (waits).
func (r *run) sync() {
	for i, s := range r.rec.Run.Steps {
		r.idx[s.ID] = i
	}
	for _, g := range r.plan.Groups {
		if r.groups[g.ID] == nil {
			gr := &groupRT{g: g}
			if g.Budget != nil {
				gr.budget = &budgetSlot{id: r.id + "-" + g.ID, limits: *g.Budget}
			}
			r.groups[g.ID] = gr
		}
		if !slices.ContainsFunc(r.rec.Run.Groups, func(w api.WorkflowGroup) bool { return w.ID == g.ID }) {
			wg := api.WorkflowGroup{ID: g.ID, Mode: g.Mode, MaxParallel: g.MaxParallel, State: api.StepPending}
			if g.Budget != nil {
				b := *g.Budget
				wg.Budget = &b
			}
			r.rec.Run.Groups = append(r.rec.Run.Groups, wg)
		}
	}
	for _, ps := range r.plan.Steps {
		if r.steps[ps.ID] == nil {
			r.steps[ps.ID] = &stepRT{}
		}
		r.steps[ps.ID].ps = ps
		i, ok := r.idx[ps.ID]
		if !ok {
			i = len(r.rec.Run.Steps)
			r.idx[ps.ID] = i
			r.rec.Run.Steps = append(r.rec.Run.Steps, api.WorkflowStep{
				ID: ps.ID, Group: ps.Group, Kind: ps.Kind, State: api.StepPending,
				Priority: ps.Priority, From: ps.From,
			})
		}
		st := &r.rec.Run.Steps[i]
		st.Needs = slices.Clone(ps.Waits)
		st.Inputs = maps.Clone(ps.Inputs)
	}
}

// step returns the run's state of step id (nil if there is none).
func (r *run) step(id string) *api.WorkflowStep {
	i, ok := r.idx[id]
	if !ok {
		return nil
	}
	return &r.rec.Run.Steps[i]
}

// attempt returns attempt n of a step's state (nil if there is none).
func attemptOf(st *api.WorkflowStep, n int) *api.WorkflowAttempt {
	for i := len(st.Attempts) - 1; i >= 0; i-- {
		if st.Attempts[i].Attempt == n {
			return &st.Attempts[i]
		}
	}
	return nil
}

// emit queues an event of the run; the next commit journals it.
func (r *run) emit(ev api.WorkflowEvent) {
	r.rec.LastSeq++
	ev.Seq = r.rec.LastSeq
	ev.Time = r.e.now()
	ev.Run = r.id
	r.batch = append(r.batch, ev)
}

// commit journals the run's state and the events emitted since the last
// commit, and wakes the followers of its events. It is called at every
// transition, with mu held.
func (r *run) commit() error {
	r.rec.Run.Updated = r.e.now()
	r.groupStates()
	ctx := context.WithoutCancel(r.ctx)
	err := r.e.j.SaveRun(ctx, cloneRecord(r.rec), r.batch)
	r.batch = nil
	close(r.changed)
	r.changed = make(chan struct{})
	if err != nil {
		r.e.log.Error("workflow journal", "run", r.id, "err", err)
	}
	return err
}

// closing reports whether the engine is closing the run (its context is
// done and no one cancelled it): its state is then left as journalled.
func (r *run) closing() bool {
	return r.ctx.Err() != nil && !r.cancelled
}

// poke wakes the run's scheduler.
func (r *run) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// view returns a copy of the run's state.
func (r *run) view() *api.WorkflowRun {
	v := cloneRun(&r.rec.Run)
	return &v
}

// groupStates derives each group's state from its steps'.
func (r *run) groupStates() {
	type tally struct{ n, pending, running, succeeded, failed, skipped, cancelled int }
	t := map[string]*tally{}
	for _, ps := range r.plan.Steps {
		st := r.step(ps.ID)
		for _, g := range ps.Groups {
			c := t[g]
			if c == nil {
				c = &tally{}
				t[g] = c
			}
			c.n++
			switch st.State {
			case api.StepPending:
				c.pending++
			case api.StepSucceeded:
				c.succeeded++
			case api.StepFailed:
				c.failed++
			case api.StepSkipped:
				c.skipped++
			case api.StepCancelled:
				c.cancelled++
			default:
				c.running++
			}
		}
	}
	for i := range r.rec.Run.Groups {
		g := &r.rec.Run.Groups[i]
		c := t[g.ID]
		switch {
		case c == nil || c.pending == c.n:
			g.State = api.StepPending
		case c.running > 0 || c.pending > 0:
			g.State = api.StepRunning
		case c.succeeded == c.n:
			g.State = api.StepSucceeded
		case c.failed > 0:
			g.State = api.StepFailed
		case c.cancelled > 0:
			g.State = api.StepCancelled
		default:
			g.State = api.StepSkipped
		}
	}
}

// groupEnded reports whether every step of group id (at any depth) has
// ended; a group without steps has not.
func (r *run) groupEnded(id string) bool {
	n := 0
	for _, ps := range r.plan.Steps {
		if !slices.Contains(ps.Groups, id) {
			continue
		}
		n++
		if !api.StepEnded(r.step(ps.ID).State) {
			return false
		}
	}
	return n > 0
}

// reset puts a step back to pending for a new round (a resume or a retry
// from scratch): its attempt history stays and its attempt numbers
// continue; its light snapshot goes to the trash (the new round takes
// another), a full one stays the tenant's.
func (r *run) reset(id string) {
	st := r.step(id)
	rt := r.steps[id]
	if st.Snapshot != "" && rt.ps.Snapshot != workflow.SnapshotFull {
		r.trash = append(r.trash, st.Snapshot)
	}
	st.State = api.StepPending
	st.Snapshot = ""
	st.Outputs = nil
	st.Started, st.Ended = nil, nil
	st.Error = ""
	st.Result = nil
	rt.order = 0
	rt.readyAt = time.Time{}
	delete(r.rec.Tries, id)
}
