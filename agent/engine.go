package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
)

// Option configures an Engine.
type Option func(*Engine)

// WithLogger sets where the engine logs what it cannot return to a caller
// (cleanup errors). Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithClock sets the clock of the runs' times and durations. Default:
// time.Now.
func WithClock(now func() time.Time) Option { return func(e *Engine) { e.now = now } }

// Engine runs agents: each run is one goroutine that works through its
// first agent's conversation (model call, then the tool calls it asked
// for, in order, then the next model call) until the agent answers
// without a tool call, reaches max_turns, or is cancelled. A handoff runs
// the other agent on that goroutine, with its own conversation,
// sandbox and tags, and gives its answer back as the tool's result.
//
// Every transition is journalled (Journal.SaveRun: the record and its
// events in one write) under the run's lock, which is never held across
// a Model or Backend call. It is safe for concurrent use; Close stops it.
type Engine struct {
	m   Model
	b   Backend
	j   Journal
	log *slog.Logger
	now func() time.Time

	// ctx is the parent of every run's context; Close cancels it.
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	runs   map[string]*run
	closed bool
	// take serialises the calls that take a run up from the journal
	// (Resume, Recover, Cancel of a run not taken up).
	take sync.Mutex
}

// New returns an engine that calls models through m, runs tool calls
// through b and journals runs in j. It runs nothing until Start, Resume
// or Recover. m and b must return once their ctx is done.
func New(m Model, b Backend, j Journal, opts ...Option) *Engine {
	e := &Engine{m: m, b: b, j: j, runs: map[string]*run{}}
	for _, o := range opts {
		o(e)
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.now == nil {
		e.now = time.Now
	}
	e.ctx, e.stop = context.WithCancel(context.Background())
	return e
}

// checkTask checks a task (a run's first message, a resume's).
func checkTask(task string) error {
	switch {
	case strings.TrimSpace(task) == "":
		return fmt.Errorf("%w: the task is empty", ErrInvalid)
	case len(task) > maxTask:
		return fmt.Errorf("%w: the task is %d bytes: at most %d", ErrInvalid, len(task), maxTask)
	case strings.IndexByte(task, 0) >= 0:
		return fmt.Errorf("%w: the task contains a NUL byte", ErrInvalid)
	}
	return nil
}

// Start compiles doc, journals a new run of its agent agentName on task
// and starts it in the background. It returns the run as it starts
// (pending). An invalid document, an unknown agent or an empty task is an
// error wrapping ErrInvalid. A document's providers are not looked at
// here: whether a daemon takes them is its decision.
func (e *Engine) Start(ctx context.Context, o Owner, doc, agentName, task string, labels map[string]string) (*api.AgentRun, error) {
	if e.isClosed() {
		return nil, ErrClosed
	}
	d, err := Compile([]byte(doc))
	if err != nil {
		return nil, err
	}
	if d.Agent(agentName) == nil {
		return nil, fmt.Errorf("%w: no agent %q in the document", ErrInvalid, agentName)
	}
	if err := checkTask(task); err != nil {
		return nil, err
	}
	now := e.now()
	rec := &Record{
		Run: api.AgentRun{
			ID: newRunID(), Agent: agentName, Task: task, State: api.AgentPending,
			Labels: maps.Clone(labels), Created: now, Updated: now,
			Agents: []api.AgentState{{Name: agentName}},
		},
		Owner:         o,
		Document:      doc,
		Conversations: map[string][]model.Message{agentName: {{Role: model.RoleUser, Text: task}}},
		Progress:      map[string]*Progress{agentName: {}},
	}
	r := newRun(e, rec, d)
	r.mu.Lock()
	r.emit(api.AgentEvent{Type: api.AgentEvRunStarted, Agent: agentName})
	r.emit(api.AgentEvent{Type: api.AgentEvMessage, Agent: agentName, Text: task})
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

// startRun registers r and starts its goroutine.
func (e *Engine) startRun(r *run) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		r.stop()
		return ErrClosed
	}
	if e.runs[r.id] != nil {
		r.stop()
		return fmt.Errorf("run %s is already running: %w", r.id, ErrConflict)
	}
	e.runs[r.id] = r
	e.wg.Add(1)
	go r.loop()
	return nil
}

// finished unregisters r once its goroutine ends.
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

// owned returns the running run id if it belongs to tenant, else nil.
func (e *Engine) owned(tenant, id string) *run {
	e.mu.Lock()
	r := e.runs[id]
	e.mu.Unlock()
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

// Get returns a run of the tenant. An unknown run (or another tenant's)
// is ErrNotFound.
func (e *Engine) Get(ctx context.Context, tenant, id string) (*api.AgentRun, error) {
	if r := e.owned(tenant, id); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.view(), nil
	}
	rec, err := e.load(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	v := cloneRun(&rec.Run)
	return &v, nil
}

// Record returns a copy of a run's whole record, its conversations
// included (the live one while the engine runs it).
func (e *Engine) Record(ctx context.Context, tenant, id string) (*Record, error) {
	if r := e.owned(tenant, id); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return cloneRecord(r.rec), nil
	}
	return e.load(ctx, tenant, id)
}

// Wait blocks until the run ends (or the engine stops running it) and
// returns it.
func (e *Engine) Wait(ctx context.Context, tenant, id string) (*api.AgentRun, error) {
	if r := e.owned(tenant, id); r != nil {
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e.Get(ctx, tenant, id)
}

// Close stops the engine: the runs' model and tool calls are cancelled
// and nothing more is journalled of them, so the journal keeps them
// running for Recover to take up at the next start (their long-lived
// sandboxes are kept for it; a per_call sandbox is deleted). It waits for
// the runs' goroutines, which end once the Model's and Backend's calls
// return.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.stop()
	e.wg.Wait()
}
