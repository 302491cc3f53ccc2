package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/creack/pty"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestExitCodes checks every exit code of docs/DESIGN.md's semantics through
// the CLI, streaming mode and --json alike.
func TestExitCodes(t *testing.T) {
	testutil.RequireRoot(t)
	cases := []struct {
		name   string
		args   []string
		code   int
		reason sandbox.ExitReason
	}{
		{"success", []string{"--", "/bin/true"}, 0, sandbox.ReasonExited},
		{"own code", []string{"--sh", "exit 7"}, 7, sandbox.ReasonExited},
		{"signal", []string{"--sh", "kill -TERM $$"}, 128 + 15, sandbox.ReasonSignaled},
		{"sigkill", []string{"--sh", "kill -KILL $$"}, 128 + 9, sandbox.ReasonSignaled},
		{"timeout", []string{"--timeout", "300ms", "--", "sleep", "60"}, 124, sandbox.ReasonTimeout},
		{"timeout ignoring SIGTERM", []string{"--timeout", "300ms", "--sh", "trap '' TERM; sleep 60"}, 124, sandbox.ReasonTimeout},
		{"not found", []string{"--", "no-such-command-moat"}, 127, sandbox.ReasonExited},
		{"not found by path", []string{"--", "/no/such/file"}, 127, sandbox.ReasonExited},
		{"not executable", []string{"--", "/etc/passwd"}, 126, sandbox.ReasonExited},
		{"directory", []string{"--", "/usr"}, 126, sandbox.ReasonExited},
		{"missing cwd", []string{"--cwd", "/nonexistent", "--", "/bin/true"}, 125, sandbox.ReasonSetupError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testutil.Exec(t, append([]string{"run"}, c.args...)...)
			if o.Code != c.code {
				t.Fatalf("streaming: exit %d, want %d (stderr %q)", o.Code, c.code, o.Stderr)
			}
			flags, argv := splitRunArgs(c.args)
			res := testutil.Run(t, flags, argv...)
			if res.ExitCode != c.code || res.ExitReason != c.reason {
				t.Fatalf("--json: exit %d reason %s, want %d %s (error %q)", res.ExitCode, res.ExitReason, c.code, c.reason, res.Error)
			}
			if c.code == 128+9 && res.Signal != 9 {
				t.Fatalf("signal = %d, want 9", res.Signal)
			}
		})
	}
}

// splitRunArgs splits run args into flags and the command: after "--", or
// the --sh string turned into sh -c.
func splitRunArgs(args []string) (flags, argv []string) {
	for i, a := range args {
		switch a {
		case "--":
			return args[:i], args[i+1:]
		case "--sh":
			return args[:i], []string{"/bin/sh", "-c", args[i+1]}
		}
	}
	return args, nil
}

// TestBadInput: every malformed request is a one-line error, exit 125, and
// leaves nothing behind on the host.
func TestBadInput(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"run", "--bogus", "--", "true"}, "unknown flag"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"no command", []string{"run"}, "no command"},
		{"sh and argv", []string{"run", "--sh", "true", "--", "true"}, "not both"},
		{"missing workspace", []string{"run", "-w", filepath.Join(dir, "missing"), "--", "true"}, "no such file"},
		{"workspace symlink", []string{"run", "-w", link, "--", "true"}, "symlink"},
		{"workspace file", []string{"run", "-w", file, "--", "true"}, "not a directory"},
		{"missing bind", []string{"run", "--ro", filepath.Join(dir, "missing"), "--", "true"}, "no such file"},
		{"bind symlink", []string{"run", "--ro", link + ":/opt/x", "--", "true"}, "symlink"},
		{"bind fifo", []string{"run", "--ro", fifo + ":/opt/x", "--", "true"}, "not a directory or regular file"},
		{"bind empty host", []string{"run", "--ro", ":/opt/x", "--", "true"}, "no host path"},
		{"relative target", []string{"run", "--ro", dir + ":opt", "--", "true"}, "not absolute"},
		{"reserved target", []string{"run", "--ro", dir + ":/proc/x", "--", "true"}, "reserved"},
		{"dotdot target", []string{"run", "--ro", dir + ":/opt/../etc", "--", "true"}, "clean"},
		{"duplicate target", []string{"run", "--ro", dir + ":/opt/x", "--rw", dir + ":/opt/x", "--", "true"}, "two mounts"},
		{"negative timeout", []string{"run", "--timeout", "-1s", "--", "true"}, "negative"},
		{"bad env", []string{"run", "-e", "NOEQUALS", "--", "true"}, "KEY=VALUE"},
		{"relative cwd", []string{"run", "--cwd", "rel", "--", "true"}, "not absolute"},
		{"oversized command line", append([]string{"run", "--", "true"}, bigArgs(12, 100_000)...), "too large"},
	}
	before := hostState(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testutil.Exec(t, c.args...)
			if o.Code != 125 {
				t.Fatalf("exit %d, want 125; stderr %q", o.Code, o.Stderr)
			}
			lines := strings.Split(strings.TrimSpace(o.Stderr), "\n")
			if len(lines) != 1 || !strings.Contains(o.Stderr, c.want) || !strings.HasPrefix(o.Stderr, "moat") {
				t.Fatalf("stderr %q: want one moat line mentioning %q", o.Stderr, c.want)
			}
		})
	}
	// With --json a refused request is still one result object.
	res := testutil.Run(t, []string{"-w", filepath.Join(dir, "missing")}, "true")
	if res.ExitCode != 125 || res.ExitReason != sandbox.ReasonSetupError || res.Enforcement != nil || !strings.Contains(res.Error, "no such file") {
		t.Fatalf("--json setup error: %+v", res)
	}
	// Nothing was added. (Other packages' tests run at the same time and
	// may collect unused layers or mount their own temporary directories:
	// only what appeared under moat's paths counts.)
	after := hostState(t)
	for p := range after {
		if !before[p] {
			t.Errorf("left on the host: %s", p)
		}
	}
}

