package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/templates"
)

// End-to-end tests of `moat workflow` with the moat binary and a real
// daemon (root): a run's exit codes, what get shows, a daemon killed
// mid-run and started again, the example of examples/workflows, and a
// run without a daemon.

// wfDaemon starts a daemon on a unix socket with a private data
// directory and store, and points the environment at it.
func wfDaemon(t *testing.T, dir string) *testutil.Daemon {
	t.Helper()
	sock := filepath.Join(dir, "api.sock")
	d := testutil.StartDaemon(t, filepath.Join(dir, "data"), "--listen", "unix:"+sock, "--store", filepath.Join(dir, "store"))
	t.Setenv("MOAT_MODE", "")
	t.Setenv("MOAT_URL", "unix:"+sock)
	t.Setenv("MOAT_TOKEN", d.Token)
	return d
}

// writeDoc writes a workflow document into dir and returns its path.
func writeDoc(t *testing.T, dir, name, doc string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// getRun runs `moat workflow get --json RUN`.
func getRun(t *testing.T, id string) *api.WorkflowRun {
	t.Helper()
	o := testutil.Exec(t, "workflow", "get", "--json", id)
	var run api.WorkflowRun
	if err := json.Unmarshal([]byte(o.Stdout), &run); o.Code != 0 || err != nil {
		t.Fatalf("get %s: exit %d, %v\n%s\n%s", id, o.Code, err, o.Stdout, o.Stderr)
	}
	return &run
}

// runID is the run's id that `moat workflow run` wrote on stderr.
func runID(t *testing.T, stderr string) string {
	t.Helper()
	_, rest, ok := strings.Cut(stderr, "moat: workflow run ")
	if !ok {
		t.Fatalf("no run id on stderr:\n%s", stderr)
	}
	return strings.Fields(rest)[0]
}

const threeSteps = `name: three
steps:
  - id: a
    sh: echo one > /workspace/f
  - id: b
    from: a
    sh: cat /workspace/f && echo two >> /workspace/f
    outputs: [/workspace/f]
  - id: c
    inputs: {b: /in}
    sh: test "$(cat /in/workspace/f)" = "$(printf 'one\ntwo')" && echo "$MOAT_STEP_ID $MOAT_STEP_ATTEMPT"
`

func TestWorkflowE2E(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	wfDaemon(t, dir)

	// Three steps: exit 0, the table, and get shows them succeeded.
	o := testutil.Exec(t, "workflow", "run", writeDoc(t, dir, "three.yaml", threeSteps))
	if o.Code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", o.Code, o.Stdout, o.Stderr)
	}
	if !strings.Contains(o.Stdout, "STEP") || strings.Count(o.Stdout, "succeeded") != 3 {
		t.Errorf("run printed:\n%s", o.Stdout)
	}
	id := runID(t, o.Stderr)
	run := getRun(t, id)
	if run.State != api.RunSucceeded || len(run.Steps) != 3 {
		t.Fatalf("get: %+v", run)
	}
	for _, s := range run.Steps {
		if s.State != api.StepSucceeded || s.Attempt != 1 {
			t.Errorf("step %s: %s, attempt %d", s.ID, s.State, s.Attempt)
		}
	}
	if b := run.Steps[1]; len(b.Outputs) != 1 || b.Outputs[0].Path != "/workspace/f" || len(b.Outputs[0].SHA256) != 64 {
		t.Errorf("b's outputs: %+v", b.Outputs)
	}
	if c := run.Steps[2]; c.Result == nil || c.Result.Stdout != "c 1\n" {
		t.Errorf("c's result: %+v", c.Result)
	}
	if o := testutil.Exec(t, "workflow", "logs", "--step", "c", id); o.Code != 0 || !strings.Contains(o.Stdout, "c#1 stdout| c 1") {
		t.Errorf("logs --step c: %d\n%s%s", o.Code, o.Stdout, o.Stderr)
	}
	if o := testutil.Exec(t, "workflow", "ls"); o.Code != 0 || !strings.Contains(o.Stdout, id) || !strings.Contains(o.Stdout, "3/3") {
		t.Errorf("ls: %d\n%s%s", o.Code, o.Stdout, o.Stderr)
	}

	// A step that fails: exit 1, its stderr's end on stderr, the next
	// step skipped.
	failing := "steps:\n  - id: ok\n    sh: 'true'\n  - id: bad\n    sh: echo doomed >&2; exit 3\n  - id: after\n    sh: 'true'\n"
	o = testutil.Exec(t, "workflow", "run", "--follow", writeDoc(t, dir, "fail.yaml", failing))
	if o.Code != 1 || !strings.Contains(o.Stderr, "step bad failed (attempt 1, exit 3") || !strings.Contains(o.Stderr, "  doomed") ||
		!strings.Contains(o.Stdout, "step after skipped") {
		t.Errorf("failing run: exit %d\n%s\n%s", o.Code, o.Stdout, o.Stderr)
	}
	if r := getRun(t, runID(t, o.Stderr)); r.State != api.RunFailed || r.Steps[2].State != api.StepSkipped {
		t.Errorf("failed run: %+v", r)
	}

	// An invalid document: 125, the line, and nothing ran.
	invalid := "steps:\n  - id: a\n    sh: 'true'\n    colour: blue\n"
	o = testutil.ExecStdin(t, []byte(invalid), "workflow", "run", "-")
	if o.Code != 125 || !strings.Contains(o.Stderr, "line 4") || strings.Contains(o.Stderr, "moat: workflow run wf-") {
		t.Errorf("invalid document: exit %d\n%s", o.Code, o.Stderr)
	}
}

