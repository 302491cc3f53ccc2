package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// hostileArgv is a command whose display would rewrite the terminal: it
// erases the line and returns to its start, reverses what follows, and
// has a word with spaces that must not read as three words.
var hostileArgv = []string{"printf", "\x1b[2K\rok", "/\u202e", "a b"}

// hostileShown is how moat shows it in a request: shell words, escaped.
const hostileShown = `Exec(printf '\x1b[2K\rok' '/\u202e' 'a b')`

// checkNoControls fails when out holds a terminal control, a carriage
// return not ending a line (a pty writes \r\n), a C1 control or a bidi
// override.
func checkNoControls(t *testing.T, what, out string) {
	t.Helper()
	out = strings.ReplaceAll(out, "\r\n", "\n")
	for _, bad := range []string{"\x1b", "\r", "\u202e", "\u009b", "\x7f"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s shows %q raw:\n%q", what, bad, out)
		}
	}
}

// TestApprovalsLsEscapes: moat approvals ls, ls --follow, allow and ls
// --json show an approval whose request, rule and source carry escape
// sequences, a carriage return, a tab, a newline and a bidi override
// escaped, on one line each, in their columns.
func TestApprovalsLsEscapes(t *testing.T) {
	mux := fakeDaemon(t)
	t.Setenv("MOAT_APPROVER_TOKEN", "tok")
	now := time.Now()
	ap := api.Approval{ID: "ap_1", Tenant: "default", Sandbox: "sb-1", Op: api.OpExec, Kind: "Exec",
		Request: "Exec(printf '\x1b[2K\rok' '/\u202e' 'a b')", Rule: "ask Exec(printf *)\t\u202e", Source: "project .moat/policy.toml\n:3",
		Reason: "needs approval\x1b]8;;https://evil.example/\x07", State: api.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	// Control: the request does hold the controls; printing it raw
	// would send them to the terminal.
	if !strings.Contains(ap.Request, "\x1b[2K\r") || !strings.Contains(ap.Request, "\u202e") {
		t.Fatal("control: no controls in the request")
	}
	mux.HandleFunc("GET /v1/approvals", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") == "true" {
			replyEvents(w, api.Event{Seq: 1, Type: api.EventApproval, Approval: &ap})
			return
		}
		replyJSON(w, 200, api.ApprovalList{Approvals: []api.Approval{ap}})
	})
	mux.HandleFunc("POST /v1/approvals/{id}", func(w http.ResponseWriter, r *http.Request) {
		a := ap
		a.State, a.AnsweredBy, a.Sandbox = api.ApprovalAllowed, "token:\x1b[31mroot", "sb-\x1b[31m1"
		replyJSON(w, 200, a)
	})
	out, errOut, code := apRun(t, "ls")
	checkNoControls(t, "ls", out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(out, hostileShown) ||
		!strings.Contains(out, `ask Exec(printf *)\t\u202e (project .moat/policy.toml\n:3)`) {
		t.Fatalf("ls: exit %d %q\n%s", code, errOut, out)
	}
	out, _, code = apRun(t, "ls", "--follow")
	checkNoControls(t, "ls --follow", out)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, hostileShown) {
		t.Fatalf("ls --follow: exit %d\n%s", code, out)
	}
	out, _, code = apRun(t, "allow", "ap_1")
	checkNoControls(t, "allow", out)
	if code != 0 || !strings.Contains(out, hostileShown+` in sb-\x1b[31m1`) {
		t.Fatalf("allow: exit %d %q", code, out)
	}
	// JSON stays JSON with the same values, but no raw bidi override.
	out, _, code = apRun(t, "ls", "--json")
	checkNoControls(t, "ls --json", out)
	var list []api.Approval
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].Request != ap.Request || list[0].Rule != ap.Rule {
		t.Fatalf("ls --json: exit %d %q", code, out)
	}
}

