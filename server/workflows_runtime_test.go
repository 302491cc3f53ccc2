package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/store"
)

// The workflow tests below run on the real Linux runtime (root): what
// the kernel and the snapshot store do for steps.

// waitRun follows a run over HTTP to its end and returns it.
func (h *harness) waitRun(token, run string) api.WorkflowRun {
	h.t.Helper()
	h.runEvents(token, run, true)
	return h.getRun(token, run)
}

// wantSucceeded fails the test unless run succeeded; it shows each step.
func wantSucceeded(t *testing.T, run api.WorkflowRun) {
	t.Helper()
	if run.State == api.RunSucceeded {
		return
	}
	for _, st := range run.Steps {
		res := ""
		if st.Result != nil {
			res = fmt.Sprintf("exit %d %q %q", st.Result.ExitCode, st.Result.Stdout, st.Result.Stderr)
		}
		t.Logf("step %s: %s attempt %d error %q %s", st.ID, st.State, st.Attempt, st.Error, res)
	}
	t.Fatalf("run %s: %s (%s)", run.ID, run.State, run.Error)
}

// TestWorkflowRetryFromSnapshot is the failure injection: step b starts
// from a's snapshot, fails on its first attempt after writing a file, and
// passes on its second only if that file is absent and a's is there: the
// retry started from a's snapshot, neither from scratch nor from the
// failed attempt's filesystem. a ran once.
func TestWorkflowRetryFromSnapshot(t *testing.T) {
	h := newHarness(t, withLayers(t))
	run := h.createRun(tokenA, wfDoc(
		"steps:",
		"  - id: a",
		"    sh: mkdir -p /workspace/state && echo a > /workspace/state/a",
		"    snapshot: light",
		"  - id: b",
		"    from: a",
		"    snapshot: none",
		"    retry: {attempts: 2}",
		"    sh: |",
		`      if [ "$MOAT_STEP_ATTEMPT" = 1 ]; then echo junk > /workspace/state/junk; exit 3; fi`,
		"      test -f /workspace/state/a && test ! -e /workspace/state/junk && echo clean",
	))
	got := h.waitRun(tokenA, run.ID)
	wantSucceeded(t, got)
	a, b := stepOf(t, got, "a"), stepOf(t, got, "b")
	if a.Attempt != 1 || len(a.Attempts) != 1 {
		t.Errorf("a ran %d times: %+v", len(a.Attempts), a.Attempts)
	}
	if b.Attempt != 2 || len(b.Attempts) != 2 || b.Attempts[0].State != api.StepFailed || b.Attempts[0].Result == nil ||
		b.Attempts[0].Result.ExitCode != 3 || b.Result == nil || b.Result.Stdout != "clean\n" {
		t.Fatalf("b: %+v", b)
	}
	for _, at := range b.Attempts {
		if at.StartSnapshot == "" || at.StartSnapshot != b.Attempts[0].StartSnapshot {
			t.Errorf("b's attempt %d started from %q", at.Attempt, at.StartSnapshot)
		}
	}
	// A light snapshot goes once the run has succeeded.
	var snaps api.SnapshotList
	h.do("GET", "/v1/snapshots", tokenA, nil).decode(t, &snaps)
	if len(snaps.Snapshots) != 0 {
		t.Errorf("snapshots left after the run: %+v", snaps.Snapshots)
	}
}

