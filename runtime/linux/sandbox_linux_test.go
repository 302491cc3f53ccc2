package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestMain lets this test binary serve as the sandbox init and the
// user-namespace holder, as the moat binary does.
func TestMain(m *testing.M) {
	RunHelper()
	os.Exit(m.Run())
}

func newTestRuntime(t *testing.T) *Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	// The default init path, /proc/self/exe, is this test binary.
	opts := []Option{WithKillGrace(500 * time.Millisecond)}
	if framedTests() {
		opts = append(opts, WithFramedStreams())
	}
	r, err := New(opts...)
	if err != nil {
		testutil.SkipOrFail(t, err.Error())
	}
	return r
}

// TestLongLivedSandbox: a sandbox outlives one command; state written by
// one process is seen by the next; Shutdown removes its cgroup.
func TestLongLivedSandbox(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	sb, err := r.Create(ctx, &sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	ls := sb.(*linuxSandbox)
	paths := ls.cg.paths
	for i, script := range []string{"echo one > /workspace/f", "cat /workspace/f; echo two >> /workspace/f", "cat /workspace/f"} {
		res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"/bin/sh", "-c", script}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %d: %v %+v", i, err, res)
		}
		if i == 2 && res.Stdout != "one\ntwo\n" {
			t.Fatalf("state lost between processes: %q", res.Stdout)
		}
	}
	if err := sb.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("cgroup %s left after Shutdown", p)
		}
	}
	if _, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("exec after shutdown: %v", err)
	}
}

// TestCancelIsKilled: a cancelled call ends with exit_reason killed.
func TestCancelIsKilled(t *testing.T) {
	r := newTestRuntime(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	started := make(chan struct{})
	w := writerFunc(func(p []byte) (int, error) {
		out.Write(p)
		if strings.Contains(out.String(), "up") {
			select {
			case <-started:
			default:
				close(started)
			}
		}
		return len(p), nil
	})
	go func() {
		<-started
		cancel()
	}()
	res, err := r.Run(ctx, nil, &sandbox.Process{Args: []string{"/bin/sh", "-c", "echo up; exec sleep 100"}, Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitReason != sandbox.ReasonKilled || res.ExitCode != 137 {
		t.Fatalf("reason %s code %d", res.ExitReason, res.ExitCode)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestCreateSetupErrorLeavesNothing: a sandbox whose setup fails in the
// init reports the stage and leaves no cgroup.
func TestCreateSetupErrorLeavesNothing(t *testing.T) {
	r := newTestRuntime(t)
	// A bind target under a read-only system dir cannot be created.
	_, err := r.Create(context.Background(), &sandbox.Spec{Binds: []sandbox.Bind{{Source: t.TempDir(), Target: "/usr/moat-no-such-dir"}}})
	var se *sandbox.SetupError
	if !errors.As(err, &se) || !errors.Is(err, sandbox.ErrSetup) || !strings.Contains(se.Stage, "/usr/moat-no-such-dir") {
		t.Fatalf("err %v", err)
	}
}

var _ sandbox.Sandbox = (*linuxSandbox)(nil)

// TestBackgroundProcess: a process started in the background streams its
// output, takes stdin, can be signalled, and its Wait reports the result;
// a command that fails to start still ends cleanly.
func TestBackgroundProcess(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	sb, err := r.Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Shutdown(ctx)

	inR, inW := io.Pipe()
	lines := make(chan string, 4)
	out := writerFunc(func(p []byte) (int, error) {
		lines <- string(p)
		return len(p), nil
	})
	p, err := sb.Start(ctx, &sandbox.Process{Args: []string{"/bin/sh", "-c", "read x; echo got $x; trap 'echo term; exit 3' TERM; while :; do sleep 1; done"},
		Stdin: inR, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inW.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if got := <-lines; got != "got hello\n" {
		t.Fatalf("first output %q", got)
	}
	// A second process runs concurrently in the same sandbox.
	res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"echo", "side"}})
	if err != nil || res.Stdout != "side\n" {
		t.Fatalf("concurrent exec: %v %+v", err, res)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, err = p.Wait(ctx)
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("wait: %v %+v", err, res)
	}
	inW.Close()
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, sandbox.ErrExited) {
		t.Fatalf("signal after exit: %v", err)
	}

	bad, err := sb.Start(ctx, &sandbox.Process{Args: []string{"no-such-command"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err = bad.Wait(ctx)
	if err != nil || res.ExitCode != 127 {
		t.Fatalf("fast failure: %v %+v", err, res)
	}
}

// TestReclaim: a cgroup left by a dead moat (its slot's lease is free) is
// removed by Reclaim; a live sandbox's cgroup is not touched.
func TestReclaim(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	live, err := r.Create(ctx, &sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Shutdown(ctx)
	liveSlot := live.(*linuxSandbox).slot.slot
	// A free slot's cgroup, as a crashed moat would leave it.
	lease, err := r.slots.lease()
	if err != nil {
		t.Fatal(err)
	}
	stale := r.cgroupLayout().paths(lease.slot)
	lease.release()
	for _, p := range stale {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n, err := r.Reclaim()
	if err != nil || n < 1 {
		t.Fatalf("reclaimed %d: %v", n, err)
	}
	for _, p := range stale {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stale cgroup %s survived", p)
		}
	}
	for _, p := range r.cgroupLayout().paths(liveSlot) {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("live sandbox's cgroup %s removed: %v", p, err)
		}
	}
}

// TestCallTimeoutKillsWholeTree: in a long-lived sandbox a call that times
// out takes a daemonised grandchild (setsid: another session and process
// group) with it. Control: the same grandchild of a call that ends
// normally lives on, and the kill of one call spares it.
func TestCallTimeoutKillsWholeTree(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	sb, err := r.Create(ctx, &sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Shutdown(ctx)
	if ct := sb.(*linuxSandbox).enforcement.CallTree; !strings.HasPrefix(ct, "cgroup per call") {
		testutil.SkipOrFail(t, "no call cgroups here: "+ct)
	}
	daemonise := "setsid sleep %d > /dev/null 2>&1 < /dev/null & echo $!"
	run := func(p *sandbox.Process) *sandbox.Result {
		t.Helper()
		res, err := sb.Exec(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// state is the process's state letter inside the sandbox ("" gone).
	state := func(pid string) string {
		t.Helper()
		res := run(&sandbox.Process{Args: []string{"sh", "-c", "cut -d' ' -f3 /proc/" + pid + "/stat 2>/dev/null; true"}})
		return strings.TrimSpace(res.Stdout)
	}
	alive := func(s string) bool { return s != "" && s != "Z" }

	res := run(&sandbox.Process{Args: []string{"sh", "-c", fmt.Sprintf(daemonise, 1000)}})
	kept := strings.TrimSpace(res.Stdout)
	if res.ExitCode != 0 || !alive(state(kept)) {
		t.Fatalf("control: the daemonised child of a normal call is gone: %+v", res)
	}
	res = run(&sandbox.Process{Args: []string{"sh", "-c", fmt.Sprintf(daemonise, 1001) + "; exec sleep 1002"}, Timeout: 200 * time.Millisecond})
	if res.ExitCode != sandbox.ExitTimeout {
		t.Fatalf("timed-out call: %+v", res)
	}
	if killed := strings.TrimSpace(res.Stdout); alive(state(killed)) {
		t.Fatalf("the daemonised child %s of a timed-out call survived", killed)
	}
	if !alive(state(kept)) {
		t.Fatal("the kill of one call's tree reached another call's process")
	}
}
