package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// moatWithin runs moat with args and fails the test if it has not ended
// within d (it spins or blocks); HOME is a fresh directory.
func moatWithin(t *testing.T, d time.Duration, args ...string) testutil.Output {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, testutil.Moat(t), args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	cmd.WaitDelay = time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("moat %q did not end within %v (it spins or blocks)", args, d)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return testutil.Output{Code: code, Stdout: out.String(), Stderr: errb.String()}
}

// wantRefused checks exit 125 with one line on stderr holding want.
func wantRefused(t *testing.T, o testutil.Output, want string) {
	t.Helper()
	if o.Code != 125 || !strings.Contains(o.Stderr, want) || strings.Count(strings.TrimSpace(o.Stderr), "\n") != 0 {
		t.Fatalf("exit %d, stderr %q; want 125 and one line with %q", o.Code, o.Stderr, want)
	}
}

// TestRunBadBindTarget: a relative or unclean bind target, or a system
// tree as a bind or the workspace, is refused at once (exit 125, one
// line); a relative target used to make the policy compiler spin.
func TestRunBadBindTarget(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ro", "/var/lib:rel"}, `--ro bind target "rel": not absolute`},
		{[]string{"--rw", t.TempDir() + ":."}, `--rw bind target ".": not absolute`},
		{[]string{"--ro", "/var/lib:/data/"}, `not a clean path (want "/data")`},
		{[]string{"--ro", "/sys"}, `--ro bind source "/sys": the host's /sys is a system tree`},
		{[]string{"--ro", "/proc/self:/me"}, `the host's /proc is a system tree`},
		{[]string{"-w", "/dev"}, `workspace "/dev": the host's /dev is a system tree`},
	} {
		o := moatWithin(t, 30*time.Second, append(append([]string{"run"}, c.args...), "--", "true")...)
		wantRefused(t, o, c.want)
	}
	// Control: a clean absolute target runs.
	if o := moatWithin(t, 60*time.Second, "run", "--ro", "/var/lib:/data", "--", "test", "-d", "/data"); o.Code != 0 {
		t.Fatalf("control: exit %d %s", o.Code, o.Stderr)
	}
}

// TestProjectPolicySpecial: a FIFO or a symlink as the workspace's
// .moat/policy.toml is refused at once by moat run -w and moat policy
// explain, naming the problem (a FIFO used to hang both); the symlink's
// target, a root-only file that root could read, is not read.
func TestProjectPolicySpecial(t *testing.T) {
	testutil.RequireRoot(t)
	secretDir := filepath.Join(t.TempDir(), "root-only")
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(secretDir, "policy.toml")
	if err := os.WriteFile(secret, []byte("SeCrEtKeY = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Control: given as the user's file (an operator's file may be a
	// link), root reads it and the error quotes its key.
	if o := moatWithin(t, 30*time.Second, "policy", "explain", "-w", t.TempDir(), "--no-managed", "--user", secret, "Exec(ls)"); o.Code == 0 || !strings.Contains(o.Stderr, "SeCrEtKeY") {
		t.Fatalf("control: exit %d %q", o.Code, o.Stderr)
	}
	for _, c := range []struct {
		name string
		make func(p string) error
		want string
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "project .moat/policy.toml: not a regular file"},
		{"symlink", func(p string) error { return os.Symlink(secret, p) }, "project .moat/policy.toml: is a symlink"},
	} {
		ws := t.TempDir()
		if err := os.Mkdir(filepath.Join(ws, ".moat"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := c.make(filepath.Join(ws, ".moat", "policy.toml")); err != nil {
			t.Fatal(err)
		}
		o := moatWithin(t, 30*time.Second, "run", "-w", ws, "--", "true")
		wantRefused(t, o, c.want)
		o = moatWithin(t, 30*time.Second, "policy", "explain", "-w", ws, "--no-managed", "--no-user", "Exec(ls)")
		if o.Code == 0 || !strings.Contains(o.Stderr, c.want) {
			t.Fatalf("%s: explain: exit %d %q", c.name, o.Code, o.Stderr)
		}
		for _, out := range []string{o.Stdout, o.Stderr} {
			if strings.Contains(out, "SeCrEtKeY") || strings.Contains(out, "root-only") {
				t.Fatalf("%s: the target was read or named: %q", c.name, out)
			}
		}
		// moat policy check FILE reads the operator's file: a FIFO is
		// refused at once.
		if c.name == "fifo" {
			o := moatWithin(t, 30*time.Second, "policy", "check", filepath.Join(ws, ".moat", "policy.toml"))
			if o.Code == 0 || !strings.Contains(o.Stderr, "not a regular file") {
				t.Fatalf("check fifo: exit %d %q", o.Code, o.Stderr)
			}
		}
	}
}