// TestWorkflowInputsOutputs: a step's outputs appear read-only at another
// step's input path, with the content whose sha256 the first step's
// record holds; every step has the engine's environment.
func TestWorkflowInputsOutputs(t *testing.T) {
	h := newHarness(t, nil)
	run := h.createRun(tokenA, wfDoc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - id: produce",
		"    sh: mkdir -p /workspace/out && printf payload-123 > /workspace/out/data.txt && ln -s /etc/passwd /workspace/out/link",
		"    outputs: [/workspace/out]",
		"  - id: consume",
		"    inputs: {produce: /in}",
		"    sh: |",
		"      cat /in/workspace/out/data.txt; echo",
		"      sha256sum /in/workspace/out/data.txt",
		"      touch /in/new 2>/dev/null && echo writable || echo read-only",
		`      echo "$MOAT_WORKFLOW_RUN $MOAT_STEP_ID $MOAT_STEP_ATTEMPT"`,
	))
	got := h.waitRun(tokenA, run.ID)
	wantSucceeded(t, got)
	p, c := stepOf(t, got, "produce"), stepOf(t, got, "consume")
	if len(p.Outputs) != 1 || p.Outputs[0].Path != "/workspace/out/data.txt" || p.Outputs[0].Bytes != int64(len("payload-123")) {
		t.Fatalf("produce's outputs (the symlink kept, not listed): %+v", p.Outputs)
	}
	want := fmt.Sprintf("payload-123\n%s  /in/workspace/out/data.txt\nread-only\n%s consume 1\n", p.Outputs[0].SHA256, run.ID)
	if c.Result == nil || c.Result.Stdout != want {
		t.Fatalf("consume: %+v, want stdout %q", c.Result, want)
	}
}

// TestWorkflowStdinFrom: a producer's stdout streams into a consumer's
// stdin while both run.
func TestWorkflowStdinFrom(t *testing.T) {
	h := newHarness(t, nil)
	run := h.createRun(tokenA, wfDoc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - group: pipe",
		"    mode: parallel",
		"    steps:",
		"      - id: producer",
		"        sh: for i in 1 2 3; do echo line$i; sleep 0.3; done",
		"      - id: consumer",
		"        stdin_from: producer",
		"        sh: while read l; do echo got $l; done",
	))
	got := h.waitRun(tokenA, run.ID)
	wantSucceeded(t, got)
	p, c := stepOf(t, got, "producer"), stepOf(t, got, "consumer")
	if c.Result == nil || c.Result.Stdout != "got line1\ngot line2\ngot line3\n" {
		t.Fatalf("consumer: %+v", c.Result)
	}
	if c.Started == nil || p.Ended == nil || !c.Started.Before(*p.Ended) {
		t.Errorf("the consumer started at %v, the producer ended at %v: not while both ran", c.Started, p.Ended)
	}
}

// TestWorkflowBudget: a parallel group of two CPU burners with budget
// cpus 0.5 uses at most half a CPU over the group's life; the same group
// without a budget (the control), running at the same time, uses more
// than half a CPU. On a host so loaded (by others) that two processes
// cannot get half a CPU, the control proves nothing: the test says so
// and is skipped after checking the budget's bound.
func TestWorkflowBudget(t *testing.T) {
	h := newHarness(t, nil)
	burner := "            sh: timeout 1 sh -c 'while :; do :; done' || true"
	run := h.createRun(tokenA, wfDoc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - group: both",
		"    mode: parallel",
		"    steps:",
		"      - group: capped",
		"        mode: parallel",
		"        budget: {cpus: 0.5}",
		"        steps:",
		"          - id: burn1",
		burner,
		"          - id: burn2",
		burner,
		"      - group: control",
		"        mode: parallel",
		"        steps:",
		"          - id: free1",
		burner,
		"          - id: free2",
		burner,
	))
	got := h.waitRun(tokenA, run.ID)
	wantSucceeded(t, got)
	budgets := h.workflowAuditEvents("workflow.budget")
	if len(budgets) != 1 {
		t.Fatalf("workflow.budget events: %+v", budgets)
	}
	var used struct {
		CPUMs *int64 `json:"cpu_ms"`
	}
	if err := json.Unmarshal(budgets[0].Result, &used); err != nil || used.CPUMs == nil {
		t.Fatalf("the budget's result: %s", budgets[0].Result)
	}
	// A group's life: from its first step's start to its last's end.
	life := func(ids ...string) time.Duration {
		var first, last time.Time
		for _, id := range ids {
			st := stepOf(t, got, id)
			if first.IsZero() || st.Started.Before(first) {
				first = *st.Started
			}
			if st.Ended.After(last) {
				last = *st.Ended
			}
		}
		return last.Sub(first)
	}
	cpu := func(ids ...string) time.Duration {
		var sum time.Duration
		for _, id := range ids {
			r := stepOf(t, got, id).Result
			sum += time.Duration(r.CPUUserMs+r.CPUSysMs) * time.Millisecond
		}
		return sum
	}
	const tolerance = 100 * time.Millisecond
	capped, cappedWall := time.Duration(*used.CPUMs)*time.Millisecond, life("burn1", "burn2")
	free, freeWall := cpu("free1", "free2"), life("free1", "free2")
	t.Logf("budget cpus 0.5: %v of CPU in %v (the steps' own count: %v); control: %v in %v", capped, cappedWall, cpu("burn1", "burn2"), free, freeWall)
	if capped > cappedWall/2+tolerance {
		t.Errorf("the budgeted group used %v of CPU in %v: more than 0.5 CPU", capped, cappedWall)
	}
	if free <= freeWall/2+tolerance {
		if load, cpus := hostLoad(t), runtime.NumCPU(); load > float64(cpus) {
			t.Skipf("the control used %v of CPU in %v, no more than the budget allows, on a host with load %.1f on %d CPUs: inconclusive", free, freeWall, load, cpus)
		}
		t.Errorf("the control group used %v of CPU in %v: no more than the budget would allow, so the test proves nothing", free, freeWall)
	}
}

