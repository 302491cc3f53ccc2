package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

// A sequential chain where each step starts from its predecessor's
// snapshot: state flows, each start snapshot is the predecessor's, and the
// light snapshots are deleted when the run succeeds.
func TestSequentialChainFrom(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
name: chain
steps:
  - id: a
    run: ["write x=1"]
  - id: b
    from: a
    run: ["expect x=1", "write y=2"]
  - id: c
    from: b
    run: ["expect x=1", "expect y=2"]
  - id: d
    run: ["absent x"]
`, api.RunSucceeded)
	if r.Name != "chain" || r.Ended == nil {
		t.Errorf("run: name %q ended %v", r.Name, r.Ended)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		s := step(t, r, id)
		if s.State != api.StepSucceeded || s.Attempt != 1 || len(s.Attempts) != 1 || s.Result == nil {
			t.Fatalf("step %s: %+v", id, s)
		}
		if s.Snapshot != "" {
			t.Errorf("step %s keeps light snapshot %s after success", id, s.Snapshot)
		}
	}
	// b started from a's snapshot, c from b's; a and d fresh.
	snapOf := map[string]string{}
	for _, ev := range h.j.eventsOf(r.ID) {
		if ev.Type == api.WfStepSnapshot {
			snapOf[ev.Step] = ev.Snapshot
		}
	}
	want := map[string]string{"a": "", "b": snapOf["a"], "c": snapOf["b"], "d": ""}
	for id, w := range want {
		if got := step(t, r, id).Attempts[0].StartSnapshot; got != w {
			t.Errorf("step %s started from %q, want %q", id, got, w)
		}
	}
	if len(snapOf) != 4 {
		t.Errorf("snapshots %v, want one per step", snapOf)
	}
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if len(h.b.snaps) != 0 {
		t.Errorf("snapshots left after success: %v", h.b.snaps)
	}
	if len(h.b.boxes) != 0 {
		t.Errorf("sandboxes left: %d", len(h.b.boxes))
	}
	// Every sandbox is labelled and gets the step's environment.
	for _, c := range h.b.creates {
		if c.Labels[LabelRun] != r.ID || c.Labels[LabelStep] == "" || c.Labels[LabelAttempt] != "1" {
			t.Errorf("labels %v", c.Labels)
		}
		if envOf(c.Env, "MOAT_WORKFLOW_RUN") != r.ID || envOf(c.Env, "MOAT_STEP_ID") != c.Labels[LabelStep] || envOf(c.Env, "MOAT_STEP_ATTEMPT") != "1" {
			t.Errorf("env %v", c.Env)
		}
		if c.CPUWeight != 100 && c.Limits.CPUWeight != 100 {
			t.Errorf("normal step's CPU weight: %+v", c)
		}
	}
}

// A full snapshot outlives the run; light ones of a failed run are kept
// (a resume needs them).
func TestSnapshotsKept(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: a
    snapshot: full
    run: ["write x=1"]
  - id: b
    run: ["ok"]
  - id: c
    snapshot: none
    run: ["ok"]
`, api.RunSucceeded)
	if s := step(t, r, "a").Snapshot; s == "" {
		t.Fatal("full snapshot not kept")
	}
	if s := step(t, r, "c").Snapshot; s != "" {
		t.Errorf("snapshot none took %s", s)
	}
	h.b.mu.Lock()
	if len(h.b.snaps) != 1 || h.b.snaps[step(t, r, "a").Snapshot] == nil {
		t.Errorf("snapshots after success: %v (want a's full one only)", h.b.snaps)
	}
	h.b.mu.Unlock()

	r = h.run(`
steps:
  - id: a
    run: ["write x=1"]
  - id: b
    from: a
    run: ["fail"]
`, api.RunFailed)
	a := step(t, r, "a")
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if a.Snapshot == "" || h.b.snaps[a.Snapshot] == nil {
		t.Errorf("light snapshot of a failed run deleted (%q)", a.Snapshot)
	}
	if !strings.Contains(r.Error, "step b failed") {
		t.Errorf("run error %q", r.Error)
	}
}

