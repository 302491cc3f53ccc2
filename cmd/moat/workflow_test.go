package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/sandbox"
)

// These tests cover `moat workflow` against a fake daemon (no root): the
// command line, what each subcommand prints, its exit codes, and where
// run decides to run. The end-to-end tests with a real daemon are in
// workflow_e2e_test.go.

// wfRunCLI runs `moat workflow ARGS...` in-process.
func wfRunCLI(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return cliRun("workflow", runWorkflow, stdin, args...)
}

func TestWorkflowCLIUsage(t *testing.T) {
	t.Setenv("MOAT_URL", "http://127.0.0.1:1") // nothing is dialled
	t.Setenv("MOAT_TOKEN", "tok")
	t.Setenv("MOAT_MODE", "")
	for _, sub := range []string{"run", "ls", "get", "logs", "wait", "cancel", "resume"} {
		out, _, code := wfRunCLI(t, "", sub, "--help")
		if code != 0 || !strings.Contains(out, "Usage:\n  moat workflow "+sub) {
			t.Errorf("%s --help (%d):\n%s", sub, code, out)
		}
	}
	out, _, code := wfRunCLI(t, "", "help")
	if code != 0 || !strings.Contains(out, "Exit codes:") || !strings.Contains(out, "resume") {
		t.Errorf("help (%d):\n%s", code, out)
	}
	out, _, _ = wfRunCLI(t, "", "run", "--help")
	for _, want := range []string{"125", "--follow", "--json", "--local", "--detach", "--label"} {
		if !strings.Contains(out, want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
	file := filepath.Join(t.TempDir(), "wf.yaml")
	if err := os.WriteFile(file, []byte("steps: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{}, {"bogus"}, {"run"}, {"run", file, file}, {"run", "--label", "novalue", file},
		{"run", "--detach", "--follow", file}, {"run", "--detach", "--local", file},
		{"run", filepath.Join(t.TempDir(), "missing.yaml")}, {"run", "--bogus", file},
		{"ls", "x"}, {"ls", "--state", "bogus"}, {"ls", "--limit", "-1"}, {"get"}, {"get", "a", "b"},
		{"logs"}, {"wait"}, {"cancel"}, {"resume"}, {"resume", "--from"},
	} {
		_, errOut, code := wfRunCLI(t, "", args...)
		if code != 125 || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
	t.Setenv("MOAT_MODE", "stdio")
	if _, errOut, code := wfRunCLI(t, "", "ls"); code != 125 || !strings.Contains(errOut, "MOAT_MODE=stdio") {
		t.Errorf("ls in stdio mode: %d %q", code, errOut)
	}
	t.Setenv("MOAT_MODE", "carrier-pigeon")
	if _, errOut, code := wfRunCLI(t, "", "run", file); code != 125 || !strings.Contains(errOut, "MOAT_MODE=carrier-pigeon") {
		t.Errorf("run in a bogus mode: %d %q", code, errOut)
	}
}

// TestWorkflowDocumentTooLarge: a document the daemon could not take is
// refused before anything is sent.
func TestWorkflowDocumentTooLarge(t *testing.T) {
	fakeDaemon(t).HandleFunc("POST /v1/workflows", func(w http.ResponseWriter, r *http.Request) {
		t.Error("a document over the cap was sent")
	})
	big := strings.Repeat("# padding\n", 200_000)
	if _, errOut, code := wfRunCLI(t, big, "run", "-"); code != 125 || !strings.Contains(errOut, "larger than") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// wfFake is a fake daemon with one run: the events it streams and the
// run it describes once they are sent.
type wfFake struct {
	mux     *http.ServeMux
	created api.CreateWorkflow
	events  []api.WorkflowEvent
	run     api.WorkflowRun
	// stream, when set, serves the event stream instead of events.
	stream http.HandlerFunc
}

func newWfFake(t *testing.T, run api.WorkflowRun, events ...api.WorkflowEvent) *wfFake {
	f := &wfFake{mux: fakeDaemon(t), run: run, events: events}
	f.mux.HandleFunc("POST /v1/workflows", func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&f.created)
		if strings.Contains(f.created.Document, "bogus:") {
			replyJSON(w, 400, api.Error{Code: api.CodeInvalidArgument, Message: `line 3: unknown field "bogus"`})
			return
		}
		replyJSON(w, 201, api.WorkflowRun{ID: f.run.ID, Name: f.run.Name, State: api.RunPending})
	})
	f.mux.HandleFunc("GET /v1/workflows/{run}/events", func(w http.ResponseWriter, r *http.Request) {
		if f.stream != nil {
			f.stream(w, r)
			return
		}
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		var evs []api.Event
		for i := range f.events {
			if f.events[i].Seq > after {
				evs = append(evs, api.Event{Type: "workflow", Workflow: &f.events[i]})
			}
		}
		replyEvents(w, evs...)
	})
	f.mux.HandleFunc("GET /v1/workflows/{run}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("run") != f.run.ID {
			replyJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: "no run " + r.PathValue("run")})
			return
		}
		replyJSON(w, 200, f.run)
	})
	return f
}