// TestWorkflowRestart: a run whose second step is running when the daemon
// stops stays unfinished in the store; the next daemon on the same store
// takes it up: the interrupted step runs again (attempt 2) and the run
// succeeds, and the step that had ended does not run again.
func TestWorkflowRestart(t *testing.T) {
	h := newHarness(t, nil)
	run := h.createRun(tokenA, wfDoc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - id: first",
		"    sh: echo one",
		"  - id: second",
		"    sh: |",
		`      if [ "$MOAT_STEP_ATTEMPT" = 1 ]; then sleep 30; fi`,
		"      echo two",
	))
	// Until the second step's sandbox exists.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := h.getRun(tokenA, run.ID)
		st := stepOf(t, got, "second")
		if st.State == api.StepRunning && len(st.Attempts) == 1 && st.Attempts[0].Sandbox != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second step did not start: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx := context.Background()
	if err := h.svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := h.st.GetWorkflowRun(ctx, "a", run.ID); err != nil || rec.State != api.RunRunning {
		t.Fatalf("after the stop, the store has %+v, %v", rec, err)
	}
	svc, err := New(h.svc.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got, err := svc.wf.eng.Wait(wctx, "a", run.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, *got)
	if st := stepOf(t, *got, "first"); len(st.Attempts) != 1 {
		t.Errorf("the first step ran again: %+v", st.Attempts)
	}
	st := stepOf(t, *got, "second")
	if st.Attempt != 2 || len(st.Attempts) != 2 || st.Attempts[0].State != "interrupted" || st.Result == nil || st.Result.Stdout != "two\n" {
		t.Errorf("the second step: %+v", st)
	}
	if got.Resumes != 1 {
		t.Errorf("resumes = %d", got.Resumes)
	}
	// The audit has one end of each step: none twice across the restart.
	if n := len(h.workflowAuditEvents("workflow.step")); n != 2 {
		t.Errorf("%d workflow.step events, want 2", n)
	}
	if evs, err := svc.cfg.Store.WorkflowEvents(ctx, run.ID, 0, 0); err != nil || !strings.Contains(fmt.Sprint(eventTypes(decodeEvents(t, evs))), api.WfRunInterrupted) {
		t.Errorf("the run's events lack %s: %v", api.WfRunInterrupted, err)
	}
}

// decodeEvents decodes a run's stored events.
func decodeEvents(t *testing.T, rows []store.WorkflowEvent) []api.WorkflowEvent {
	t.Helper()
	out := make([]api.WorkflowEvent, len(rows))
	for i, r := range rows {
		if err := json.Unmarshal(r.Body, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// hostLoad is the host's load average of the last minute.
func hostLoad(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		t.Fatalf("/proc/loadavg: %q", b)
	}
	load, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return load
}
