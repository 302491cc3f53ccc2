package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// signalGrace is the kill_grace of the signal tests' config.
const signalGrace = 500 * time.Millisecond

// signalRun is one moat run that got a signal.
type signalRun struct {
	code           int
	stdout, stderr string
	// elapsed runs from the signal to moat's exit.
	elapsed time.Duration
}

// runAndSignal starts `moat run` with a config whose kill_grace is
// signalGrace, waits for the command's "ready" line on stdout, sends sig
// to moat, and waits for moat to end (at most a minute).
func runAndSignal(t *testing.T, sig syscall.Signal, args ...string) signalRun {
	t.Helper()
	testutil.RequireRoot(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[limits]\nkill_grace = %q\n", signalGrace)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Moat(t), append([]string{"run", "--config", cfg}, args...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	pr, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	var out strings.Builder
	sc := bufio.NewScanner(pr)
	ready := false
	for !ready && sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		ready = strings.Contains(sc.Text(), "ready")
	}
	if !ready {
		_ = cmd.Wait()
		t.Fatalf("no ready line; stdout %q stderr %q", out.String(), errb.String())
	}
	start := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	rest := make(chan struct{})
	go func() {
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
		}
		close(rest)
	}()
	done := make(chan error, 1)
	go func() { <-rest; done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("moat still running a minute after %v; stderr %q", sig, errb.String())
	}
	r := signalRun{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// markerAlive reports whether a host process has marker in its command
// line (the sandbox's processes are host processes in other namespaces).
func markerAlive(t *testing.T, marker string) bool {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			return true
		}
	}
	return false
}

// TestSignalIgnoredKillsTree: SIGTERM, SIGINT or SIGHUP to moat run is
// forwarded to the command; one that ignores it is killed with its whole
// tree (a child in a session of its own included) after the config's
// kill_grace, and moat exits 128+N.
func TestSignalIgnoredKillsTree(t *testing.T) {
	for _, c := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGTERM, 143}, {syscall.SIGINT, 130}, {syscall.SIGHUP, 129}} {
		t.Run(c.sig.String(), func(t *testing.T) {
			marker := fmt.Sprintf("1000.%d%d", os.Getpid(), c.sig)
			script := fmt.Sprintf("trap '' TERM INT HUP; setsid sleep %s & echo ready; sleep %s", marker, marker)
			r := runAndSignal(t, c.sig, "--sh", script)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d (stderr %q)", r.code, c.code, r.stderr)
			}
			if r.elapsed > signalGrace+5*time.Second {
				t.Fatalf("took %s after the signal (grace %s)", r.elapsed, signalGrace)
			}
			if markerAlive(t, marker) {
				t.Fatalf("a process of the sandbox (sleep %s) survived", marker)
			}
			if !strings.Contains(r.stderr, "moat: got "+testSigName(c.sig)) || !strings.Contains(r.stderr, "the process tree was killed") {
				t.Fatalf("stderr %q", r.stderr)
			}
		})
	}
}

// TestSignalJSON: with --json the killed run's result says so: exit_code
// 128+N, exit_reason killed.
func TestSignalJSON(t *testing.T) {
	// --json captures both streams: the command says it is ready
	// through a fifo in the workspace instead.
	testutil.RequireRoot(t)
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[limits]\nkill_grace = %q\n", signalGrace)), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(ws, "ready")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Moat(t), "run", "--json", "--config", cfg, "-w", ws, "--sh", "trap '' TERM; echo ready > /workspace/ready; sleep 1000")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	// Opening the fifo blocks until the command opens it for writing.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	readyc := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		readyc <- strings.TrimSpace(string(b))
	}()
	select {
	case r := <-readyc:
		if r != "ready" {
			t.Fatalf("fifo: %q", r)
		}
	case err := <-exited:
		t.Fatalf("moat ended before the command was ready: %v %s", err, out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("moat still running a minute after SIGTERM")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Fatalf("exit: %v", err)
	}
	var res sandbox.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("result %q: %v", out.String(), err)
	}
	if res.ExitCode != 143 || res.ExitReason != sandbox.ReasonKilled || !strings.Contains(res.Error, "SIGTERM") {
		t.Fatalf("result: exit %d reason %s error %q", res.ExitCode, res.ExitReason, res.Error)
	}
}

// TestSignalForwarded (control): a command that handles SIGTERM gets it
// and moat exits with the command's own code, without waiting for the
// grace to end.
func TestSignalForwarded(t *testing.T) {
	r := runAndSignal(t, syscall.SIGTERM, "--sh", "trap 'echo got TERM; exit 0' TERM; echo ready; sleep 1000 & wait")
	if r.code != 0 || !strings.Contains(r.stdout, "got TERM") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "killed") {
		t.Fatalf("stderr %q", r.stderr)
	}
}

// testSigName is "SIGTERM" for syscall.SIGTERM.
func testSigName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT"}[s]
}
