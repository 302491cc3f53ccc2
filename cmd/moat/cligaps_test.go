package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// These tests cover the CLI of long-lived sandboxes (issue 18, item 5):
// flags after positional arguments, --json of rm, logs and the other
// commands, the process commands, moat audit, shell completion and
// moat --version. They talk to a fake daemon or run the built binary; the
// end-to-end ones with a real daemon are in sbproc_e2e_test.go.

// TestFlagsAfterArguments: every subcommand takes its flags after its
// positional arguments too, as exec does; after --, words belong to the
// command line.
func TestFlagsAfterArguments(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.ProcessList{Processes: []api.Process{{ID: 4, Sandbox: "sb-1", State: api.ProcRunning, Args: []string{"sleep", "9"}}}})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.Snapshot{ID: "snap-1", Sandbox: "sb-1", Depth: 1})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/restore", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.Sandbox{ID: "sb-1", State: api.StateRunning})
	})
	var execArgs []string
	mux.HandleFunc("POST /v1/sandboxes/sb-1/exec", func(w http.ResponseWriter, r *http.Request) {
		var req api.Exec
		json.NewDecoder(r.Body).Decode(&req)
		execArgs = req.Args
		replyJSON(w, 200, sandbox.Result{})
	})

	out, errOut, code := sbRun(t, "", "ps", "sb-1", "--json")
	var procs []api.Process
	if code != 0 || json.Unmarshal([]byte(out), &procs) != nil || len(procs) != 1 || procs[0].ID != 4 {
		t.Errorf("ps sb-1 --json: %d %q %q", code, out, errOut)
	}
	out, errOut, code = sbRun(t, "", "snapshot", "sb-1", "--json")
	var sn api.Snapshot
	if code != 0 || json.Unmarshal([]byte(out), &sn) != nil || sn.ID != "snap-1" {
		t.Errorf("snapshot sb-1 --json: %d %q %q", code, out, errOut)
	}
	out, errOut, code = sbRun(t, "", "restore", "sb-1", "snap-1", "--json")
	var sb api.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.ID != "sb-1" {
		t.Errorf("restore sb-1 snap-1 --json: %d %q %q", code, out, errOut)
	}
	// After --, --json is the command's.
	if _, errOut, code := sbRun(t, "", "exec", "sb-1", "--", "echo", "--json"); code != 0 || !slices.Equal(execArgs, []string{"echo", "--json"}) {
		t.Errorf("exec sb-1 -- echo --json: %d %q, sent %q", code, errOut, execArgs)
	}
}

// TestRemoveJSON: sandbox rm and snapshot rm --json print one object with
// what was removed and what failed, and exit as without --json.
func TestRemoveJSON(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("DELETE /v1/sandboxes/{sandbox}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("sandbox") == "sb-x" {
			replyJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: "no sandbox sb-x"})
			return
		}
		replyJSON(w, 200, api.Sandbox{ID: r.PathValue("sandbox"), State: api.StateStopped})
	})
	mux.HandleFunc("DELETE /v1/snapshots/{snapshot}", func(w http.ResponseWriter, r *http.Request) {
		if id := r.PathValue("snapshot"); id != "snap-1" {
			replyJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: "no snapshot " + id})
			return
		}
		replyJSON(w, 200, api.Snapshot{ID: "snap-1"})
	})
	type removed struct {
		Removed []string `json:"removed"`
		Failed  []struct {
			ID    string `json:"id"`
			Code  string `json:"code"`
			Error string `json:"error"`
		} `json:"failed"`
	}
	out, errOut, code := sbRun(t, "", "rm", "sb-1", "sb-x", "--json")
	var r removed
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 125 || !slices.Equal(r.Removed, []string{"sb-1"}) ||
		len(r.Failed) != 1 || r.Failed[0].ID != "sb-x" || r.Failed[0].Code != api.CodeNotFound || !strings.Contains(errOut, "sb-x") {
		t.Errorf("sandbox rm --json: %d %q %q (%v)", code, out, errOut, err)
	}
	out, errOut, code = sbRun(t, "", "rm", "--json", "sb-1")
	if r = (removed{}); json.Unmarshal([]byte(out), &r) != nil || code != 0 || !slices.Equal(r.Removed, []string{"sb-1"}) || r.Failed == nil {
		t.Errorf("sandbox rm --json sb-1: %d %q %q", code, out, errOut)
	}
	out, errOut, code = cliRun("snapshot", runSnapshot, "", "rm", "snap-1", "snap-9", "--json")
	if r = (removed{}); json.Unmarshal([]byte(out), &r) != nil || code != 1 || !slices.Equal(r.Removed, []string{"snap-1"}) ||
		len(r.Failed) != 1 || r.Failed[0].ID != "snap-9" {
		t.Errorf("snapshot rm --json: %d %q %q", code, out, errOut)
	}
}

