package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// createExecFake is the fake backend as a CreateExecer: CreateExec is the
// fake's Create, then created, then the fake's Exec, as the server's is a
// create and then an exec. Create and Exec called by the engine directly
// are counted apart (direct), to show which path it took.
type createExecFake struct {
	*fakeBackend

	mu     sync.Mutex
	calls  int // CreateExec calls, refusals for room included
	direct int // Create and Exec calls made by the engine itself
	// failExec names steps whose first attempt fails after its sandbox
	// exists (its exec refused); hideID makes that failure return no id
	// (the sandbox named only through created).
	failExec map[string]bool
	hideID   bool
}

var _ CreateExecer = (*createExecFake)(nil)

func (b *createExecFake) CreateExec(ctx context.Context, o Owner, c CreateRequest, x ExecRequest, created func(string)) (string, *sandbox.Result, error) {
	b.mu.Lock()
	b.calls++
	fail := b.failExec[c.Labels[LabelStep]] && c.Labels[LabelAttempt] == "1"
	hide := b.hideID
	b.mu.Unlock()
	id, err := b.fakeBackend.Create(ctx, o, c)
	if err != nil {
		return "", nil, err
	}
	created(id)
	if fail {
		err := errors.New("the exec was refused")
		if hide {
			return "", nil, err
		}
		return id, nil, err
	}
	res, err := b.fakeBackend.Exec(ctx, o, id, x)
	return id, res, err
}

func (b *createExecFake) Create(ctx context.Context, o Owner, req CreateRequest) (string, error) {
	b.mu.Lock()
	b.direct++
	b.mu.Unlock()
	return b.fakeBackend.Create(ctx, o, req)
}

func (b *createExecFake) Exec(ctx context.Context, o Owner, id string, req ExecRequest) (*sandbox.Result, error) {
	b.mu.Lock()
	b.direct++
	b.mu.Unlock()
	return b.fakeBackend.Exec(ctx, o, id, req)
}

// counts returns the CreateExec calls and the direct Create and Exec
// calls.
func (b *createExecFake) counts() (calls, direct int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls, b.direct
}

// watchedJournal is the in-memory journal with a wake-up at every write.
type watchedJournal struct {
	*memJournal

	mu      sync.Mutex
	changed chan struct{}
}

func (j *watchedJournal) SaveRun(ctx context.Context, r *Record, evs []api.WorkflowEvent) error {
	err := j.memJournal.SaveRun(ctx, r, evs)
	j.mu.Lock()
	close(j.changed)
	j.changed = make(chan struct{})
	j.mu.Unlock()
	return err
}

