package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/workflow"
)

// Options configure an Engine.
type Options struct {
	// ArtifactDir is a host directory the engine owns (created 0700):
	// <ArtifactDir>/<run>/<step>/out holds a step's collected outputs,
	// <ArtifactDir>/<run>/<step>/stdout.<attempt> the stdout of a step
	// another step takes its stdin from. Required by runs that use
	// outputs or stdin_from (their steps fail without it).
	ArtifactDir string
	// CPUs is the number of CPUs of the host, given to workflow.Compile
	// to judge budgets (0: not checked).
	CPUs int
	// Logger receives what the engine cannot return to a caller (journal
	// and cleanup errors). Default: slog.Default().
	Logger *slog.Logger
	// Now is the clock of the run's times. Default: time.Now.
	Now func() time.Time
}

// Engine runs workflow plans on a Backend and keeps them in a Journal. It
// is safe for concurrent use; Close stops it.
//
// Each run has one scheduler goroutine and one goroutine per running
// attempt. The scheduler makes passes over the plan whenever something
// changes (an attempt ended, a step was added, a retry's backoff ran
// out, a cancel): a pending step whose waits, `from` step and input
// producers have all succeeded (and, for stdin_from, whose producer is
// running or has succeeded) is ready; one whose waits failed, were
// skipped or cancelled is skipped. Ready steps start by priority
// (critical, normal, background), then in the order they became ready,
// as the max_parallel of every group around them allows. An attempt that
// fails is retried after its backoff while the step has attempts left;
// a retry from scratch puts the step's chain of `from` ancestors back to
// pending (attempt history kept, attempt numbers continuing) so that the
// scheduler runs them again before the step. Every transition is
// journalled (Journal.SaveRun: the state and its events in one write)
// under the run's lock, which is never held across a Backend call.
type Engine struct {
	b   Backend
	j   Journal
	o   Options
	log *slog.Logger
	now func() time.Time

	// ctx is the parent of every run's context; Close cancels it.
	ctx  context.Context
	stop context.CancelFunc
	// wg counts the goroutines of runs and attempts.
	wg sync.WaitGroup

	mu     sync.Mutex
	runs   map[string]*run // runs being scheduled, by id
	closed bool
	// take serialises the calls that take a run up from the journal
	// (Resume, Recover, Cancel of a run not taken up).
	take sync.Mutex
	// capacity wakes the creates that wait for room (capacity.go).
	capacity capacity
}

// New returns an engine that runs steps on b and journals runs in j. It
// schedules nothing until Submit, Resume or Recover.
func New(b Backend, j Journal, o Options) *Engine {
	e := &Engine{b: b, j: j, o: o, log: o.Logger, now: o.Now, runs: map[string]*run{}}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.now == nil {
		e.now = time.Now
	}
	e.ctx, e.stop = context.WithCancel(context.Background())
	return e
}

// compile parses a run's document and re-adds the steps added to it.
func (e *Engine) compile(doc string, added []AddedStep) (*workflow.Plan, error) {
	plan, err := workflow.Compile([]byte(doc), workflow.Options{CPUs: e.o.CPUs})
	if err != nil {
		return nil, invalid(err)
	}
	for _, a := range added {
		if _, err := plan.AddStep(a.Group, a.Step); err != nil {
			return nil, invalid(fmt.Errorf("added step: %w", err))
		}
	}
	return plan, nil
}

// invalid makes err wrap ErrInvalid (it usually does already).
func invalid(err error) error {
	if errors.Is(err, ErrInvalid) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}