// TestLogsJSON: logs --json prints the daemon's events, one JSON object a
// line, the exit event included.
func TestLogsJSON(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes/4/output", func(w http.ResponseWriter, r *http.Request) {
		replyEvents(w, api.Event{Seq: 1, Type: api.EventStdout, Process: 4, Text: "a\x1b[2J\n"}, api.Event{Seq: 2, Type: api.EventStderr, Process: 4, Data: []byte{0xff}},
			api.Event{Seq: 3, Type: api.EventExit, Process: 4, Result: &sandbox.Result{ExitCode: 3}})
	})
	out, errOut, code := sbRun(t, "", "logs", "sb-1", "4", "--json")
	if code != 0 || errOut != "" {
		t.Fatalf("logs --json: %d %q %q", code, out, errOut)
	}
	var evs []api.Event
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	if len(evs) != 3 || evs[0].Text != "a\x1b[2J\n" || string(evs[1].Data) != "\xff" || evs[2].Type != api.EventExit || evs[2].Result.ExitCode != 3 {
		t.Fatalf("logs --json events: %+v", evs)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("logs --json wrote a raw escape: %q", out)
	}
}

// TestPsHelp: ps says which processes it lists, and where execs are.
func TestPsHelp(t *testing.T) {
	out, _, code := sbRun(t, "", "ps", "--help")
	if code != 0 || strings.Contains(out, "(exec and start)") || !strings.Contains(out, "moat sandbox start") || !strings.Contains(out, "moat audit") {
		t.Fatalf("ps --help (%d):\n%s", code, out)
	}
}

// TestProcessCommandsFake: stdin, signal, wait and kill send what the API
// expects, and wait exits with the process's code.
func TestProcessCommandsFake(t *testing.T) {
	mux := fakeDaemon(t)
	var stdin []api.Stdin
	mux.HandleFunc("POST /v1/sandboxes/sb-1/processes/4/stdin", func(w http.ResponseWriter, r *http.Request) {
		var req api.Stdin
		json.NewDecoder(r.Body).Decode(&req)
		stdin = append(stdin, req)
		replyJSON(w, 200, api.OK{OK: true})
	})
	var signals []string
	mux.HandleFunc("POST /v1/sandboxes/sb-1/processes/4/signal", func(w http.ResponseWriter, r *http.Request) {
		var req api.Signal
		json.NewDecoder(r.Body).Decode(&req)
		signals = append(signals, req.Signal)
		replyJSON(w, 200, api.OK{OK: true})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/processes/4/wait", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.Process{ID: 4, Sandbox: "sb-1", State: api.ProcExited, Result: &sandbox.Result{ExitCode: 7, ExitReason: sandbox.ReasonExited}})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/processes/5/wait", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.Process{ID: 5, Sandbox: "sb-1", State: api.ProcRunning})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes/5", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.Process{ID: 5, Sandbox: "sb-1", State: api.ProcRunning})
	})
	if _, errOut, code := sbRun(t, "hi\n", "stdin", "sb-1", "4"); code != 0 {
		t.Fatalf("stdin: %d %q", code, errOut)
	}
	if _, errOut, code := sbRun(t, "", "stdin", "sb-1", "4", "--close"); code != 0 {
		t.Fatalf("stdin --close: %d %q", code, errOut)
	}
	if len(stdin) != 2 || stdin[0].Data != "hi\n" || stdin[0].EOF || !stdin[1].EOF || stdin[1].Data != "" {
		t.Fatalf("stdin requests: %+v", stdin)
	}
	for _, args := range [][]string{{"signal", "sb-1", "4", "TERM"}, {"signal", "sb-1", "4", "15"}, {"kill", "sb-1", "4"}} {
		if _, errOut, code := sbRun(t, "", args...); code != 0 {
			t.Fatalf("%q: %d %q", args, code, errOut)
		}
	}
	if !slices.Equal(signals, []string{"TERM", "15", "KILL"}) {
		t.Fatalf("signals sent: %q", signals)
	}
	if out, errOut, code := sbRun(t, "", "wait", "sb-1", "4"); code != 7 || out != "" {
		t.Fatalf("wait: %d %q %q", code, out, errOut)
	}
	out, _, code := sbRun(t, "", "wait", "sb-1", "4", "--json")
	var p api.Process
	if code != 7 || json.Unmarshal([]byte(out), &p) != nil || p.Result == nil || p.Result.ExitCode != 7 {
		t.Fatalf("wait --json: %d %q", code, out)
	}
	// A process still running when --timeout passes: 124, and with
	// --json its description says running.
	out, errOut, code := sbRun(t, "", "wait", "--timeout", "1ms", "--json", "sb-1", "5")
	if code != 124 || json.Unmarshal([]byte(out), &p) != nil || p.State != api.ProcRunning {
		t.Fatalf("wait --timeout: %d %q %q", code, out, errOut)
	}
	for _, args := range [][]string{{"signal", "sb-1", "4"}, {"wait", "sb-1", "x"}, {"kill", "sb-1"}, {"stdin", "sb-1", "4", "a", "b"}} {
		if _, errOut, code := sbRun(t, "", args...); code != 125 || errOut == "" {
			t.Errorf("%q: %d %q", args, code, errOut)
		}
	}
}