var wfT0 = time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)

func wfTime(s int) *time.Time {
	t := wfT0.Add(time.Duration(s) * time.Second)
	return &t
}

// failedRun is a run whose second step failed twice.
func failedRun() (api.WorkflowRun, []api.WorkflowEvent) {
	fail := &sandbox.Result{ExitCode: 3, ExitReason: sandbox.ReasonExited, DurationMs: 310, Stderr: "compiling\nerror: \x1b[31mboom\x1b[0m\n"}
	ok := &sandbox.Result{ExitCode: 0, ExitReason: sandbox.ReasonExited, DurationMs: 1200, Stdout: "fetched\n"}
	run := api.WorkflowRun{ID: "wf-0123456789ab", Name: "demo", State: api.RunFailed, Error: "step build failed", Created: wfT0, Ended: wfTime(9),
		Steps: []api.WorkflowStep{
			{ID: "fetch", State: api.StepSucceeded, Attempt: 1, Snapshot: "snap-1", Started: wfTime(0), Ended: wfTime(2), Result: ok,
				Attempts: []api.WorkflowAttempt{{Attempt: 1, Sandbox: "sb-1", Template: "host", State: api.StepSucceeded, Started: wfT0, Result: ok}},
				Outputs:  []api.WorkflowArtifact{{Path: "/workspace/src/a.c", Bytes: 2048, SHA256: strings.Repeat("ab", 32)}}},
			{ID: "build", State: api.StepFailed, Attempt: 2, From: "fetch", Started: wfTime(2), Ended: wfTime(9), Result: fail,
				Attempts: []api.WorkflowAttempt{
					{Attempt: 1, Sandbox: "sb-2", StartSnapshot: "snap-1", State: api.StepFailed, Started: *wfTime(2), Result: fail},
					{Attempt: 2, Sandbox: "sb-3", StartSnapshot: "snap-1", State: api.StepFailed, Started: *wfTime(5), Result: fail},
				}},
			{ID: "test", State: api.StepSkipped},
		}}
	evs := []api.WorkflowEvent{
		{Seq: 1, Time: wfT0, Run: run.ID, Type: api.WfRunStarted},
		{Seq: 2, Time: wfT0, Run: run.ID, Type: api.WfStepStarted, Step: "fetch", Attempt: 1},
		{Seq: 3, Time: *wfTime(2), Run: run.ID, Type: api.WfStepSucceeded, Step: "fetch", Attempt: 1, Result: ok},
		{Seq: 4, Time: *wfTime(2), Run: run.ID, Type: api.WfStepStarted, Step: "build", Attempt: 1},
		{Seq: 5, Time: *wfTime(3), Run: run.ID, Type: api.WfStepRetrying, Step: "build", Attempt: 1, Result: fail, Message: "from snap-1 in 1s"},
		{Seq: 6, Time: *wfTime(9), Run: run.ID, Type: api.WfStepFailed, Step: "build", Attempt: 2, Result: fail},
		{Seq: 7, Time: *wfTime(9), Run: run.ID, Type: api.WfStepSkipped, Step: "test", Message: "build failed"},
		{Seq: 8, Time: *wfTime(9), Run: run.ID, Type: api.WfRunFailed, Message: "step build failed"},
	}
	return run, evs
}

