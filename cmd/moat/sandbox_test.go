package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/hosttest"
	"github.com/moat-sandbox/moat/sandbox"
)

// fakeDaemon serves the routes the test adds and points the environment
// at itself.
func fakeDaemon(t *testing.T) *http.ServeMux {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			replyJSON(w, 401, api.Error{Code: api.CodeUnauthenticated, Message: "bad token"})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("MOAT_MODE", "")
	t.Setenv("MOAT_URL", srv.URL)
	t.Setenv("MOAT_TOKEN", "tok")
	return mux
}

func replyJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func replyEvents(w http.ResponseWriter, events ...api.Event) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	for _, ev := range events {
		json.NewEncoder(w).Encode(ev)
	}
}

// sbRun runs `moat sandbox ARGS...` and returns its stdout, stderr and
// exit code as execute would map them.
func sbRun(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return cliRun("sandbox", runSandbox, stdin, args...)
}

// cliRun runs one daemon client subcommand (run is runSandbox or
// runApprovals) in-process and maps its error to stderr and an exit code
// as execute does.
func cliRun(name string, run func(context.Context, []string, sandboxIO) error, stdin string, args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, sandboxIO{strings.NewReader(stdin), &out, &errOut})
	code := 0
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
	case err != nil:
		errOut.WriteString("moat " + name + ": " + err.Error() + "\n")
		code = sandbox.ExitSetupFailed
	}
	return out.String(), errOut.String(), code
}

