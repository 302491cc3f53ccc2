package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// A parallel group runs its steps at once, never more than max_parallel;
// a nested group's steps count against the enclosing cap too.
func TestParallelMaxParallel(t *testing.T) {
	h := newHarness(t)
	id := h.submit(`
steps:
  - group: g
    mode: parallel
    max_parallel: 2
    steps:
      - {id: s1, run: [hold]}
      - {id: s2, run: [hold]}
      - {id: s3, run: [hold]}
      - group: inner
        mode: parallel
        steps:
          - {id: s4, run: [hold]}
          - {id: s5, run: [hold]}
  - id: after
    run: [ok]
`)
	for left := 5; left > 0; left-- {
		// Two run (one at the end); let one end, and another starts.
		h.b.waitFor("holds", func() bool { return h.b.cur == min(2, left) })
		h.b.tokens <- struct{}{}
	}
	r := h.wait(id)
	if r.State != api.RunSucceeded {
		t.Fatalf("run %s: %v", r.State, stepStates(r))
	}
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if h.b.peak != 2 {
		t.Errorf("at most %d steps ran at once, want 2", h.b.peak)
	}
	if x := h.b.execs[len(h.b.execs)-1]; x.step != "after" {
		t.Errorf("last exec %s", x.step)
	}
}

// A concurrent group under max_parallel 1 runs its ready steps by
// priority (critical, normal, background), first come first within one,
// and gives each its priority's CPU weight.
func TestConcurrentPriority(t *testing.T) {
	h := newHarness(t)
	h.run(`
steps:
  - group: q
    mode: concurrent
    max_parallel: 1
    steps:
      - {id: bg1, priority: background, run: [ok]}
      - {id: n1, run: [ok]}
      - {id: c1, priority: critical, run: [ok]}
      - {id: bg2, priority: background, run: [ok]}
      - {id: n2, priority: normal, run: [ok]}
      - {id: c2, priority: critical, run: [ok]}
`, api.RunSucceeded)
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	var order []string
	for _, x := range h.b.execs {
		order = append(order, x.step)
	}
	if want := []string{"c1", "c2", "n1", "n2", "bg1", "bg2"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	weights := map[string]int{}
	for _, c := range h.b.creates {
		weights[c.Labels[LabelStep]] = c.Limits.CPUWeight
	}
	if weights["c1"] != 1000 || weights["n1"] != 100 || weights["bg1"] != 10 {
		t.Errorf("CPU weights %v", weights)
	}
}

// A step added to a running concurrent group runs, is recorded for a
// restart and evented; adding to a group that ended, to a parallel group
// or to no group is refused.
func TestAddStep(t *testing.T) {
	h := newHarness(t)
	id := h.submit(`
steps:
  - group: q
    mode: concurrent
    steps:
      - {id: first, run: ["block go"]}
  - group: p
    mode: parallel
    steps:
      - {id: par, run: [ok]}
  - id: last
    run: [ok]
`)
	h.b.waitFor("first runs", func() bool { return len(h.b.execs) == 1 })
	ctx := testCtx(t)
	r, err := h.e.AddStep(ctx, tenant, id, "q", []byte(`{"id": "extra", "priority": "critical", "run": ["echo added"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := step(t, r, "extra"); s.State != api.StepPending && s.State != api.StepRunning || s.Group != "q" {
		t.Fatalf("added step: %+v", s)
	}
	if _, err := h.e.AddStep(ctx, tenant, id, "p", []byte(`{"id": "x2", "run": [ok]}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("add to a parallel group: %v", err)
	}
	if _, err := h.e.AddStep(ctx, tenant, id, "nope", []byte(`{"id": "x3", "run": [ok]}`)); !errors.Is(err, ErrNotFound) {
		t.Errorf("add to no group: %v", err)
	}
	if _, err := h.e.AddStep(ctx, tenant, id, "q", []byte(`{"id": "first", "run": [ok]}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("add a duplicate id: %v", err)
	}
	h.b.waitFor("extra runs", func() bool { return len(h.b.execs) == 2 })
	h.b.open("go")
	r = h.wait(id)
	if r.State != api.RunSucceeded {
		t.Fatalf("run %s: %v", r.State, stepStates(r))
	}
	extra := step(t, r, "extra")
	if extra.State != api.StepSucceeded || extra.Result.Stdout != "added" {
		t.Errorf("extra: %+v", extra)
	}
	// "last" waits for the whole group q, the added step included.
	if !slices.Contains(step(t, r, "par").Needs, "extra") {
		t.Errorf("par's needs %v do not include the added step", step(t, r, "par").Needs)
	}
	h.j.mu.Lock()
	rec := h.j.load(id)
	h.j.mu.Unlock()
	if len(rec.Added) != 1 || rec.Added[0].Group != "q" {
		t.Errorf("record's added steps: %+v", rec.Added)
	}
	evs := h.checkEvents(id)
	if got := types(evs, "extra"); len(got) == 0 || got[0] != api.WfStepAdded {
		t.Errorf("extra's events %v", got)
	}
	if _, err := h.e.AddStep(ctx, tenant, id, "q", []byte(`{"id": "late", "run": [ok]}`)); !errors.Is(err, ErrConflict) {
		t.Errorf("add to an ended run: %v", err)
	}
}

// stdin_from: the consumer reads the producer's stdout while both run
// (the producer waits until the consumer has read its first part), and a
// retried consumer reads the same bytes again.
func TestStdinPipe(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - group: g
    mode: parallel
    steps:
      - id: prod
        run: ["echo part1;", "await cons part1;", "echo part2"]
      - id: cons
        stdin_from: prod
        retry: {attempts: 2}
        run: [cat, fail-once]
`, api.RunSucceeded)
	cons := step(t, r, "cons")
	if len(cons.Attempts) != 2 {
		t.Fatalf("cons attempts: %+v", cons.Attempts)
	}
	for _, a := range cons.Attempts {
		if a.Result == nil || a.Result.Stdout != "part1;part2" {
			t.Errorf("attempt %d read %+v", a.Attempt, a.Result)
		}
	}
	if s := step(t, r, "prod").Result.Stdout; s != "part1;part2" {
		t.Errorf("producer's stdout %q", s)
	}
}

// inputs bind a producer's collected outputs read-only; outputs are
// listed with their sha256 and land in the artifact directory.
func TestInputsOutputs(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: make
    outputs: [/out]
    run: ["write /out/r.txt=hello", "write /out/sub/s.txt=sub", "write /other=x"]
  - id: use
    inputs: {make: /in}
    run: ["read /in/out/r.txt"]
  - id: missing
    outputs: [/nothing]
    run: [ok]
`, api.RunFailed)
	mk := step(t, r, "make")
	sum := sha256.Sum256([]byte("hello"))
	if len(mk.Outputs) != 2 || mk.Outputs[0].Path != "/out/r.txt" || mk.Outputs[0].SHA256 != hex.EncodeToString(sum[:]) || mk.Outputs[0].Bytes != 5 {
		t.Fatalf("outputs %+v", mk.Outputs)
	}
	use := step(t, r, "use")
	if use.State != api.StepSucceeded || use.Result.Stdout != "hello" {
		t.Fatalf("use: %+v", use)
	}
	var binds []sandbox.Bind
	h.b.mu.Lock()
	for _, c := range h.b.creates {
		if c.Labels[LabelStep] == "use" {
			binds = c.Inputs
		}
	}
	h.b.mu.Unlock()
	want := []sandbox.Bind{{Source: filepath.Join(h.dir, r.ID, "make", "out"), Target: "/in"}}
	if !slices.Equal(binds, want) {
		t.Errorf("inputs %+v, want %+v", binds, want)
	}
	if m := step(t, r, "missing"); m.State != api.StepFailed || m.Snapshot != "" {
		t.Errorf("a missing output: %+v", m)
	}
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	// The failed step's snapshot was taken, then deleted.
	if len(h.b.deletedSnaps) != 1 {
		t.Errorf("deleted snapshots %v", h.b.deletedSnaps)
	}
}

// A group's budget is made once, when its first step starts, every step
// of the group (nested groups included) runs in it, and it is released
// when the group's steps have all ended.
func TestBudget(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - group: g
    mode: parallel
    budget: {cpus: 1, memory: 256m}
    steps:
      - {id: s1, run: [ok]}
      - {id: s2, priority: critical, run: [ok]}
      - group: inner
        mode: parallel
        steps:
          - {id: s3, run: [ok]}
  - id: after
    run: [ok]
`, api.RunSucceeded)
	bid := r.ID + "-g"
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if h.b.budgets[bid] != 1 || h.b.released[bid] != 1 || len(h.b.budgets) != 1 {
		t.Fatalf("budgets made %v, released %v", h.b.budgets, h.b.released)
	}
	for _, c := range h.b.creates {
		in := c.Labels[LabelStep] != "after"
		if (c.Budget == bid) != in {
			t.Errorf("step %s in budget %q", c.Labels[LabelStep], c.Budget)
		}
	}
	// The budget was released before "after" ran: after's create came
	// after the release (the fake checks no sandbox lives in a released
	// budget).
	var g *api.WorkflowGroup
	for i := range r.Groups {
		if r.Groups[i].ID == "g" {
			g = &r.Groups[i]
		}
	}
	if g == nil || g.Budget == nil || g.Budget.CPUs != 1 || g.State != api.StepSucceeded || g.Mode != "parallel" {
		t.Errorf("group g: %+v", g)
	}
}

// A parallel group wider than the backend's room (a tenant's sandbox
// quota) takes turns: creates refused with ErrCapacity wait for a sandbox
// of the engine to go and are not failed attempts.
func TestParallelWaitsForCapacity(t *testing.T) {
	h := newHarness(t)
	h.b.mu.Lock()
	h.b.quota = 2
	h.b.mu.Unlock()
	r := h.run(`
steps:
  - group: wide
    mode: parallel
    steps:
      - {id: s1, run: [ok]}
      - {id: s2, run: [ok]}
      - {id: s3, run: [ok]}
      - {id: s4, run: [ok]}
      - {id: s5, run: [ok]}
      - {id: s6, run: [ok]}
`, api.RunSucceeded)
	for _, s := range r.Steps {
		if s.State != api.StepSucceeded || s.Attempt != 1 {
			t.Errorf("step %s: %s after %d attempts, want succeeded at the first", s.ID, s.State, s.Attempt)
		}
	}
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if h.b.livePeak > 2 {
		t.Errorf("%d sandboxes lived at once, over the quota of 2", h.b.livePeak)
	}
	t.Logf("%d creates refused for capacity", h.b.refused)
}