func TestWorkflowRunSummary(t *testing.T) {
	run, evs := failedRun()
	f := newWfFake(t, run, evs...)
	file := filepath.Join(t.TempDir(), "wf.yaml")
	os.WriteFile(file, []byte("name: demo\nsteps: []\n"), 0o644)

	out, errOut, code := wfRunCLI(t, "", "run", "--name", "n1", "-l", "team=a", "--label", "x=", file)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	if f.created.Document != "name: demo\nsteps: []\n" || f.created.Name != "n1" || f.created.Labels["team"] != "a" || f.created.Labels["x"] != "" || len(f.created.Labels) != 2 {
		t.Errorf("created %+v", f.created)
	}
	for _, want := range []string{"STEP", "SNAPSHOT", "fetch", "succeeded", "snap-1", "build", "failed", "2", "test", "skipped"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "started (attempt") {
		t.Errorf("events without --follow:\n%s", out)
	}
	for _, want := range []string{"moat: workflow run wf-0123456789ab (demo)", "run wf-0123456789ab failed: step build failed", "step build failed (attempt 2, exit 3", `error: \x1b[31mboom\x1b[0m`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(out+errOut, "\x1b") {
		t.Errorf("a raw escape reached the terminal:\n%q\n%q", out, errOut)
	}

	// --follow: the events, then the table.
	out, _, code = wfRunCLI(t, "", "run", "--follow", file)
	if code != 1 {
		t.Fatalf("--follow: exit %d", code)
	}
	want := []string{"step fetch started (attempt 1)", "step fetch succeeded (attempt 1, exit 0, 1.20s)",
		"step build attempt 1 failed, exit 3, 0.31s; retrying: from snap-1 in 1s", "step build failed (attempt 2, exit 3, 0.31s)",
		"step test skipped: build failed", "run wf-0123456789ab failed: step build failed", "STEP"}
	last := -1
	for _, w := range want {
		i := strings.Index(out, w)
		if i <= last {
			t.Fatalf("--follow: %q missing or out of order:\n%s", w, out)
		}
		last = i
	}

	// --follow --json: NDJSON events, then the run on one line.
	out, _, code = wfRunCLI(t, "", "run", "--follow", "--json", file)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != len(evs)+1 {
		t.Fatalf("--follow --json: exit %d, %d lines:\n%s", code, len(lines), out)
	}
	for i, l := range lines[:len(evs)] {
		var ev api.WorkflowEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Seq != evs[i].Seq || ev.Type != evs[i].Type {
			t.Errorf("line %d: %v %q", i, err, l)
		}
	}
	var final api.WorkflowRun
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &final); err != nil || final.ID != run.ID || final.State != api.RunFailed || len(final.Steps) != 3 {
		t.Errorf("last line: %v %q", err, lines[len(lines)-1])
	}

	// --json: the run, indented.
	out, _, code = wfRunCLI(t, "", "run", "--json", file)
	if err := json.Unmarshal([]byte(out), &final); err != nil || code != 1 || final.State != api.RunFailed {
		t.Errorf("--json: %d %v %q", code, err, out)
	}

	// --detach: the id, at once.
	out, _, code = wfRunCLI(t, "", "run", "-d", file)
	if code != 0 || out != run.ID+"\n" {
		t.Errorf("--detach: %d %q", code, out)
	}

	// From stdin, and an invalid document: 125 with the daemon's line.
	_, errOut, code = wfRunCLI(t, "steps:\n  - id: a\n    bogus: 1\n", "run", "-")
	if code != 125 || !strings.Contains(errOut, `moat workflow run: <stdin>: line 3: unknown field "bogus"`) {
		t.Errorf("invalid document: %d %q", code, errOut)
	}
}