// bigArgs returns n arguments of size bytes each.
func bigArgs(n, size int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = strings.Repeat("a", size)
	}
	return a
}

// hostState summarises what a refused request could leave behind on the
// host: the mount table and the files of moat's state directory.
func hostState(t *testing.T) map[string]bool {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]bool{}
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.Contains(f[4], "moat") {
			state["mount "+f[4]] = true
		}
	}
	_ = filepath.WalkDir("/run/moat", func(p string, _ os.DirEntry, _ error) error {
		state[p] = true
		return nil
	})
	return state
}

// TestResultFields checks the --json result: streams kept apart, byte
// counts, timings, usage and the enforcement report.
func TestResultFields(t *testing.T) {
	res := testutil.Sh(t, "printf abc; printf 12345 >&2; exit 3")
	if res.Stdout != "abc" || res.Stderr != "12345" || res.StdoutBytes != 3 || res.StderrBytes != 5 {
		t.Fatalf("streams: %+v", res)
	}
	if res.ExitCode != 3 || res.ExitReason != sandbox.ReasonExited || res.Truncated {
		t.Fatalf("exit: %+v", res)
	}
	if res.TimeToFirstOutputMs < 0 || res.TimeToFirstOutputMs > res.DurationMs || res.PeakMemoryBytes <= 0 {
		t.Fatalf("timings/usage: %+v", res)
	}
	e := res.Enforcement
	namespaces := 0
	for _, p := range e.Protections {
		if strings.HasSuffix(p.Name, "_namespace") {
			namespaces++
		}
	}
	_, noNewPrivs := e.Lookup("no_new_privs")
	landlock, _ := e.Lookup("landlock")
	filter, _ := e.Lookup("seccomp")
	if e.User != 1000 || !noNewPrivs || !strings.HasPrefix(landlock.Detail, "ABI ") || namespaces != 7 || !strings.HasPrefix(filter.Detail, "filter") {
		t.Fatalf("enforcement: %+v", e)
	}
	quiet := testutil.Sh(t, "true")
	if quiet.TimeToFirstOutputMs != -1 {
		t.Fatalf("no output but time_to_first_output_ms = %d", quiet.TimeToFirstOutputMs)
	}
}

// TestOutputTruncation: past the cap, the head and tail are kept with a
// marker, and the byte counts are exact.
func TestOutputTruncation(t *testing.T) {
	res := testutil.Sh(t, "head -c 3000000 /dev/zero | tr '\\0' a; printf END")
	if !res.Truncated || res.StdoutBytes != 3000003 {
		t.Fatalf("truncated=%v bytes=%d", res.Truncated, res.StdoutBytes)
	}
	if len(res.Stdout) > 2_000_100 || !strings.Contains(res.Stdout, "bytes truncated ...]") || !strings.HasSuffix(res.Stdout, "aEND") {
		t.Fatalf("kept %d bytes, tail %q", len(res.Stdout), res.Stdout[len(res.Stdout)-10:])
	}
}