// TestApprovalsDisplayDaemon: against a real daemon, a command held by an
// ask rule carries escape sequences and a bidi override in its argv. The
// waiting line of moat sandbox exec, moat approvals ls and the denial are
// shown escaped, with the argv's words quoted.
func TestApprovalsDisplayDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	user := filepath.Join(dir, "user.toml")
	writeFile(t, user, "version = 1\nask = [\"Exec(printf *)\"]\n", 0o644)
	d := testutil.StartDaemon(t, t.TempDir(), "--listen", "127.0.0.1:0", "--home", dir, "--policy-user", user,
		"--policy-managed", filepath.Join(dir, "managed.toml"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(client.WithHTTP(d.URL, d.Token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sb, err := c.CreateSandbox(ctx, api.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "MOAT_MODE=http", "MOAT_URL="+d.URL, "MOAT_TOKEN="+d.Token, "MOAT_APPROVER_TOKEN="+d.ApproverToken)
	moat := func(args ...string) (string, string, int) {
		cmd := exec.CommandContext(ctx, testutil.Moat(t), args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}

	ex := exec.CommandContext(ctx, testutil.Moat(t), append([]string{"sandbox", "exec", sb.ID(), "--"}, hostileArgv...)...)
	ex.Env = env
	stderr, err := ex.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	ex.Stdout = &stdout
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(stderr)
	waiting, err := rd.ReadString('\n')
	if err != nil || !strings.Contains(waiting, "waiting for approval") {
		t.Fatalf("no waiting line: %q %v", waiting, err)
	}
	checkNoControls(t, "the waiting line", waiting)

	// Control: the daemon's own record of the approval holds the raw
	// controls (shell-quoted words).
	list, err := c.Approvals(ctx, api.ListApprovals{Sandbox: sb.ID()})
	if err != nil || len(list) != 1 {
		t.Fatalf("approvals: %+v %v", list, err)
	}
	if want := "Exec(printf '\x1b[2K\rok' '/\u202e' 'a b')"; list[0].Request != want {
		t.Errorf("the daemon's request text %q, want %q", list[0].Request, want)
	}

	out, errOut, code := moat("approvals", "ls")
	checkNoControls(t, "moat approvals ls", out)
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, hostileShown) {
		t.Fatalf("moat approvals ls: exit %d %q\n%s", code, errOut, out)
	}
	out, errOut, code = moat("approvals", "deny", list[0].ID, "--reason", "no\x1b[8m")
	checkNoControls(t, "moat approvals deny", out)
	if code != 0 || !strings.Contains(out, hostileShown) {
		t.Fatalf("moat approvals deny: exit %d %q %q", code, out, errOut)
	}
	rest := new(bytes.Buffer)
	rest.ReadFrom(rd)
	err = ex.Wait()
	checkNoControls(t, "moat sandbox exec's denial", rest.String())
	if code := ex.ProcessState.ExitCode(); code != 126 || stdout.Len() != 0 || !strings.Contains(rest.String(), `\x1b[8m`) {
		t.Fatalf("exec: exit %d (%v) out %q err %q", code, err, stdout.String(), rest.String())
	}
}

// TestRunAskPromptEscapes: the question moat run asks on the terminal
// shows a request with escape sequences and a bidi override escaped and
// its argv quoted, and the refusal is escaped too.
func TestRunAskPromptEscapes(t *testing.T) {
	testutil.RequireRoot(t)
	home := t.TempDir()
	ptm, pts, err := pty.Open()
	if err != nil {
		testutil.SkipOrFail(t, "no pty: "+err.Error())
	}
	defer ptm.Close()
	cmd := exec.Command(testutil.Moat(t), append([]string{"run", "--ask", "Exec(printf *)", "--approval-timeout", "1m", "--"}, hostileArgv...)...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	prompt := make([]byte, 0, 512)
	buf := make([]byte, 256)
	for !bytes.Contains(prompt, []byte("Allow once? [y/N]")) {
		n, err := ptm.Read(buf)
		if err != nil {
			t.Fatalf("reading the prompt: %v (%q)", err, prompt)
		}
		prompt = append(prompt, buf[:n]...)
	}
	checkNoControls(t, "the prompt", string(prompt))
	if !bytes.Contains(prompt, []byte("request: "+hostileShown)) {
		t.Errorf("prompt %q lacks %q", prompt, hostileShown)
	}
	if _, err := ptm.Write([]byte("n\n")); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = bytes.NewBuffer(nil).ReadFrom(ptm) }()
	_ = cmd.Wait()
	checkNoControls(t, "the refusal", stderr.String())
	if code := cmd.ProcessState.ExitCode(); code != 126 || !strings.Contains(stderr.String(), "refused on the terminal") {
		t.Fatalf("exit %d, out %q err %q", code, stdout.String(), stderr.String())
	}
}

// TestDaemonLogCapped: the daemon's log escapes a sandbox's strings (the
// text handler quotes them) and cuts long ones, so that one line stays
// one line of bounded length.
func TestDaemonLogCapped(t *testing.T) {
	host := strings.Repeat("\x1b[2K\r\u202eevil.example", 1<<16)
	err := errors.New("open /workspace/" + host + ": denied")
	var raw, capped bytes.Buffer
	slog.New(slog.NewTextHandler(&raw, nil)).Info("netproxy: connect", "host", host, "err", err)
	// Control: without the cap the line carries the whole string.
	if raw.Len() < len(host) {
		t.Fatalf("control: a %d-byte line", raw.Len())
	}
	slog.New(slog.NewTextHandler(&capped, &slog.HandlerOptions{ReplaceAttr: capLogValue})).Info("netproxy: connect", "host", host, "err", err)
	line := capped.String()
	checkNoControls(t, "the log line", strings.TrimSuffix(line, "\n"))
	if strings.Count(line, "\n") != 1 || len(line) > 4*display.DefaultMax+300 || !strings.Contains(line, `\x1b[2K\r\u202eevil.example`) ||
		strings.Count(line, "…[+") != 2 {
		t.Fatalf("a %d-byte line: %.300q", len(line), line)
	}
}

// TestSandboxListsEscape: moat sandbox ps shows each process's argv as
// shell words, escaped, so that ["rm -rf /"] and ["rm", "-rf", "/"] read
// differently and an escape sequence is shown, not run; moat sandbox ls
// shows labels escaped and quoted, so that one label never reads as two.
func TestSandboxListsEscape(t *testing.T) {
	mux := fakeDaemon(t)
	procs := []api.Process{
		{ID: 4, State: api.ProcRunning, Args: []string{"rm -rf /"}},
		{ID: 5, State: api.ProcRunning, Args: []string{"rm", "-rf", "/"}},
		{ID: 6, State: api.ProcRunning, Args: []string{"printf", "\x1b]8;;https://evil.example/\x07link\x1b]8;;\x07\r\u202e"}},
	}
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.ProcessList{Processes: procs})
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{{ID: "sb-1", State: api.StateRunning,
			Labels: map[string]string{"team": "a,owner=root", "x\ty": "\x1b[8m"}}}})
	})
	out, errOut, code := sbRun(t, "", "ps", "sb-1")
	checkNoControls(t, "ps", out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 4 || !strings.HasSuffix(lines[1], "'rm -rf /'") || !strings.HasSuffix(lines[2], " rm -rf /") ||
		!strings.HasSuffix(lines[3], `printf $'\x1b]8;;https://evil.example/\alink\x1b]8;;\a\r\u202e'`) {
		t.Fatalf("ps: %d %q\n%s", code, errOut, out)
	}
	out, _, code = sbRun(t, "", "ls")
	checkNoControls(t, "ls", out)
	if code != 0 || !strings.Contains(out, `team="a,owner=root",x\ty=\x1b[8m`) {
		t.Fatalf("ls: %d\n%s", code, out)
	}
}