// waitFor waits until cond holds of the journal, failing the test after
// a deadline.
func (j *watchedJournal) waitFor(what string, cond func() bool) {
	j.t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		j.mu.Lock()
		ch := j.changed
		j.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			j.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// newCreateExecHarness is newHarness with the fake backend seen as a
// CreateExecer and a journal that can be waited on.
func newCreateExecHarness(t *testing.T) (*harness, *createExecFake, *watchedJournal) {
	h := &harness{t: t, b: newFakeBackend(t), j: newMemJournal(t), dir: t.TempDir()}
	ce := &createExecFake{fakeBackend: h.b, failExec: map[string]bool{}}
	wj := &watchedJournal{memJournal: h.j, changed: make(chan struct{})}
	h.e = New(ce, wj, Options{ArtifactDir: h.dir, Logger: discard()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := h.e.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return h, ce, wj
}

// A backend that is a CreateExecer makes every attempt's sandbox and runs
// its process in one call: a chain from snapshots, a retry from the
// snapshot it started from, a stdin pipe read again by a retried consumer
// and outputs passed as inputs all run through it, and the engine never
// calls Create or Exec itself.
func TestCreateExecUsed(t *testing.T) {
	h, ce, _ := newCreateExecHarness(t)
	r := h.run(`
steps:
  - id: a
    outputs: [/out]
    run: ["write x=1", "write /out/r.txt=hello"]
  - id: b
    from: a
    retry: {attempts: 2}
    run: ["absent dirty", "write dirty=1", "expect x=1", "fail-once"]
  - group: g
    mode: parallel
    steps:
      - id: prod
        run: ["echo part1;", "await cons part1;", "echo part2"]
      - id: cons
        stdin_from: prod
        retry: {attempts: 2}
        run: [cat, fail-once]
      - id: use
        inputs: {a: /in}
        run: ["read /in/out/r.txt"]
`, api.RunSucceeded)
	calls, direct := ce.counts()
	h.b.mu.Lock()
	creates, deleted, left := len(h.b.creates), len(h.b.deletedBoxes), len(h.b.boxes)
	h.b.mu.Unlock()
	if direct != 0 || calls != 7 || creates != 7 {
		t.Errorf("%d CreateExec calls, %d direct Create and Exec calls, %d sandboxes: want 7, 0, 7", calls, direct, creates)
	}
	if left != 0 || deleted != 7 {
		t.Errorf("sandboxes: %d left, %d deleted", left, deleted)
	}
	b := step(t, r, "b")
	if len(b.Attempts) != 2 || b.Attempts[0].StartSnapshot == "" || b.Attempts[1].StartSnapshot != b.Attempts[0].StartSnapshot {
		t.Errorf("b's attempts: %+v", b.Attempts)
	}
	for _, a := range step(t, r, "cons").Attempts {
		if a.Result == nil || a.Result.Stdout != "part1;part2" {
			t.Errorf("cons's attempt %d read %+v", a.Attempt, a.Result)
		}
	}
	if res := step(t, r, "use").Result; res == nil || res.Stdout != "hello" {
		t.Errorf("use read %+v", res)
	}
	for _, st := range r.Steps {
		for _, a := range st.Attempts {
			if a.Sandbox == "" {
				t.Errorf("step %s attempt %d has no sandbox", st.ID, a.Attempt)
			}
		}
	}
}

// The sandbox CreateExec reports through created is journalled while its
// process still runs (step.sandbox, and the attempt's sandbox in the
// record), as it is after a Create, so that Recover could delete it.
func TestCreateExecJournalsSandbox(t *testing.T) {
	h, _, wj := newCreateExecHarness(t)
	id := h.submit(`
steps:
  - id: a
    run: ["block gate"]
`)
	var sb string
	wj.waitFor("the sandbox of a in the journal", func() bool {
		h.j.mu.Lock()
		defer h.j.mu.Unlock()
		if _, ok := h.j.runs[id]; !ok {
			return false
		}
		rec := h.j.load(id)
		st := step(t, &rec.Run, "a")
		if len(st.Attempts) != 1 || st.Attempts[0].Sandbox == "" {
			return false
		}
		sb = st.Attempts[0].Sandbox
		return true
	})
	h.j.mu.Lock()
	rec := h.j.load(id)
	h.j.mu.Unlock()
	if st := step(t, &rec.Run, "a"); st.State != api.StepRunning {
		t.Fatalf("a is %s when its sandbox is journalled", st.State)
	}
	evs := h.j.eventsOf(id)
	if i := slices.IndexFunc(evs, func(ev api.WorkflowEvent) bool { return ev.Type == api.WfStepSandbox }); i < 0 || evs[i].Sandbox != sb {
		t.Errorf("events %v: no step.sandbox of %s", types(evs), sb)
	}
	h.b.open("gate")
	r := h.wait(id)
	if r.State != api.RunSucceeded {
		t.Fatalf("run %s: %v", r.State, stepStates(r))
	}
	if !contains(h.b.deletedBoxes, sb) {
		t.Errorf("sandbox %s not deleted: %v", sb, h.b.deletedBoxes)
	}
}

// An error after the sandbox exists fails the attempt as an exec's error
// would, and the sandbox is deleted: named by the id CreateExec returns,
// or only through created.
func TestCreateExecErrorAfterCreate(t *testing.T) {
	for _, hide := range []bool{false, true} {
		t.Run(map[bool]string{false: "id", true: "created"}[hide], func(t *testing.T) {
			h, ce, _ := newCreateExecHarness(t)
			ce.failExec["a"] = true
			ce.hideID = hide
			r := h.run(`
steps:
  - id: a
    retry: {attempts: 2}
    run: [ok]
`, api.RunSucceeded)
			a := step(t, r, "a")
			if len(a.Attempts) != 2 || a.Attempts[0].State != api.StepFailed ||
				!strings.HasPrefix(a.Attempts[0].Error, "exec: ") || !strings.Contains(a.Attempts[0].Error, "the exec was refused") {
				t.Fatalf("a's attempts: %+v", a.Attempts)
			}
			failed := a.Attempts[0].Sandbox
			h.b.mu.Lock()
			defer h.b.mu.Unlock()
			if failed == "" || !contains(h.b.deletedBoxes, failed) || len(h.b.boxes) != 0 {
				t.Errorf("the failed attempt's sandbox %q: deleted %v, %d left", failed, h.b.deletedBoxes, len(h.b.boxes))
			}
			if len(h.b.execs) != 1 {
				t.Errorf("%d processes ran, want 1 (the second attempt's)", len(h.b.execs))
			}
		})
	}
}

// CreateExec refused for room (ErrCapacity, nothing made) is tried again
// as the engine's sandboxes end, as a Create is.
func TestCreateExecWaitsForCapacity(t *testing.T) {
	h, ce, _ := newCreateExecHarness(t)
	h.b.mu.Lock()
	h.b.quota = 1
	h.b.mu.Unlock()
	h.run(`
steps:
  - group: wide
    mode: parallel
    steps:
      - {id: s1, run: [ok]}
      - {id: s2, run: [ok]}
      - {id: s3, run: [ok]}
`, api.RunSucceeded)
	calls, direct := ce.counts()
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if h.b.livePeak > 1 || len(h.b.creates) != 3 || direct != 0 || calls != 3+h.b.refused {
		t.Errorf("peak %d, %d sandboxes, %d direct calls, %d CreateExec calls for %d refusals", h.b.livePeak, len(h.b.creates), direct, calls, h.b.refused)
	}
}