// TestAuditFake: moat audit sends its filters to audit.query and prints
// the events, escaped in the table, as a JSON array with --json.
func TestAuditFake(t *testing.T) {
	mux := fakeDaemon(t)
	var queries []string
	mux.HandleFunc("GET /v1/audit", func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.RawQuery)
		replyJSON(w, 200, api.AuditPage{Events: []api.AuditEvent{
			{Seq: 7, Time: time.Now(), Tenant: "default", Actor: "token:1234", Sandbox: "sb-1", Kind: "process.exec", Decision: "allow",
				Request: json.RawMessage(`{"args":["echo","\u001b[31mred"]}`)},
			{Seq: 8, Time: time.Now(), Tenant: "default", Actor: "token:1234", Sandbox: "sb-1", Kind: "process.signal", Error: "gone\x1b[2J"},
		}})
	})
	o := testutil.Exec(t, "audit", "--sandbox", "sb-1", "--kind", "process.", "--limit", "5", "--since", "10m")
	if o.Code != 0 || !strings.Contains(o.Stdout, "process.exec") || !strings.Contains(o.Stdout, "process.signal") || strings.Contains(o.Stdout, "\x1b") || !strings.Contains(o.Stdout, `\x1b`) {
		t.Fatalf("moat audit: %d %q %q", o.Code, o.Stdout, o.Stderr)
	}
	if len(queries) != 1 || !strings.Contains(queries[0], "sandbox=sb-1") || !strings.Contains(queries[0], "kind=process.") ||
		!strings.Contains(queries[0], "limit=5") || !strings.Contains(queries[0], "since=") {
		t.Fatalf("queries: %q", queries)
	}
	o = testutil.Exec(t, "audit", "--json", "--sandbox", "sb-1")
	var evs []audit.Event
	if o.Code != 0 || json.Unmarshal([]byte(o.Stdout), &evs) != nil || len(evs) != 2 || evs[1].Error != "gone\x1b[2J" || strings.Contains(o.Stdout, "\x1b") {
		t.Fatalf("moat audit --json: %d %q %q", o.Code, o.Stdout, o.Stderr)
	}
	if o := testutil.Exec(t, "audit", "--since", "yesterday"); o.Code != 125 || !strings.Contains(o.Stderr, "--since") {
		t.Fatalf("bad --since: %d %q", o.Code, o.Stderr)
	}
}

// TestVersionFlag: moat --version prints the version the build set with
// -ldflags -X main.version (as the Makefile does), as moat version does.
func TestVersionFlag(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "moat")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7-test", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil || !strings.HasPrefix(string(out), "moat v9.8.7-test (") {
			t.Errorf("moat %s: %q %v", args[0], out, err)
		}
	}
}

// TestCompletion: moat completion bash prints a script bash accepts
// (bash -n) that completes the commands, subcommands and flags of the
// command tree; zsh and fish scripts are checked by their shells when
// installed.
func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	for _, sh := range []string{"bash", "zsh", "fish"} {
		o := testutil.Exec(t, "completion", sh)
		if o.Code != 0 || !strings.Contains(o.Stdout, "moat") {
			t.Fatalf("completion %s: %d %q", sh, o.Code, o.Stderr)
		}
		f := filepath.Join(dir, "moat."+sh)
		if err := os.WriteFile(f, []byte(o.Stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		path, err := exec.LookPath(sh)
		if err != nil {
			t.Logf("%s not installed: its script is not checked", sh)
			continue
		}
		check := []string{"-n", f}
		if sh == "fish" {
			check = []string{"--no-execute", f}
		}
		if out, err := exec.Command(path, check...).CombinedOutput(); err != nil {
			t.Errorf("%s %q: %v\n%s", sh, check, err, out)
		}
	}
	if o := testutil.Exec(t, "completion", "tcsh"); o.Code != 125 {
		t.Errorf("completion tcsh: %d", o.Code)
	}
	// The bash function completes as bash would call it.
	complete := func(line string) []string {
		t.Helper()
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		script := ". " + filepath.Join(dir, "moat.bash") + "\nCOMP_WORDS=(" + shellWords(words) + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "\n_moat\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command("bash", "--norc", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", line, err, out)
		}
		return strings.Fields(string(out))
	}
	for _, c := range []struct {
		line string
		want []string
	}{
		{"moat sa", []string{"sandbox"}},
		{"moat sandbox s", []string{"signal", "snapshot", "start", "stdin"}},
		{"moat sandbox ps sb-1 --j", []string{"--json"}},
		{"moat snapshot rm --j", []string{"--json"}},
		{"moat completion ", []string{"bash", "fish", "zsh"}},
		{"moat au", []string{"audit"}},
		{"moat --v", []string{"--version"}},
	} {
		got := complete(c.line)
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("complete %q: %q, want %q", c.line, got, c.want)
		}
	}
}

func shellWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
