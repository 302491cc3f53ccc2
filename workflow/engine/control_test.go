package engine

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

// Cancel mid-run: the running step's sandbox is deleted, the waiting
// steps are cancelled, the run ends cancelled; a second cancel conflicts.
func TestCancel(t *testing.T) {
	h := newHarness(t)
	id := h.submit(`
steps:
  - id: a
    run: [ok]
  - id: b
    run: ["block never"]
  - id: c
    run: [ok]
`)
	h.b.waitFor("b runs", func() bool { return len(h.b.execs) == 2 })
	ctx := testCtx(t)
	r, err := h.e.Cancel(ctx, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != api.RunCancelled || r.Ended == nil {
		t.Fatalf("run %s", r.State)
	}
	for id, want := range map[string]string{"a": api.StepSucceeded, "b": api.StepCancelled, "c": api.StepCancelled} {
		if s := step(t, r, id); s.State != want {
			t.Errorf("step %s: %s, want %s", id, s.State, want)
		}
	}
	if a := step(t, r, "b").Attempts; len(a) != 1 || a[0].State != api.StepCancelled || a[0].Sandbox == "" {
		t.Errorf("b's attempt: %+v", a)
	}
	h.b.mu.Lock()
	if len(h.b.boxes) != 0 {
		t.Errorf("sandboxes left: %d", len(h.b.boxes))
	}
	h.b.mu.Unlock()
	if len(h.b.execsOf("c")) != 0 {
		t.Error("c ran")
	}
	if _, err := h.e.Cancel(ctx, tenant, id); !errors.Is(err, ErrConflict) {
		t.Errorf("second cancel: %v", err)
	}
	evs := h.checkEvents(id)
	if last := evs[len(evs)-1]; last.Type != api.WfRunCancelled {
		t.Errorf("last event %s", last.Type)
	}
}

// Close stops a run without failing it; a new engine on the same journal
// takes it up: the interrupted step runs again (next attempt, from the
// snapshot it started from), the completed ones do not.
func TestCloseRecover(t *testing.T) {
	h := newHarness(t)
	id := h.submit(`
steps:
  - id: a
    run: ["write x=1"]
  - id: b
    from: a
    run: ["expect x=1", "block-once gate"]
  - id: c
    from: b
    run: ["expect x=1"]
`)
	// b runs, and a's sandbox (deleted after a's end was recorded) is
	// gone: only b's is left when the daemon dies.
	h.b.waitFor("b runs", func() bool { return h.b.ranLocked("b") == 1 && len(h.b.deletedBoxes) == 1 })
	// The daemon dies: its sandboxes are left behind.
	h.b.mu.Lock()
	h.b.keepBoxes = true
	h.b.mu.Unlock()
	if err := h.e.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.b.mu.Lock()
	h.b.keepBoxes = false
	left := slices.Collect(maps.Keys(h.b.boxes))
	h.b.mu.Unlock()
	if len(left) != 1 {
		t.Fatalf("sandboxes left by the dead daemon: %v", left)
	}
	h.j.mu.Lock()
	rec := h.j.load(id)
	h.j.mu.Unlock()
	if rec.Run.State != api.RunRunning || step(t, &rec.Run, "b").State != api.StepRunning || step(t, &rec.Run, "a").State != api.StepSucceeded {
		t.Fatalf("journal after close: run %s, steps %v", rec.Run.State, stepStates(&rec.Run))
	}

	h.e = h.engine()
	if err := h.e.Recover(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	r := h.wait(id)
	if r.State != api.RunSucceeded || r.Resumes != 1 {
		t.Fatalf("recovered run: %s resumes %d: %v", r.State, r.Resumes, stepStates(r))
	}
	if n := len(h.b.execsOf("a")); n != 1 {
		t.Errorf("a ran %d times", n)
	}
	b := step(t, r, "b")
	if b.Attempt != 2 || b.Attempts[0].State != AttemptInterrupted || b.Attempts[1].State != api.StepSucceeded {
		t.Fatalf("b's attempts %+v", b.Attempts)
	}
	if b.Attempts[0].Sandbox != left[0] || !contains(h.b.deletedBoxes, left[0]) {
		t.Errorf("the interrupted attempt's sandbox %s (left %s) was not deleted", b.Attempts[0].Sandbox, left[0])
	}
	if b.Attempts[1].StartSnapshot == "" || b.Attempts[1].StartSnapshot != b.Attempts[0].StartSnapshot {
		t.Errorf("b restarted from %q, first from %q", b.Attempts[1].StartSnapshot, b.Attempts[0].StartSnapshot)
	}
	if x := h.b.execsOf("b"); envOf(x[1].env, "MOAT_STEP_ATTEMPT") != "2" {
		t.Errorf("b's second exec env %v", x[1].env)
	}
	evs := h.checkEvents(id)
	tt := types(evs, "")
	i := slices.Index(tt, api.WfRunInterrupted)
	if i < 0 || i+1 >= len(tt) || tt[i+1] != api.WfRunResumed {
		t.Errorf("run events %v", tt)
	}
}

// Resume a failed run from a step: that step and what follows it run
// again, the steps before it keep their results and are not run again.
func TestResumeFrom(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: a
    run: ["write x=1"]
  - id: b
    from: a
    run: ["expect x=1", "write y=1"]
  - id: c
    from: b
    run: ["expect y=1", "fail-once"]
  - id: d
    run: [ok]
`, api.RunFailed)
	if s := step(t, r, "d"); s.State != api.StepSkipped {
		t.Fatalf("d: %s", s.State)
	}
	ctx := testCtx(t)
	if _, err := h.e.Resume(ctx, tenant, r.ID, "nope"); !errors.Is(err, ErrInvalid) {
		t.Errorf("resume from no step: %v", err)
	}
	aSnap := step(t, r, "a").Snapshot
	r2, err := h.e.Resume(ctx, tenant, r.ID, "b")
	if err != nil {
		t.Fatal(err)
	}
	if r2.State != api.RunRunning || r2.Resumes != 1 {
		t.Errorf("resumed: %s %d", r2.State, r2.Resumes)
	}
	if _, err := h.e.Resume(ctx, tenant, r.ID, ""); !errors.Is(err, ErrConflict) {
		t.Errorf("resume of a running run: %v", err)
	}
	r = h.wait(r.ID)
	if r.State != api.RunSucceeded {
		t.Fatalf("run %s: %v", r.State, stepStates(r))
	}
	if n := len(h.b.execsOf("a")); n != 1 {
		t.Errorf("a ran %d times", n)
	}
	b := step(t, r, "b")
	if b.Attempt != 2 || b.Attempts[1].StartSnapshot != aSnap {
		t.Errorf("b: attempt %d from %q, want a's %q", b.Attempt, b.Attempts[1].StartSnapshot, aSnap)
	}
	if c := step(t, r, "c"); c.Attempt != 2 || c.State != api.StepSucceeded {
		t.Errorf("c: %+v", c)
	}
	if d := step(t, r, "d"); d.Attempt != 1 || d.State != api.StepSucceeded {
		t.Errorf("d: %+v", d)
	}
	if _, err := h.e.Resume(ctx, tenant, r.ID, ""); !errors.Is(err, ErrConflict) {
		t.Errorf("resume of a succeeded run: %v", err)
	}
	var resumed []api.WorkflowEvent
	for _, ev := range h.checkEvents(r.ID) {
		if ev.Type == api.WfRunResumed {
			resumed = append(resumed, ev)
		}
	}
	if len(resumed) != 1 || resumed[0].Step != "b" {
		t.Errorf("run.resumed events %+v", resumed)
	}
}

// Resume without a step runs the steps that did not succeed; a step whose
// start snapshot is gone cannot be resumed.
func TestResumeFailed(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: a
    run: ["write x=1"]
  - id: b
    from: a
    run: ["fail-once"]
`, api.RunFailed)
	// The snapshot b starts from disappears (deleted by hand).
	h.b.mu.Lock()
	clear(h.b.snaps)
	h.b.mu.Unlock()
	r2, err := h.e.Resume(testCtx(t), tenant, r.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	r = h.wait(r2.ID)
	// The engine does not know the snapshot is gone: the attempt fails
	// to create its sandbox, and the run fails again.
	if r.State != api.RunFailed || !strings.Contains(step(t, r, "b").Error, "no snapshot") {
		t.Fatalf("run %s: %v", r.State, stepStates(r))
	}
	if n := len(h.b.execsOf("a")); n != 1 {
		t.Errorf("a ran %d times", n)
	}
	// Once the engine knows (the snapshot field is cleared, as after the
	// light snapshots of a run are deleted), resume says so.
	h.j.mu.Lock()
	rec := h.j.load(r.ID)
	rec.Run.Steps[0].Snapshot = ""
	h.j.mu.Unlock()
	if err := h.j.SaveRun(testCtx(t), rec, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Resume(testCtx(t), tenant, r.ID, "b"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "snapshot was deleted") {
		t.Errorf("resume without the start snapshot: %v", err)
	}
	if _, err := h.e.Resume(testCtx(t), tenant, r.ID, "a"); err != nil {
		t.Errorf("resume from a: %v", err)
	}
	if r = h.wait(r.ID); r.State != api.RunSucceeded {
		t.Errorf("run %s: %v", r.State, stepStates(r))
	}
}

// A cancel during a retry's backoff ends the run at once: the backoff is a
// timer of the scheduler, not a sleep.
func TestCancelDuringBackoff(t *testing.T) {
	h := newHarness(t)
	id := h.submit(`
steps:
  - id: a
    retry: {attempts: 2, backoff: 1m}
    run: [fail]
  - id: b
    run: [ok]
`)
	errSeen := errors.New("seen")
	_, err := h.e.Events(testCtx(t), tenant, id, 0, true, func(ev api.WorkflowEvent) error {
		if ev.Type == api.WfStepRetrying {
			if !strings.Contains(ev.Message, "retry 1 of 1 in 1m0s") {
				t.Errorf("retrying: %q", ev.Message)
			}
			return errSeen
		}
		return nil
	})
	if !errors.Is(err, errSeen) {
		t.Fatalf("events: %v", err)
	}
	r, err := h.e.Get(testCtx(t), tenant, id)
	if err != nil || step(t, r, "a").State != api.StepRetrying || r.State != api.RunRunning {
		t.Fatalf("before cancel: %v %+v", err, r)
	}
	r, err = h.e.Cancel(testCtx(t), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != api.RunCancelled || step(t, r, "a").State != api.StepCancelled || step(t, r, "b").State != api.StepCancelled {
		t.Fatalf("after cancel: %s %v", r.State, stepStates(r))
	}
	if n := len(h.b.execsOf("a")); n != 1 {
		t.Errorf("a ran %d times", n)
	}
	h.checkEvents(id)
}

// A run the journal has as running that no engine took up (the daemon
// restarted, Recover not called yet) is cancelled in the journal, and
// what its attempts left is deleted.
func TestCancelNotTakenUp(t *testing.T) {
	h := newHarness(t)
	id := h.submit(`
steps:
  - id: a
    run: ["block never"]
`)
	h.b.waitFor("a runs", func() bool { return h.b.ranLocked("a") == 1 })
	h.b.mu.Lock()
	h.b.keepBoxes = true
	h.b.mu.Unlock()
	if err := h.e.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.b.mu.Lock()
	h.b.keepBoxes = false
	h.b.mu.Unlock()
	h.e = h.engine()
	r, err := h.e.Cancel(testCtx(t), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != api.RunCancelled || step(t, r, "a").State != api.StepCancelled || step(t, r, "a").Attempts[0].State != api.StepCancelled {
		t.Fatalf("cancelled: %s %v", r.State, stepStates(r))
	}
	h.b.mu.Lock()
	if len(h.b.boxes) != 0 {
		t.Errorf("sandboxes left: %d", len(h.b.boxes))
	}
	h.b.mu.Unlock()
	if err := h.e.Recover(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if r, _ := h.e.Get(testCtx(t), tenant, id); r.State != api.RunCancelled {
		t.Errorf("recover took up a cancelled run: %s", r.State)
	}
	h.checkEvents(id)
}

// A consumer whose producer succeeded under the previous daemon reads the
// producer's kept stdout after a restart.
func TestRecoverStdinConsumer(t *testing.T) {
	h := newHarness(t)
	id := h.submit(`
steps:
  - group: g
    mode: parallel
    max_parallel: 1
    steps:
      - id: prod
        run: ["echo kept bytes"]
      - id: cons
        stdin_from: prod
        run: ["block-once gate", cat]
`)
	h.b.waitFor("cons runs", func() bool { return h.b.ranLocked("cons") == 1 })
	if err := h.e.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.e = h.engine()
	if err := h.e.Recover(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	r := h.wait(id)
	if r.State != api.RunSucceeded {
		t.Fatalf("run %s: %v", r.State, stepStates(r))
	}
	if c := step(t, r, "cons"); c.Attempt != 2 || c.Result.Stdout != "kept bytes" {
		t.Errorf("cons: attempt %d read %q", c.Attempt, c.Result.Stdout)
	}
	if n := len(h.b.execsOf("prod")); n != 1 {
		t.Errorf("prod ran %d times", n)
	}
}

// A resume refuses a step whose inputs are gone from the artifact
// directory.
func TestResumeInputsGone(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: make
    outputs: [/out]
    run: ["write /out/f=1"]
  - id: use
    inputs: {make: /in}
    run: ["read /in/out/f", fail]
`, api.RunFailed)
	if err := os.RemoveAll(filepath.Join(h.dir, r.ID, "make")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Resume(testCtx(t), tenant, r.ID, ""); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "outputs of step make") {
		t.Fatalf("resume: %v", err)
	}
	// Resumed from make, it collects them again.
	if _, err := h.e.Resume(testCtx(t), tenant, r.ID, "make"); err != nil {
		t.Fatal(err)
	}
	r = h.wait(r.ID)
	if u := step(t, r, "use"); u.Attempt != 2 || u.Result.Stdout != "1" {
		t.Errorf("use: %+v", u)
	}
}

// A run is answered succeeded before its light snapshots are deleted; a
// daemon that stops in between leaves them listed as the record's
// garbage, and the next one's Recover deletes them (children first).
func TestRecoverCollectsGarbage(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
defaults: {snapshot: full}
steps:
  - {id: a, run: ["write x=1"]}
  - {id: b, from: a, run: ["write y=2"]}
`, api.RunSucceeded)
	// As if the daemon had stopped right after the run's success: its
	// snapshots (kept here because they are full) are garbage.
	h.j.mu.Lock()
	rec := h.j.load(r.ID)
	h.j.mu.Unlock()
	rec.Garbage = []string{step(t, r, "a").Snapshot, step(t, r, "b").Snapshot}
	if rec.Garbage[0] == "" || rec.Garbage[1] == "" {
		t.Fatalf("snapshots %v", rec.Garbage)
	}
	if err := h.j.SaveRun(testCtx(t), rec, nil); err != nil {
		t.Fatal(err)
	}
	e := h.engine()
	if err := e.Recover(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.b.mu.Lock()
	left := len(h.b.snaps)
	h.b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d snapshots left after Recover", left)
	}
	h.j.mu.Lock()
	rec = h.j.load(r.ID)
	h.j.mu.Unlock()
	if len(rec.Garbage) != 0 || rec.Run.State != api.RunSucceeded {
		t.Errorf("after Recover: state %s, garbage %v", rec.Run.State, rec.Garbage)
	}
	for _, s := range rec.Run.Steps {
		if s.Snapshot != "" {
			t.Errorf("step %s still names snapshot %s", s.ID, s.Snapshot)
		}
	}
}