// A failure skips what waits for it, transitively, with the cause; a
// parallel sibling still runs.
func TestSkipPropagation(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - group: g
    mode: parallel
    steps:
      - id: bad
        run: ["fail"]
      - id: sibling
        run: ["ok"]
  - id: after
    run: ["ok"]
  - id: later
    run: ["ok"]
`, api.RunFailed)
	for id, want := range map[string]string{"bad": api.StepFailed, "sibling": api.StepSucceeded, "after": api.StepSkipped, "later": api.StepSkipped} {
		if s := step(t, r, id); s.State != want {
			t.Errorf("step %s: %s, want %s", id, s.State, want)
		}
	}
	if e := step(t, r, "after").Error; !strings.Contains(e, "bad, which failed") {
		t.Errorf("skip cause %q", e)
	}
	if e := step(t, r, "later").Error; !strings.Contains(e, "after, which was skipped") {
		t.Errorf("skip cause %q", e)
	}
	if len(h.b.execsOf("after")) != 0 {
		t.Error("skipped step ran")
	}
	evs := h.checkEvents(r.ID)
	if got := types(evs, "after"); !slices.Equal(got, []string{api.WfStepSkipped}) {
		t.Errorf("events of after: %v", got)
	}
	for _, g := range r.Groups {
		if g.ID == "g" && g.State != api.StepFailed {
			t.Errorf("group g: %s", g.State)
		}
	}
}

// The event stream: followed from the start, it has every event once, in
// order, and ends with the run.
func TestEventsFollow(t *testing.T) {
	h := newHarness(t)
	id := h.submit(`
steps:
  - id: a
    run: ["block go"]
  - id: b
    run: ["echo hi"]
`)
	var mu sync.Mutex
	var got []api.WorkflowEvent
	done := make(chan *api.WorkflowRun)
	go func() {
		r, err := h.e.Events(testCtx(t), tenant, id, 0, true, func(ev api.WorkflowEvent) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, ev)
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	h.b.waitFor("a runs", func() bool { return len(h.b.execs) == 1 })
	h.b.open("go")
	r := <-done
	if r == nil || r.State != api.RunSucceeded {
		t.Fatalf("events ended with %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	want := h.checkEvents(id)
	if len(got) != len(want) {
		t.Fatalf("followed %d events, journal has %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Seq != want[i].Seq || got[i].Type != want[i].Type {
			t.Fatalf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	wantTypes := []string{
		api.WfRunStarted,
		api.WfStepStarted, api.WfStepSandbox, api.WfStepSnapshot, api.WfStepSucceeded,
		api.WfStepStarted, api.WfStepSandbox, api.WfStepSnapshot, api.WfStepSucceeded,
		api.WfRunSucceeded,
	}
	if tt := types(got); !slices.Equal(tt, wantTypes) {
		t.Errorf("types %v\nwant %v", tt, wantTypes)
	}
	// After a sequence number, without follow.
	var tail []uint64
	if _, err := h.e.Events(testCtx(t), tenant, id, 8, false, func(ev api.WorkflowEvent) error {
		tail = append(tail, ev.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tail, []uint64{9, 10}) {
		t.Errorf("events after 8: %v", tail)
	}
}

func TestInvalidDocument(t *testing.T) {
	h := newHarness(t)
	_, err := h.e.Submit(testCtx(t), owner, api.CreateWorkflow{Document: "steps:\n  - id: a\n    run: [ok]\n    bogus: 1\n"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "4") {
		t.Fatalf("submit of an invalid document: %v", err)
	}
	_, err = h.e.Submit(testCtx(t), owner, api.CreateWorkflow{Document: "steps:\n  - id: a\n    from: b\n    run: [ok]\n  - id: b\n    run: [ok]\n"})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("from a later step: %v", err)
	}
}

// Runs belong to their tenant: another one sees none of them.
func TestTenancy(t *testing.T) {
	h := newHarness(t)
	r := h.run("name: mine\nsteps:\n  - id: a\n    run: [ok]\n", api.RunSucceeded)
	ctx := testCtx(t)
	// Controls: the owner sees the run, and cancelling it is a conflict
	// (it ended), not "not found".
	if got, err := h.e.Get(ctx, tenant, r.ID); err != nil || got.ID != r.ID {
		t.Fatalf("get by its tenant: %v", err)
	}
	if _, err := h.e.Cancel(ctx, tenant, r.ID); !errors.Is(err, ErrConflict) {
		t.Errorf("cancel of an ended run by its tenant: %v", err)
	}
	if _, err := h.e.Get(ctx, "other", r.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("get by another tenant: %v", err)
	}
	if _, err := h.e.Get(ctx, tenant, "wf-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get of no run: %v", err)
	}
	if _, err := h.e.Get(ctx, tenant, "../../etc"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get of a bad id: %v", err)
	}
	if _, err := h.e.Cancel(ctx, "other", r.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("cancel by another tenant: %v", err)
	}
	if _, err := h.e.Events(ctx, "other", r.ID, 0, false, func(api.WorkflowEvent) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("events by another tenant: %v", err)
	}
	list, err := h.e.List(ctx, tenant, "", 0)
	if err != nil || len(list) != 1 || list[0].ID != r.ID || list[0].Name != "mine" {
		t.Fatalf("list: %v %+v", err, list)
	}
	if s := list[0].Steps[0]; s.State != api.StepSucceeded || s.Attempts != nil || s.Result != nil {
		t.Errorf("listed step: %+v", s)
	}
	if list, _ := h.e.List(ctx, "other", "", 0); len(list) != 0 {
		t.Errorf("another tenant lists %d runs", len(list))
	}
	if list, _ := h.e.List(ctx, tenant, api.RunFailed, 0); len(list) != 0 {
		t.Errorf("failed runs: %d", len(list))
	}
}

// Close is idempotent and refuses new runs.
func TestClosed(t *testing.T) {
	h := newHarness(t)
	if err := h.e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := h.e.Submit(testCtx(t), owner, api.CreateWorkflow{Document: "steps:\n  - id: a\n    run: [ok]\n"})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after close: %v", err)
	}
}
