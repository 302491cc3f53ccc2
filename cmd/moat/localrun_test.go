//go:build linux

package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// localCases are the runs the local daemon must answer exactly as moat
// run does by itself.
var localCases = []struct {
	name  string
	args  []string
	stdin string
}{
	{"exit 0", []string{"--", "/bin/true"}, ""},
	{"exit 3", []string{"--sh", "echo out; echo err >&2; exit 3"}, ""},
	{"signal", []string{"--sh", "kill -TERM $$"}, ""},
	{"timeout", []string{"--timeout", "300ms", "--", "sleep", "60"}, ""},
	{"policy deny", []string{"--deny", "Exec(curl *)", "--", "curl", "x"}, ""},
	{"stdin", []string{"-i", "--", "cat"}, "line one\nline two\n"},
	{"large output", []string{"--sh", "head -c 3000000 /dev/zero | od -v | tail -c 100000; seq 1 20000 >&2"}, ""},
	{"not found", []string{"--", "no-such-command-moat"}, ""},
	{"bad flag value", []string{"--memory", "lots", "--", "/bin/true"}, ""},
}

// TestLocalRunSameAsCold runs each case through a running daemon and by
// itself: exit codes, streams and --json results are the same.
func TestLocalRunSameAsCold(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	d := startDaemon(t, dir)
	sock := filepath.Join(dir, runSocketName)
	for _, c := range localCases {
		t.Run(c.name, func(t *testing.T) {
			for _, json := range []bool{false, true} {
				flags := []string{"run"}
				if json {
					flags = append(flags, "--json")
				}
				cold := testutil.ExecStdin(t, []byte(c.stdin), append(append(flags, "--local-daemon", "never"), c.args...)...)
				local := testutil.ExecStdin(t, []byte(c.stdin), append(append(flags, "--local-daemon", "require", "--daemon-socket", sock), c.args...)...)
				if cold.Code != local.Code {
					t.Fatalf("json=%v: exit %d locally, %d cold (stderr %q / %q)", json, local.Code, cold.Code, trim(local.Stderr), trim(cold.Stderr))
				}
				if !json {
					if cold.Stdout != local.Stdout || cold.Stderr != local.Stderr {
						t.Fatalf("streams differ:\nlocal %q %q\ncold  %q %q", trim(local.Stdout), trim(local.Stderr), trim(cold.Stdout), trim(cold.Stderr))
					}
					continue
				}
				if a, b := stableJSON(t, local.Stdout), stableJSON(t, cold.Stdout); a != b {
					t.Fatalf("--json differs:\nlocal %s\ncold  %s", a, b)
				}
			}
		})
	}
	_ = d
}

// stableJSON is a --json result without what differs between two runs of
// the same command (durations, memory and CPU figures, the uid range).
func stableJSON(t *testing.T, s string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not a JSON result: %v: %q", err, trim(s))
	}
	for k := range m {
		if strings.HasSuffix(k, "_ms") || strings.HasSuffix(k, "_bytes") && strings.Contains(k, "memory") || strings.HasPrefix(k, "cpu") || k == "enforcement" {
			delete(m, k)
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func trim(s string) string {
	if len(s) > 300 {
		return s[:150] + "…" + s[len(s)-150:]
	}
	return s
}

// TestLocalRunFallback: with no daemon, or a stale socket, auto runs the
// command here and require fails with 125 without running it.
func TestLocalRunFallback(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	mark := filepath.Join(dir, "ran")
	for _, sock := range []string{filepath.Join(dir, "none.sock"), stale} {
		o := testutil.Exec(t, "run", "--local-daemon", "auto", "--daemon-socket", sock, "--sh", "echo fell back")
		if o.Code != 0 || o.Stdout != "fell back\n" {
			t.Fatalf("auto, %s: exit %d, %q %q", sock, o.Code, o.Stdout, o.Stderr)
		}
		o = testutil.Exec(t, "run", "--local-daemon", "require", "--daemon-socket", sock, "--rw", dir, "--sh", "touch "+mark)
		if o.Code != 125 || !strings.Contains(o.Stderr, "no local daemon served the run") {
			t.Fatalf("require, %s: exit %d, stderr %q", sock, o.Code, o.Stderr)
		}
		if _, err := os.Stat(mark); err == nil {
			t.Fatal("require without a daemon ran the command")
		}
	}
	if o := testutil.Exec(t, "run", "--local-daemon", "sometimes", "--", "/bin/true"); o.Code != 125 {
		t.Fatalf("bad --local-daemon: exit %d", o.Code)
	}
}

// TestLocalRunRefusedShape: -t is left to the caller (auto runs it here,
// require fails); the daemon's socket is private and gone after it stops.
func TestLocalRunRefusedShape(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	d := startDaemon(t, dir)
	sock := filepath.Join(dir, runSocketName)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	if o := testutil.Exec(t, "run", "-t", "--local-daemon", "require", "--daemon-socket", sock, "--", "/bin/true"); o.Code != 125 {
		t.Fatalf("-t with require: exit %d", o.Code)
	}
	// Another config than the daemon's: refused by the daemon, run here.
	cfg := filepath.Join(dir, "other.toml")
	if err := os.WriteFile(cfg, []byte("[limits]\npids = 77\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if o := testutil.Exec(t, "run", "--config", cfg, "--local-daemon", "require", "--daemon-socket", sock, "--", "/bin/true"); o.Code != 125 || !strings.Contains(o.Stderr, "not the daemon's") {
		t.Fatalf("other config with require: exit %d, %q", o.Code, o.Stderr)
	}
	if o := testutil.Exec(t, "run", "--config", cfg, "--daemon-socket", sock, "--sh", "cat /sys/fs/cgroup/pids.max 2>/dev/null || echo ran"); o.Code != 0 {
		t.Fatalf("other config with auto: exit %d, %q", o.Code, o.Stderr)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Fatal("the socket outlived the daemon")
	}
}