// TestWorkflowE2EDaemonKilled: the daemon is killed (SIGKILL) while a
// step runs; started again on the same data directory, it takes the run
// up by itself: the run succeeds, the step before the killed one ran
// once, the killed one twice.
func TestWorkflowE2EDaemonKilled(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	d := wfDaemon(t, dir)
	// b's first attempt outlives the daemon; its second ends at once.
	doc := `name: killed
steps:
  - id: a
    sh: echo a > /workspace/a
  - id: b
    from: a
    sh: test "$MOAT_STEP_ATTEMPT" != 1 || sleep 120
  - id: c
    sh: 'true'
`
	o := testutil.Exec(t, "workflow", "run", "--detach", writeDoc(t, dir, "killed.yaml", doc))
	if o.Code != 0 {
		t.Fatalf("run --detach: exit %d\n%s", o.Code, o.Stderr)
	}
	id := strings.TrimSpace(o.Stdout)

	// Follow the run until b's sandbox runs its command, then kill.
	c, err := client.New(client.WithHTTP(os.Getenv("MOAT_URL"), d.Token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errRunning := errors.New("b runs")
	_, err = c.WorkflowEvents(ctx, api.WorkflowEvents{Run: id, Follow: true}, func(ev api.WorkflowEvent) error {
		if ev.Step == "b" && ev.Type == api.WfStepSandbox {
			return errRunning
		}
		if ev.Type == api.WfRunSucceeded || ev.Type == api.WfRunFailed {
			t.Fatalf("the run ended before b ran: %+v", ev)
		}
		return nil
	})
	if !errors.Is(err, errRunning) {
		t.Fatalf("following: %v", err)
	}
	if err := d.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.Cmd.Wait()

	wfDaemon(t, dir)
	o = testutil.Exec(t, "workflow", "wait", "--json", id)
	var run api.WorkflowRun
	if err := json.Unmarshal([]byte(o.Stdout), &run); o.Code != 0 || err != nil {
		t.Fatalf("wait after the restart: exit %d, %v\n%s\n%s", o.Code, err, o.Stdout, o.Stderr)
	}
	attempts := map[string]int{}
	for _, s := range run.Steps {
		attempts[s.ID] = s.Attempt
		if s.State != api.StepSucceeded {
			t.Errorf("step %s: %s", s.ID, s.State)
		}
	}
	if attempts["a"] != 1 || attempts["b"] != 2 || attempts["c"] != 1 {
		t.Errorf("attempts %v, want a 1, b 2, c 1", attempts)
	}
	if run.Resumes < 1 {
		t.Errorf("resumes %d after a restart", run.Resumes)
	}
}

// TestWorkflowE2EExample runs examples/workflows/build-and-test.yaml: it
// succeeds, and its report is among the artifacts.
func TestWorkflowE2EExample(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("cc"); err != nil {
		testutil.SkipOrFail(t, "the example builds with the host's cc")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		testutil.SkipOrFail(t, "the example's property test runs python3")
	}
	dir := t.TempDir()
	wfDaemon(t, dir)
	o := testutil.Exec(t, "workflow", "run", "--follow", filepath.Join("..", "..", "examples", "workflows", "build-and-test.yaml"))
	if o.Code != 0 {
		t.Fatalf("example: exit %d\n%s\n%s", o.Code, o.Stdout, o.Stderr)
	}
	run := getRun(t, runID(t, o.Stderr))
	var report *api.WorkflowStep
	for i, s := range run.Steps {
		if s.State != api.StepSucceeded {
			t.Errorf("step %s: %s", s.ID, s.State)
		}
		if s.ID == "report" {
			report = &run.Steps[i]
		}
	}
	if report == nil || len(report.Outputs) != 1 || report.Outputs[0].Path != "/workspace/report/summary.md" {
		t.Fatalf("report: %+v", report)
	}
	if out := report.Result.Stdout; !strings.Contains(out, "unit: 12 passed") || !strings.Contains(out, "cli: 6 passed") ||
		!strings.Contains(out, "2000 random expressions agree") {
		t.Errorf("report printed:\n%s", out)
	}
}

// TestWorkflowE2ELocal: without a daemon, run starts a private one, which
// runs the workflow and ends with the command; the steps' snapshots go
// with it (b's, which c started from, too), but a full one, which stays
// in the store.
func TestWorkflowE2ELocal(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	// The private daemon's store is the config's: keep it in the test's
	// directory.
	storeDir := filepath.Join(dir, "store")
	cfg := writeDoc(t, dir, "config.toml", "[store]\ndir = \""+storeDir+"\"\n")
	doc := writeDoc(t, dir, "two.yaml", `steps:
  - id: a
    sh: echo hi > /workspace/x
    snapshot: full
  - id: b
    from: a
    sh: cat /workspace/x && echo more > /workspace/y
  - id: c
    from: b
    sh: cat /workspace/y
`)
	cmd := exec.Command(testutil.Moat(t), "workflow", "run", "--local", "--json", doc)
	cmd.Env = append(os.Environ(), "MOAT_CONFIG="+cfg, "MOAT_URL=", "MOAT_MODE=", "MOAT_DATA=")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var run api.WorkflowRun
	if err != nil || json.Unmarshal([]byte(out.String()), &run) != nil {
		t.Fatalf("local run: %v\n%s\n%s", err, out.String(), errb.String())
	}
	if run.State != api.RunSucceeded || len(run.Steps) != 3 || run.Steps[1].Result == nil || run.Steps[1].Result.Stdout != "hi\n" {
		t.Fatalf("local run: %+v", run)
	}
	st, err := templates.Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := st.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, sn := range snaps {
		left = append(left, sn.ID+" of "+sn.Tenant)
	}
	if len(snaps) != 1 || snaps[0].ID != run.Steps[0].Snapshot || snaps[0].Tenant != "local" {
		t.Errorf("left in the store: %q, want a's full snapshot %q only", left, run.Steps[0].Snapshot)
	}
}