func TestSandboxCLIUsage(t *testing.T) {
	out, _, code := sbRun(t, "", "exec", "--help")
	if code != 0 || !strings.Contains(out, "Usage:\n  moat sandbox exec [flags] SANDBOX -- COMMAND") || !strings.Contains(out, "--timeout DURATION") {
		t.Fatalf("exec --help (%d):\n%s", code, out)
	}
	out, _, code = sbRun(t, "", "help", "cp")
	if code != 0 || !strings.Contains(out, "moat sandbox cp [--json] SRC DST") {
		t.Fatalf("help cp (%d):\n%s", code, out)
	}
	for _, args := range [][]string{{}, {"bogus"}, {"exec", "sb"}, {"exec", "sb", "ls", "-la"}, {"logs", "sb", "x"}, {"cp", "a", "b"}, {"create", "--memory", "lots"}} {
		_, errOut, code := sbRun(t, "", args...)
		if code != 125 || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
	t.Setenv("MOAT_MODE", "stdio")
	if _, errOut, code := sbRun(t, "", "ls"); code != 125 || !strings.Contains(errOut, "MOAT_MODE=stdio") {
		t.Fatalf("stdio mode: %d %q", code, errOut)
	}
}

func TestSandboxCLICreateList(t *testing.T) {
	mux := fakeDaemon(t)
	creates := 0
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateSandbox
		json.NewDecoder(r.Body).Decode(&req)
		if creates++; creates > 1 {
			replyJSON(w, 201, api.Sandbox{ID: "sb-1", State: api.StateRunning})
			return
		}
		wd, _ := os.Getwd()
		want := api.CreateSandbox{
			Workspace: wd, Limits: sandbox.Limits{MemoryBytes: 512 << 20, CPUs: 0.5},
			Binds:     []sandbox.Bind{{Source: "/etc", Target: "/e"}, {Source: wd, Target: "/w", Writable: true}},
			TimeoutMs: 3600_000, IdleTimeoutMs: 1, Labels: map[string]string{"a": "b", "c": ""},
		}
		if b1, b2 := mustJSON(req), mustJSON(want); b1 != b2 {
			t.Errorf("create body\n%s\nwant\n%s", b1, b2)
		}
		replyJSON(w, 201, api.Sandbox{ID: "sb-1", State: api.StateRunning, Labels: req.Labels})
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		state := r.URL.Query().Get("state")
		list := []api.Sandbox{{ID: "sb-1", State: api.StateRunning, CreatedAt: time.Now().Add(-3 * time.Minute), Labels: map[string]string{"b": "2", "a": "1"}, Running: 1}}
		if state == "" {
			list = append(list, api.Sandbox{ID: "sb-0", State: api.StateStopped, EndReason: api.EndIdle})
		}
		replyJSON(w, 200, api.SandboxList{Sandboxes: list})
	})
	out, errOut, code := sbRun(t, "", "create", "--memory", "512m", "--cpus", "0.5", "-w", ".", "--ro", "/etc:/e", "--rw", ".:/w",
		"--timeout", "1h", "--idle-timeout", "1us", "-l", "a=b", "--label", "c=")
	if code != 0 || out != "sb-1\n" {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	out, _, _ = sbRun(t, "", "create", "--json")
	var info api.Sandbox
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.ID != "sb-1" {
		t.Fatalf("create --json: %q %v", out, err)
	}
	out, errOut, code = sbRun(t, "", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[1], "3m ago") || !strings.HasSuffix(lines[1], "1      a=1,b=2") {
		t.Fatalf("ls: %d %q\n%s", code, errOut, out)
	}
	out, _, _ = sbRun(t, "", "ls", "--all", "--json")
	var list []api.Sandbox
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 || list[1].EndReason != api.EndIdle {
		t.Fatalf("ls --all --json: %q %v", out, err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestSandboxCLIExec(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("POST /v1/sandboxes/{sandbox}/exec", func(w http.ResponseWriter, r *http.Request) {
		var req api.Exec
		json.NewDecoder(r.Body).Decode(&req)
		switch r.PathValue("sandbox") {
		case "busy":
			replyJSON(w, 409, api.Error{Code: api.CodeBusy, Message: "another exec runs"})
			return
		case "nosuch":
			replyJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: "no sandbox nosuch"})
			return
		}
		res := sandbox.Result{ExitCode: 3, ExitReason: sandbox.ReasonExited, Stdout: strings.Join(req.Args, " ")}
		if !req.Stream {
			replyJSON(w, 200, res)
			return
		}
		if !slices.Equal(req.Env, []string{"A=1"}) || req.Cwd != "/tmp" || req.TimeoutMs != 1500 || req.Stdin != "input" {
			t.Errorf("exec request %+v", req)
		}
		if !slices.Equal(req.Args, []string{"sh", "-c", "exit 3"}) {
			t.Errorf("args %q", req.Args)
		}
		replyEvents(w, api.Event{Seq: 1, Type: api.EventStdout, Text: "out\n"}, api.Event{Seq: 2, Type: api.EventStderr, Data: []byte("err\n")},
			api.Event{Seq: 3, Type: api.EventExit, Result: &res})
	})
	out, errOut, code := sbRun(t, "input", "exec", "sb-1", "-e", "A=1", "--cwd", "/tmp", "--timeout", "1.5s", "-i", "--", "sh", "-c", "exit 3")
	if code != 3 || out != "out\n" || errOut != "err\n" {
		t.Fatalf("exec: %d %q %q", code, out, errOut)
	}
	out, _, code = sbRun(t, "", "exec", "--json", "sb-1", "--sh", "true")
	var res sandbox.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 3 || res.Stdout != "/bin/sh -c true" {
		t.Fatalf("exec --json: %d %q %v", code, out, err)
	}
	out, errOut, code = sbRun(t, "", "exec", "--json", "busy", "true")
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 125 || res.ExitReason != sandbox.ReasonSetupError || !strings.Contains(res.Error, "busy") {
		t.Fatalf("refused exec --json: %d %q %q", code, out, errOut)
	}
	_, errOut, code = sbRun(t, "", "exec", "busy", "true")
	if code != 125 || !strings.Contains(errOut, "busy: another exec runs") {
		t.Fatalf("refused exec: %d %q", code, errOut)
	}
	_, errOut, code = sbRun(t, "", "exec", "nosuch", "true")
	if code != 125 || !strings.Contains(errOut, "not_found: no sandbox nosuch") {
		t.Fatalf("unknown sandbox: %d %q", code, errOut)
	}
}

func TestSandboxCLIProcesses(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("POST /v1/sandboxes/sb-1/processes", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.Process{ID: 4, State: api.ProcRunning})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.ProcessList{Processes: []api.Process{
			{ID: 4, State: api.ProcRunning, Args: []string{"sleep", "9"}},
			{ID: 5, State: api.ProcExited, Args: []string{"false"}, Result: &sandbox.Result{ExitCode: 137, ExitReason: sandbox.ReasonOOM}},
		}})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes/4/output", func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Get("after") != "2" || q.Get("follow") != "true" {
			t.Errorf("logs query %q", r.URL.RawQuery)
		}
		replyEvents(w, api.Event{Seq: 3, Type: api.EventLost}, api.Event{Seq: 4, Type: api.EventStdout, Text: "a"},
			api.Event{Seq: 5, Type: api.EventStderr, Text: "b"}, api.Event{Seq: 6, Type: api.EventExit, Result: &sandbox.Result{}})
	})
	if out, _, code := sbRun(t, "", "start", "sb-1", "--", "sleep", "9"); code != 0 || out != "4\n" {
		t.Fatalf("start: %d %q", code, out)
	}
	out, _, code := sbRun(t, "", "ps", "sb-1")
	if code != 0 || !strings.Contains(out, "137 (oom)") || !strings.Contains(out, "sleep 9") {
		t.Fatalf("ps: %d\n%s", code, out)
	}
	out, errOut, code := sbRun(t, "", "logs", "-f", "sb-1", "4", "--after", "2")
	if code != 0 || out != "a" || !strings.HasSuffix(errOut, "b") || !strings.Contains(errOut, "dropped") {
		t.Fatalf("logs: %d %q %q", code, out, errOut)
	}
}