// Submit validates a workflow document, journals a new run of it and
// starts scheduling it in the background. It returns the run as it
// starts (pending). An invalid document is an error wrapping ErrInvalid
// whose text has the document's line messages.
func (e *Engine) Submit(ctx context.Context, o Owner, req api.CreateWorkflow) (*api.WorkflowRun, error) {
	if e.isClosed() {
		return nil, ErrClosed
	}
	plan, err := e.compile(req.Document, nil)
	if err != nil {
		return nil, err
	}
	now := e.now()
	name := req.Name
	if name == "" {
		name = plan.Name
	}
	rec := &Record{
		Owner:    o,
		Document: req.Document,
		Run: api.WorkflowRun{
			ID: newRunID(), Name: name, State: api.RunPending,
			Labels: maps.Clone(req.Labels), Created: now, Updated: now,
		},
	}
	r := newRun(e, rec, plan)
	r.mu.Lock()
	r.emit(api.WorkflowEvent{Type: api.WfRunStarted, Message: name})
	err = r.commit()
	v := r.view()
	r.mu.Unlock()
	if err != nil {
		r.stop()
		return nil, fmt.Errorf("journal run %s: %w", r.id, err)
	}
	if err := e.startRun(r); err != nil {
		return nil, err
	}
	return v, nil
}

// startRun registers r and starts its scheduler.
func (e *Engine) startRun(r *run) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		r.stop()
		return ErrClosed
	}
	if e.runs[r.id] != nil {
		r.stop()
		return fmt.Errorf("run %s is already scheduled: %w", r.id, ErrConflict)
	}
	e.runs[r.id] = r
	e.wg.Add(1)
	go r.loop()
	return nil
}

// finished unregisters r once its scheduler returns.
func (e *Engine) finished(r *run) {
	e.mu.Lock()
	if e.runs[r.id] == r {
		delete(e.runs, r.id)
	}
	e.mu.Unlock()
	close(r.done)
}

// isClosed reports whether Close was called.
func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// active returns the run id if the engine is scheduling it.
func (e *Engine) active(id string) *run {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[id]
}

// load reads a run of the tenant from the journal.
func (e *Engine) load(ctx context.Context, tenant, id string) (*Record, error) {
	if !validRunID(id) {
		return nil, fmt.Errorf("run %q: %w", id, ErrNotFound)
	}
	rec, err := e.j.LoadRun(ctx, tenant, id)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
		}
		return nil, fmt.Errorf("load run %s: %w", id, err)
	}
	if rec.Owner.Tenant != tenant {
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	return rec, nil
}

// owned returns the scheduled run id if it belongs to tenant, else nil.
func (e *Engine) owned(tenant, id string) *run {
	r := e.active(id)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rec.Owner.Tenant != tenant {
		return nil
	}
	return r
}

// Get returns a run of the tenant with its steps, attempts and
// artifacts. An unknown run (or another tenant's) is ErrNotFound.
func (e *Engine) Get(ctx context.Context, tenant, id string) (*api.WorkflowRun, error) {
	if r := e.owned(tenant, id); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.view(), nil
	}
	rec, err := e.load(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return &rec.Run, nil
}

// List returns the tenant's runs, newest first, in state (or any state
// when empty), at most limit (0 = the journal's default). Their steps
// carry their state only.
func (e *Engine) List(ctx context.Context, tenant, state string, limit int) ([]api.WorkflowRun, error) {
	recs, err := e.j.ListRuns(ctx, tenant, state, limit)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	out := make([]api.WorkflowRun, 0, len(recs))
	for _, rec := range recs {
		if rec.Owner.Tenant != tenant {
			continue
		}
		out = append(out, briefRun(&rec.Run))
	}
	return out, nil
}

// Wait blocks until the run ends (or the engine stops scheduling it) and
// returns it.
func (e *Engine) Wait(ctx context.Context, tenant, id string) (*api.WorkflowRun, error) {
	if r := e.owned(tenant, id); r != nil {
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e.Get(ctx, tenant, id)
}

// Close stops scheduling: running attempts are cancelled and their
// sandboxes deleted, and no run is marked failed or cancelled: the
// journal keeps them running, for Recover to take up at the next start.
// It waits for the engine's goroutines until ctx is done.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.stop()
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close workflow engine: %w", ctx.Err())
	}
}