func TestWorkflowRunSucceeded(t *testing.T) {
	ok := &sandbox.Result{ExitReason: sandbox.ReasonExited, DurationMs: 5}
	run := api.WorkflowRun{ID: "wf-00000000000a", State: api.RunSucceeded, Created: wfT0, Ended: wfTime(1),
		Steps: []api.WorkflowStep{{ID: "a", State: api.StepSucceeded, Attempt: 1, Result: ok}}}
	newWfFake(t, run,
		api.WorkflowEvent{Seq: 1, Time: wfT0, Run: run.ID, Type: api.WfRunStarted},
		api.WorkflowEvent{Seq: 2, Time: wfT0, Run: run.ID, Type: api.WfRunSucceeded})
	out, errOut, code := wfRunCLI(t, "steps: []\n", "run", "-")
	if code != 0 || !strings.Contains(out, "succeeded") || strings.Contains(errOut, "failed") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	// wait: the same end.
	if out, _, code := wfRunCLI(t, "", "wait", run.ID); code != 0 || !strings.Contains(out, "STEP") {
		t.Fatalf("wait: %d %q", code, out)
	}
	if _, errOut, code := wfRunCLI(t, "", "wait", "wf-nope"); code != 125 || !strings.Contains(errOut, "no run wf-nope") {
		t.Fatalf("wait of no run: %d %q", code, errOut)
	}
}

// TestWorkflowRunEndBeforeRecord: a run whose end event arrived before
// its record says so ends with the event's state; a stream that ends
// with neither is an error, not a wait forever.
func TestWorkflowRunEndBeforeRecord(t *testing.T) {
	run := api.WorkflowRun{ID: "wf-00000000000b", State: api.RunRunning, Created: wfT0}
	f := newWfFake(t, run, api.WorkflowEvent{Seq: 1, Time: wfT0, Run: run.ID, Type: api.WfRunCancelled})
	if _, _, code := wfRunCLI(t, "", "wait", run.ID); code != 1 {
		t.Fatalf("cancelled: exit %d", code)
	}
	f.events = f.events[:0]
	if _, errOut, code := wfRunCLI(t, "", "wait", run.ID); code != 125 || !strings.Contains(errOut, "ended before the run") {
		t.Fatalf("stream ended early: %d %q", code, errOut)
	}
}

func TestWorkflowGetListLogs(t *testing.T) {
	run, evs := failedRun()
	f := newWfFake(t, run, evs...)
	f.mux.HandleFunc("GET /v1/workflows", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("state") != "failed" || r.URL.Query().Get("limit") != "5" {
			t.Errorf("list query %q", r.URL.RawQuery)
		}
		replyJSON(w, 200, api.WorkflowList{Runs: []api.WorkflowRun{run}})
	})
	out, errOut, code := wfRunCLI(t, "", "get", run.ID)
	if code != 0 {
		t.Fatalf("get: %d %s", code, errOut)
	}
	for _, want := range []string{"run       wf-0123456789ab", "state     failed: step build failed", "build: from fetch",
		"attempt 1 failed, exit 3, 0.31s; sandbox sb-2; from snapshot snap-1", "attempt 1 succeeded, exit 0, 1.20s; sandbox sb-1; template host",
		"output /workspace/src/a.c  2.0 KiB  sha256:" + strings.Repeat("ab", 32)} {
		if !strings.Contains(out, want) {
			t.Errorf("get lacks %q:\n%s", want, out)
		}
	}
	out, _, code = wfRunCLI(t, "", "get", run.ID, "--json")
	var got api.WorkflowRun
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Steps[1].Attempts) != 2 {
		t.Errorf("get --json: %d %q", code, out)
	}
	if _, errOut, code := wfRunCLI(t, "", "get", "wf-nope"); code != 125 || !strings.Contains(errOut, "not_found") {
		t.Errorf("get of no run: %d %q", code, errOut)
	}

	out, _, code = wfRunCLI(t, "", "ls", "--state", "failed", "--limit", "5")
	if code != 0 || !strings.Contains(out, "ID") || !strings.Contains(out, "wf-0123456789ab  demo  failed  1/3") {
		t.Errorf("ls: %d\n%s", code, out)
	}

	// logs: the events and each ended attempt's output, escaped.
	out, _, code = wfRunCLI(t, "", "logs", run.ID)
	if code != 0 {
		t.Fatalf("logs: %d", code)
	}
	for _, want := range []string{"step fetch succeeded", "  fetch#1 stdout| fetched", "  build#1 stderr| compiling", `  build#2 stderr| error: \x1b[31mboom`} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = wfRunCLI(t, "", "logs", "--step", "fetch", run.ID)
	if strings.Contains(out, "build") || !strings.Contains(out, "fetch#1 stdout| fetched") {
		t.Errorf("logs --step fetch:\n%s", out)
	}
	out, _, _ = wfRunCLI(t, "", "logs", "--json", run.ID)
	if n := strings.Count(out, "\n"); n != len(evs) || strings.Contains(out, "fetch#1") {
		t.Errorf("logs --json: %d lines:\n%s", n, out)
	}
	// --follow waits for the end and exits as run does.
	if _, _, code := wfRunCLI(t, "", "logs", "-f", run.ID); code != 1 {
		t.Errorf("logs --follow of a failed run: exit %d", code)
	}
}