func TestSandboxCLIRemove(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("DELETE /v1/sandboxes/{sandbox}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("sandbox") == "sb-x" {
			replyJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: "no sandbox sb-x"})
			return
		}
		replyJSON(w, 200, api.Sandbox{ID: r.PathValue("sandbox"), State: api.StateStopped})
	})
	out, errOut, code := sbRun(t, "", "rm", "sb-1", "sb-x", "sb-2")
	if code != 125 || out != "sb-1\nsb-2\n" || errOut != "moat sandbox rm: sb-x: not_found: no sandbox sb-x\n" {
		t.Fatalf("rm: %d %q %q", code, out, errOut)
	}
}

type tarEntry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func makeTar(entries ...tarEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body))})
		io.WriteString(tw, e.body)
	}
	tw.Close()
	return buf.Bytes()
}

var readTar = hosttest.ReadTar

func TestSandboxCLICopy(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("GET /v1/sandboxes/sb-1/files/stat", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("path") == "/workspace" {
			replyJSON(w, 200, sandbox.FileInfo{Name: "workspace", Type: "dir"})
			return
		}
		replyJSON(w, 404, api.Error{Code: api.CodeFile, Errno: "ENOENT", Message: "no such file"})
	})
	var uploads []string
	mux.HandleFunc("PUT /v1/sandboxes/sb-1/archive", func(w http.ResponseWriter, r *http.Request) {
		uploads = append(uploads, r.URL.Query().Get("path"))
		uploads = append(uploads, readTar(t, r.Body)...)
		replyJSON(w, 200, api.Written{})
	})
	var writes []string
	mux.HandleFunc("PUT /v1/sandboxes/sb-1/files", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		writes = append(writes, r.URL.Query().Get("path")+" "+r.URL.Query().Get("mode")+" "+string(b))
		replyJSON(w, 200, api.Written{})
	})
	archives := map[string][]byte{
		"/workspace/src": makeTar(
			tarEntry{name: "src/", typ: tar.TypeDir, mode: 0o755},
			tarEntry{name: "src/a", typ: tar.TypeReg, mode: 0o640, body: "A"},
			tarEntry{name: "src/sub/", typ: tar.TypeDir, mode: 0o700},
			tarEntry{name: "src/sub/b", typ: tar.TypeReg, mode: 0o755, body: "B"},
			tarEntry{name: "src/link", typ: tar.TypeSymlink, link: "a"}),
		"/workspace/f.txt": makeTar(tarEntry{name: "f.txt", typ: tar.TypeReg, mode: 0o600, body: "F"}),
		"/workspace/escape": makeTar(
			tarEntry{name: "escape/", typ: tar.TypeDir, mode: 0o755},
			tarEntry{name: "escape/up", typ: tar.TypeSymlink, link: "../.."},
			tarEntry{name: "escape/up/pwned", typ: tar.TypeReg, mode: 0o644, body: "x"}),
		"/workspace/other": makeTar(
			tarEntry{name: "other/", typ: tar.TypeDir, mode: 0o755},
			tarEntry{name: "sibling", typ: tar.TypeReg, mode: 0o644, body: "x"}),
	}
	mux.HandleFunc("GET /v1/sandboxes/sb-1/archive", func(w http.ResponseWriter, r *http.Request) {
		b, ok := archives[r.URL.Query().Get("path")]
		if !ok {
			replyJSON(w, 404, api.Error{Code: api.CodeFile, Errno: "ENOENT", Message: "no such file"})
			return
		}
		w.Write(b)
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/files", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "content of "+r.URL.Query().Get("path"))
	})

	// Up: a tree into an existing directory, then as a new name.
	dir := t.TempDir()
	tree := filepath.Join(dir, "proj")
	os.MkdirAll(filepath.Join(tree, "pkg"), 0o755)
	os.WriteFile(filepath.Join(tree, "main.py"), []byte("print(1)"), 0o644)
	os.WriteFile(filepath.Join(tree, "pkg", "x"), []byte("X"), 0o600)
	os.Symlink("main.py", filepath.Join(tree, "ln"))
	if _, errOut, code := sbRun(t, "", "cp", tree, "sb-1:/workspace"); code != 0 {
		t.Fatalf("cp up: %d %q", code, errOut)
	}
	want := []string{"/workspace", "proj/ 5", "proj/ln 2 main.py", "proj/main.py 0  print(1)", "proj/pkg/ 5", "proj/pkg/x 0  X"}
	if !slices.Equal(uploads, want) {
		t.Fatalf("upload:\n%q\nwant\n%q", uploads, want)
	}
	uploads = nil
	if _, errOut, code := sbRun(t, "", "cp", tree, "sb-1:/workspace/renamed"); code != 0 || !slices.Equal(uploads[:2], []string{"/workspace", "renamed/ 5"}) {
		t.Fatalf("cp up renamed: %d %q %q", code, errOut, uploads)
	}
	// Up: a file, and stdin.
	if _, errOut, code := sbRun(t, "", "cp", filepath.Join(tree, "pkg", "x"), "sb-1:/workspace/"); code != 0 {
		t.Fatalf("cp file: %d %q", code, errOut)
	}
	if _, errOut, code := sbRun(t, "from stdin", "cp", "-", "sb-1:in.txt"); code != 0 {
		t.Fatalf("cp -: %d %q", code, errOut)
	}
	if want := []string{"/workspace/x 0600 X", "in.txt  from stdin"}; !slices.Equal(writes, want) {
		t.Fatalf("writes %q, want %q", writes, want)
	}

	// Down: a tree as a new name, then into an existing directory.
	dst := filepath.Join(dir, "out")
	if _, errOut, code := sbRun(t, "", "cp", "sb-1:/workspace/src", dst); code != 0 {
		t.Fatalf("cp down: %d %q", code, errOut)
	}
	checkFile := func(p, content string, mode os.FileMode) {
		t.Helper()
		b, err := os.ReadFile(p)
		st, _ := os.Stat(p)
		if err != nil || string(b) != content || st.Mode().Perm() != mode {
			t.Errorf("%s: %q %v %v", p, b, err, st)
		}
	}
	checkFile(filepath.Join(dst, "a"), "A", 0o640)
	checkFile(filepath.Join(dst, "sub", "b"), "B", 0o755)
	checkFile(filepath.Join(dst, "link"), "A", 0o640)
	if _, errOut, code := sbRun(t, "", "cp", "sb-1:/workspace/src", dst); code != 0 {
		t.Fatalf("cp down into: %d %q", code, errOut)
	}
	checkFile(filepath.Join(dst, "src", "sub", "b"), "B", 0o755)
	if _, errOut, code := sbRun(t, "", "cp", "sb-1:/workspace/f.txt", dst); code != 0 {
		t.Fatalf("cp file down: %d %q", code, errOut)
	}
	checkFile(filepath.Join(dst, "f.txt"), "F", 0o600)
	if out, errOut, code := sbRun(t, "", "cp", "sb-1:/workspace/f.txt", "-"); code != 0 || out != "content of /workspace/f.txt" {
		t.Fatalf("cp to stdout: %d %q %q", code, out, errOut)
	}

	// Archives that try to leave the destination fail, writing nothing
	// outside it.
	for _, src := range []string{"escape", "other"} {
		_, errOut, code := sbRun(t, "", "cp", "sb-1:/workspace/"+src, filepath.Join(dir, "bad-"+src))
		if code != 125 || errOut == "" {
			t.Errorf("cp of %s: %d %q", src, code, errOut)
		}
	}
	for _, p := range []string{filepath.Join(dir, "pwned"), filepath.Join(filepath.Dir(dir), "pwned"), filepath.Join(dir, "sibling")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	// A missing source.
	if _, errOut, code := sbRun(t, "", "cp", "sb-1:/workspace/none", dir); code != 125 || !strings.Contains(errOut, "ENOENT") {
		t.Fatalf("cp of a missing file: %d %q", code, errOut)
	}
}