// TestEnvironment: the host environment never reaches the sandbox; the
// documented defaults and --env do.
func TestEnvironment(t *testing.T) {
	testutil.RequireRoot(t)
	t.Setenv("MOAT_TEST_HOST_SECRET", "leaked")
	o := testutil.Exec(t, "run", "-e", "FOO=bar", "-e", "LANG=en_US.UTF-8", "--", "env")
	if o.Code != 0 {
		t.Fatalf("exit %d: %s", o.Code, o.Stderr)
	}
	// Control: the variable is in moat's own environment.
	if os.Getenv("MOAT_TEST_HOST_SECRET") != "leaked" {
		t.Fatal("control: host variable not set")
	}
	if strings.Contains(o.Stdout, "MOAT_TEST_HOST_SECRET") {
		t.Fatalf("host environment leaked:\n%s", o.Stdout)
	}
	for _, want := range []string{"FOO=bar", "LANG=en_US.UTF-8", "NO_COLOR=1", "TERM=dumb", "PAGER=cat", "GIT_PAGER=cat",
		"HOME=/home/sandbox", "TMPDIR=/tmp", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"} {
		if !strings.Contains(o.Stdout, want+"\n") {
			t.Errorf("missing %s in:\n%s", want, o.Stdout)
		}
	}
}

// TestStdin: stdin is /dev/null by default and the caller's with -i.
func TestStdin(t *testing.T) {
	testutil.RequireRoot(t)
	o := testutil.ExecStdin(t, []byte("hello from host\n"), "run", "--", "cat")
	if o.Code != 0 || o.Stdout != "" {
		t.Fatalf("default stdin: exit %d out %q", o.Code, o.Stdout)
	}
	o = testutil.ExecStdin(t, []byte("hello from host\n"), "run", "-i", "--", "cat")
	if o.Code != 0 || o.Stdout != "hello from host\n" {
		t.Fatalf("-i: exit %d out %q", o.Code, o.Stdout)
	}
}

// TestWorkspaceOwnership: a host workspace owned by an ordinary user is
// writable by the sandbox user, and what the sandbox creates belongs to
// that host owner afterwards (idmapped mount).
func TestWorkspaceOwnership(t *testing.T) {
	testutil.RequireRoot(t)
	ws := t.TempDir()
	const owner = 4242
	if err := os.Chown(ws, owner, owner); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "in.txt"), []byte("from host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(ws, "in.txt"), owner, owner); err != nil {
		t.Fatal(err)
	}
	res := testutil.Sh(t, "cat in.txt && stat -c '%u:%g' in.txt && echo made > out.txt && mkdir sub && touch sub/f", "-w", ws)
	if res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "from host1000:1000") {
		t.Fatalf("exit %d out %q err %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, p := range []string{"out.txt", "sub", "sub/f"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(ws, p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != owner || st.Gid != owner {
			t.Errorf("%s owned by %d:%d on the host, want %d:%d", p, st.Uid, st.Gid, owner, owner)
		}
	}
	if p, _ := res.Enforcement.Lookup("workspace_idmap"); p.Detail != "idmapped" {
		t.Fatalf("workspace_idmap = %q", p.Detail)
	}
}

// TestBinds: --ro is readable and not writable, --rw is writable, a file
// can be bound, targets default to the host path.
func TestBinds(t *testing.T) {
	testutil.RequireRoot(t)
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "r.txt"), []byte("ro-data"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "cfg")
	if err := os.WriteFile(cfg, []byte("cfg-data"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := testutil.Sh(t, `cat /data/r.txt; echo; if echo x > /data/w 2>/dev/null; then echo RO-WRITABLE; fi
echo w > `+rw+`/w.txt && cat /home/sandbox/.cfg`,
		"--ro", ro+":/data", "--rw", rw, "--ro", cfg+":/home/sandbox/.cfg")
	if res.ExitCode != 0 || res.Stdout != "ro-data\ncfg-data" {
		t.Fatalf("exit %d out %q err %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "w.txt")); err != nil || string(b) != "w\n" {
		t.Fatalf("rw bind: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ro, "w")); err == nil {
		t.Fatal("write through --ro reached the host")
	}
}

// TestTTY: -t gives the command a new pty inside the sandbox (its own
// devpts), never the caller's terminal.
func TestTTY(t *testing.T) {
	testutil.RequireRoot(t)
	ptm, pts, err := pty.Open()
	if err != nil {
		testutil.SkipOrFail(t, "no pty: "+err.Error())
	}
	defer ptm.Close()
	if err := pty.Setsize(ptm, &pty.Winsize{Rows: 33, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Moat(t), "run", "-t", "--", "sh", "-c", "tty; stty size; readlink /proc/self/fd/0")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = buf.ReadFrom(ptm); close(done) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("moat -t: %v\n%s", err, buf.String())
	}
	ptm.Close()
	<-done
	out := strings.ReplaceAll(buf.String(), "\r", "")
	if !strings.Contains(out, "/dev/pts/0\n33 101\n/dev/pts/0") {
		t.Fatalf("tty output %q", out)
	}
}