func TestWorkflowCancelResume(t *testing.T) {
	run, evs := failedRun()
	f := newWfFake(t, run, evs...)
	f.mux.HandleFunc("POST /v1/workflows/{run}/cancel", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.WorkflowRun{ID: r.PathValue("run"), State: api.RunCancelled})
	})
	var resumed api.ResumeWorkflow
	f.mux.HandleFunc("POST /v1/workflows/{run}/resume", func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&resumed)
		// The resumed run's events follow the old ones.
		f.events = append(f.events,
			api.WorkflowEvent{Seq: 9, Time: *wfTime(20), Run: run.ID, Type: api.WfRunResumed, Message: "from build"},
			api.WorkflowEvent{Seq: 10, Time: *wfTime(21), Run: run.ID, Type: api.WfStepSucceeded, Step: "build", Attempt: 3},
			api.WorkflowEvent{Seq: 11, Time: *wfTime(22), Run: run.ID, Type: api.WfRunSucceeded})
		f.run.State = api.RunSucceeded
		replyJSON(w, 200, api.WorkflowRun{ID: r.PathValue("run"), State: api.RunRunning})
	})
	if out, _, code := wfRunCLI(t, "", "cancel", run.ID); code != 0 || out != run.ID+" cancelled\n" {
		t.Errorf("cancel: %d %q", code, out)
	}
	out, errOut, code := wfRunCLI(t, "", "resume", "--from", "build", "--follow", run.ID)
	if code != 0 || resumed.From != "build" || resumed.Run != run.ID {
		t.Fatalf("resume: %d %+v\n%s\n%s", code, resumed, out, errOut)
	}
	if strings.Contains(out, "step fetch started") || !strings.Contains(out, "resumed: from build") || !strings.Contains(out, "step build succeeded (attempt 3)") {
		t.Errorf("resume --follow printed:\n%s", out)
	}
}

// TestWorkflowEventLineEscapes: what a document or a sandbox chose (ids,
// messages) never reaches the terminal raw, and one event is one line.
func TestWorkflowEventLineEscapes(t *testing.T) {
	ev := api.WorkflowEvent{Time: wfT0, Run: "wf-1", Type: api.WfStepFailed, Step: "a\x1b]8;;http://x\x07b", Attempt: 1,
		Message: "bad\nline\r\u202e", Result: &sandbox.Result{ExitCode: 1, ExitReason: "oom\x1b[2J"}}
	for _, l := range []string{eventLine(ev), eventLine(api.WorkflowEvent{Type: "future.\x1b[2Jtype", Step: "\n"})} {
		if strings.ContainsAny(l, "\x1b\x07\n\r\u202e") {
			t.Errorf("unsafe line %q", l)
		}
	}
	var b strings.Builder
	printOutput(&b, "s\x1b", 1, &sandbox.Result{Stdout: "ok\n\x1b[2Jwiped\n", Stderr: "\r"})
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if strings.ContainsAny(l, "\x1b\r") || !strings.HasPrefix(l, `  s\x1b#1 std`) {
			t.Errorf("unsafe output line %q", l)
		}
	}
}