// TestSandboxCLIPolicy: a command the policy denies exits 126 with the
// reason on stderr (and a denied result with --json); an approval the
// command waits for is told on stderr; --ask and --deny travel as the
// call's rules.
func TestSandboxCLIPolicy(t *testing.T) {
	mux := fakeDaemon(t)
	const reason = "denied: Exec `git push` matches deny Exec(git push*) (user ~/.config/moat/policy.toml:3)"
	mux.HandleFunc("POST /v1/sandboxes/{sandbox}/exec", func(w http.ResponseWriter, r *http.Request) {
		var req api.Exec
		json.NewDecoder(r.Body).Decode(&req)
		if req.Args[0] == "git" {
			if req.Policy == nil || !slices.Equal(req.Policy.Ask, []string{"Exec(curl *)"}) || !slices.Equal(req.Policy.Deny, []string{"Read(x)"}) {
				t.Errorf("per-call rules: %+v", req.Policy)
			}
			replyJSON(w, 403, api.Error{Code: api.CodePolicyDenied, Message: reason, Rule: "deny Exec(git push*)", Source: "user ~/.config/moat/policy.toml:3"})
			return
		}
		res := sandbox.Result{ExitReason: sandbox.ReasonExited}
		now := time.Now()
		ap := api.Approval{ID: "ap_1", State: api.ApprovalPending, Reason: "needs approval: x", CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
		done := ap
		done.State, done.AnsweredBy = api.ApprovalAllowed, "token:abcd"
		replyEvents(w, api.Event{Seq: 1, Type: api.EventApproval, Approval: &ap}, api.Event{Seq: 2, Type: api.EventApproval, Approval: &done},
			api.Event{Seq: 3, Type: api.EventStdout, Text: "ran\n"}, api.Event{Seq: 4, Type: api.EventExit, Result: &res})
	})
	mux.HandleFunc("POST /v1/sandboxes/{sandbox}/processes", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 403, api.Error{Code: api.CodePolicyDenied, Message: reason})
	})
	_, errOut, code := sbRun(t, "", "exec", "--ask", "Exec(curl *)", "--deny", "Read(x)", "sb-1", "--", "git", "push")
	if code != sandbox.ExitNotExecutable || errOut != "moat: "+reason+"\n" {
		t.Fatalf("denied exec: %d %q", code, errOut)
	}
	out, _, code := sbRun(t, "", "exec", "--json", "--ask", "Exec(curl *)", "--deny", "Read(x)", "sb-1", "--", "git", "push")
	var res sandbox.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 126 || res.ExitReason != sandbox.ReasonDenied || res.Error != reason {
		t.Fatalf("denied exec --json: %d %q", code, out)
	}
	if _, errOut, code = sbRun(t, "", "start", "sb-1", "--", "git", "push"); code != 126 || !strings.Contains(errOut, reason) {
		t.Fatalf("denied start: %d %q", code, errOut)
	}
	out, errOut, code = sbRun(t, "", "exec", "sb-1", "--", "touch", "x")
	if code != 0 || out != "ran\n" || !strings.Contains(errOut, "moat: waiting for approval ap_1 (needs approval: x;") ||
		!strings.Contains(errOut, "moat approvals allow|deny ap_1") || !strings.Contains(errOut, "moat: approval ap_1 allowed by token:abcd") {
		t.Fatalf("approved exec: %d %q %q", code, out, errOut)
	}
}
