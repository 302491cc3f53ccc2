package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// A step that fails on its first attempt and passes on its second: the
// retry starts from the same snapshot as the first attempt (not from the
// failed attempt's state, not from scratch: its ancestor ran once), with
// MOAT_STEP_ATTEMPT=2.
func TestRetryFromSnapshot(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: a
    run: ["write x=1"]
  - id: b
    from: a
    retry: {attempts: 2, backoff: 1ms}
    run: ["absent dirty", "write dirty=1", "expect x=1", "fail-once", "write y=2"]
  - id: c
    from: b
    run: ["expect y=2", "expect dirty=1"]
`, api.RunSucceeded)
	a, b := step(t, r, "a"), step(t, r, "b")
	if len(h.b.execsOf("a")) != 1 || a.Attempt != 1 {
		t.Errorf("a ran %d times", len(h.b.execsOf("a")))
	}
	if b.Attempt != 2 || len(b.Attempts) != 2 || b.Attempts[0].State != api.StepFailed || b.Attempts[1].State != api.StepSucceeded {
		t.Fatalf("b's attempts: %+v", b.Attempts)
	}
	start := b.Attempts[0].StartSnapshot
	if start == "" || b.Attempts[1].StartSnapshot != start {
		t.Errorf("attempts of b started from %q and %q", start, b.Attempts[1].StartSnapshot)
	}
	x := h.b.execsOf("b")
	if len(x) != 2 || x[0].start != start || x[1].start != start {
		t.Fatalf("b's execs: %+v", x)
	}
	if envOf(x[1].env, "MOAT_STEP_ATTEMPT") != "2" || x[1].attempt != 2 {
		t.Errorf("second attempt's env: %v", x[1].env)
	}
	if b.Attempts[0].Result == nil || b.Attempts[0].Result.ExitCode != 1 || !strings.Contains(b.Attempts[0].Error, "exit code 1") {
		t.Errorf("failed attempt: %+v", b.Attempts[0])
	}
	evs := h.checkEvents(r.ID)
	got := types(evs, "b")
	want := []string{
		api.WfStepStarted, api.WfStepSandbox, api.WfStepRetrying,
		api.WfStepStarted, api.WfStepSandbox, api.WfStepSnapshot, api.WfStepSucceeded,
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("b's events %v, want %v", got, want)
	}
	// The failed attempt's sandbox was deleted too.
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if len(h.b.boxes) != 0 || len(h.b.deletedBoxes) != 4 {
		t.Errorf("sandboxes: %d left, %d deleted", len(h.b.boxes), len(h.b.deletedBoxes))
	}
}

// Attempts run out: the step fails after its last one.
func TestRetryExhausted(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: a
    retry: {attempts: 3}
    run: ["fail"]
`, api.RunFailed)
	a := step(t, r, "a")
	if a.Attempt != 3 || a.State != api.StepFailed || len(h.b.execsOf("a")) != 3 {
		t.Fatalf("a: %+v", a)
	}
}

// A retry from scratch runs the step's `from` chain again, in fresh
// attempts, and starts from the new snapshot; the old light one is
// deleted.
func TestRetryFromScratch(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: a
    run: ["write x=1"]
  - id: mid
    run: ["ok"]
  - id: b
    from: a
    retry: {attempts: 2, from: scratch}
    run: ["expect x=1", "fail-once"]
`, api.RunSucceeded)
	a, b := step(t, r, "a"), step(t, r, "b")
	if a.Attempt != 2 || len(a.Attempts) != 2 || len(h.b.execsOf("a")) != 2 {
		t.Fatalf("a ran %d times: %+v", len(h.b.execsOf("a")), a.Attempts)
	}
	if len(h.b.execsOf("mid")) != 1 {
		t.Errorf("mid (not in b's from chain) ran %d times", len(h.b.execsOf("mid")))
	}
	if b.Attempt != 2 || b.Attempts[0].StartSnapshot == b.Attempts[1].StartSnapshot {
		t.Fatalf("b's attempts: %+v", b.Attempts)
	}
	if envOf(h.b.execsOf("a")[1].env, "MOAT_STEP_ATTEMPT") != "2" {
		t.Error("a's second run is not its attempt 2")
	}
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if !contains(h.b.deletedSnaps, b.Attempts[0].StartSnapshot) {
		t.Errorf("a's first snapshot %s not deleted (%v)", b.Attempts[0].StartSnapshot, h.b.deletedSnaps)
	}
	if len(h.b.snaps) != 0 {
		t.Errorf("snapshots left: %v", h.b.snaps)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		base  time.Duration
		tries int
		want  time.Duration
	}{
		{0, 1, 0}, {time.Second, 1, time.Second}, {time.Second, 2, 2 * time.Second},
		{time.Second, 3, 4 * time.Second}, {time.Second, 10, time.Minute}, {2 * time.Minute, 1, time.Minute},
	} {
		if got := backoff(c.base, c.tries); got != c.want {
			t.Errorf("backoff(%v, %d) = %v, want %v", c.base, c.tries, got, c.want)
		}
	}
}