// TestWorkflowTarget: where run runs, by flag, environment and whether a
// daemon answers.
func TestWorkflowTarget(t *testing.T) {
	ctx := context.Background()
	t.Setenv("MOAT_TOKEN", "tok")
	for _, c := range []struct {
		mode, url string
		force     bool
		local     bool
	}{
		{force: true, url: "http://x", local: true},
		{mode: "stdio", url: "http://x", local: true},
		{mode: "http", local: false},
		{url: "http://x", local: false},
	} {
		t.Setenv("MOAT_MODE", c.mode)
		t.Setenv("MOAT_URL", c.url)
		if got, err := chooseLocal(ctx, c.force); err != nil || got != c.local {
			t.Errorf("%+v: local %v, %v", c, got, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if !daemonAnswers(ctx, "http://"+addr) {
		t.Errorf("a listener at %s does not answer", addr)
	}
	ln.Close()
	if daemonAnswers(ctx, "http://"+addr) || daemonAnswers(ctx, "unix:"+filepath.Join(t.TempDir(), "none.sock")) || daemonAnswers(ctx, "::bad") {
		t.Error("nothing listens, yet a daemon answers")
	}
	sock := filepath.Join(t.TempDir(), "d.sock")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	if !daemonAnswers(ctx, "unix:"+sock) {
		t.Error("a unix listener does not answer")
	}
	// No MOAT_URL, no readable token: a private daemon.
	t.Setenv("MOAT_MODE", "")
	t.Setenv("MOAT_URL", "")
	t.Setenv("MOAT_TOKEN", "")
	t.Setenv("MOAT_TOKEN_FILE", filepath.Join(t.TempDir(), "none"))
	if got, err := chooseLocal(ctx, false); err != nil || !got {
		t.Errorf("no daemon: local %v, %v", got, err)
	}
}

// TestWorkflowInterrupt: ^C while a run is followed stops following a
// daemon's run (which goes on), and cancels a private daemon's run, then
// waits for its end; either way the exit is 130.
func TestWorkflowInterrupt(t *testing.T) {
	for _, local := range []bool{false, true} {
		run := api.WorkflowRun{ID: "wf-00000000000c", State: api.RunRunning, Created: wfT0,
			Steps: []api.WorkflowStep{{ID: "slow", State: api.StepRunning, Attempt: 1}}}
		f := newWfFake(t, run)
		cancelled := make(chan struct{})
		f.mux.HandleFunc("POST /v1/workflows/{run}/cancel", func(w http.ResponseWriter, r *http.Request) {
			f.run.State, f.run.Steps[0].State = api.RunCancelled, api.StepCancelled
			close(cancelled)
			replyJSON(w, 200, f.run)
		})
		f.stream = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			// follow watches for signals before it asks for events.
			if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
				t.Error(err)
			}
			select {
			case <-r.Context().Done():
			case <-cancelled:
				replyEvents(w, api.Event{Type: "workflow", Workflow: &api.WorkflowEvent{Seq: 1, Time: wfT0, Run: run.ID, Type: api.WfRunCancelled}})
			}
		}
		c, err := client.New(client.WithHTTP(os.Getenv("MOAT_URL"), "tok"))
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut strings.Builder
		final, err := follow(context.Background(), c, target{local: local}, run.ID, 0, followOpts{}, sandboxIO{nil, &out, &errOut})
		c.Close()
		var ee *exitError
		if final != nil || !errors.As(err, &ee) || ee.code != exitInterrupted {
			t.Fatalf("local %v: %v, %v", local, final, err)
		}
		select {
		case <-cancelled:
			if !local {
				t.Error("a daemon's run was cancelled by ^C")
			}
			if !strings.Contains(errOut.String(), "moat: cancelling run wf-00000000000c") || !strings.Contains(out.String(), "cancelled") {
				t.Errorf("local: stdout %q, stderr %q", out.String(), errOut.String())
			}
		default:
			if local {
				t.Error("a private daemon's run was not cancelled by ^C")
			}
			if !strings.Contains(errOut.String(), "it goes on in the daemon") {
				t.Errorf("daemon: stderr %q", errOut.String())
			}
		}
	}
}

// TestAttemptLineBuild: a build step's attempt names its build, so a
// person can get it (moat workflow get).
func TestAttemptLineBuild(t *testing.T) {
	now := time.Now()
	a := api.WorkflowAttempt{Attempt: 2, State: api.StepFailed, Build: "bld-0123", Started: now, Ended: &now}
	if got := attemptLine(a, now); !strings.Contains(got, "; build bld-0123") {
		t.Errorf("attemptLine = %q", got)
	}
	a.Build = "bld-\x1b[2J"
	if got := attemptLine(a, now); strings.Contains(got, "\x1b") {
		t.Errorf("attemptLine shows a raw escape: %q", got)
	}
}
