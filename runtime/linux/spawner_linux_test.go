package linux

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

func newSpawnerRuntime(t *testing.T) *Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	r, err := New(WithKillGrace(500*time.Millisecond), WithSpawner())
	if err != nil {
		testutil.SkipOrFail(t, err.Error())
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// slotTaken reports whether some process holds uid slot's lease.
func slotTaken(t *testing.T, stateDir string, slot int) bool {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(stateDir, slotsFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(slot), Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		t.Fatal(err)
	}
	return lk.Type != unix.F_UNLCK
}

// parentOf reads the parent pid of pid from /proc.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// TestSpawnerStartsSandboxes: with WithSpawner, concurrent creates get
// working sandboxes whose inits are the spawner's children, not this
// process's; Close ends the spawner. Control: without it, the init is
// this process's child.
func TestSpawnerStartsSandboxes(t *testing.T) {
	r := newSpawnerRuntime(t)
	ctx := context.Background()
	spawnerPid := r.spawner.proc.pid
	if got := parentOf(t, spawnerPid); got != os.Getpid() {
		t.Fatalf("spawner's parent is %d, want this process %d", got, os.Getpid())
	}

	const n = 4
	sbs := make([]sandbox.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { sbs[i], errs[i] = r.Create(ctx, &sandbox.Spec{Limits: sandbox.Limits{Pids: 64}}) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("create %d: %v", i, errs[i])
		}
		sb := sbs[i].(*linuxSandbox)
		if got := parentOf(t, sb.proc.pid); got != spawnerPid {
			t.Errorf("init %d's parent is %d, want the spawner %d", sb.proc.pid, got, spawnerPid)
		}
		res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"echo", "hi"}})
		if err != nil || res.ExitCode != 0 || res.Stdout != "hi\n" {
			t.Fatalf("exec in sandbox %d: %v %+v", i, err, res)
		}
	}
	for _, sb := range sbs {
		if err := sb.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		<-sb.Done()
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(spawnerPid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("spawner %d still exists after Close: %v", spawnerPid, err)
	}

	// Control: a runtime without a spawner forks the init itself.
	plain := newTestRuntime(t)
	sb, err := plain.Create(ctx, &sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Shutdown(ctx)
	if got := parentOf(t, sb.(*linuxSandbox).proc.pid); got != os.Getpid() {
		t.Errorf("without a spawner the init's parent is %d, want %d", got, os.Getpid())
	}
}

// TestSpawnerChildStatusAndKill: a spawned child's exit status comes back
// from the spawner, and kill reaches it through its pidfd.
func TestSpawnerChildStatusAndKill(t *testing.T) {
	r := newSpawnerRuntime(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	c, err := r.startChild([]string{"moat", UsernsHoldArg}, []*os.File{pr}, &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL})
	pr.Close()
	if err != nil {
		t.Fatal(err)
	}
	if c.pidfd == nil {
		t.Fatal("a spawned child has no pidfd")
	}
	select {
	case <-c.exited:
		t.Fatal("the holder exited before it was told to")
	default:
	}
	c.killAndWait()
	if got := c.describe(); got != "killed by signal killed" {
		t.Errorf("status = %q, want killed by SIGKILL", got)
	}

	// A holder told to exit (its stdin closes) exits 0.
	pr, pw, err = os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c, err = r.startChild([]string{"moat", UsernsHoldArg}, []*os.File{pr}, &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL})
	pr.Close()
	if err != nil {
		t.Fatal(err)
	}
	pw.Close()
	<-c.exited
	if got := c.describe(); got != "exit status 0" {
		t.Errorf("status = %q, want exit status 0", got)
	}

	// A start that fails in the child comes back as the error: uid 0 is
	// not mapped in a user namespace without a uid map.
	_, err = r.startChild([]string{"moat", UsernsHoldArg}, nil, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
		Credential: &syscall.Credential{Uid: 0, Gid: 0}})
	if !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.EPERM) {
		t.Errorf("a start as an unmapped uid: %v, want EINVAL or EPERM", err)
	}
	// Nothing but the runtime's helpers is started (this test binary
	// started bare would run its tests).
	for _, argv := range [][]string{{"moat"}, {"moat", "-test.run=x"}, {"moat", InitArg, "x"}} {
		if _, err := r.startChild(argv, nil, &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("start %q: %v, want EINVAL", argv, err)
		}
	}
	// The spawner still serves.
	if !r.spawner.alive() {
		t.Error("the spawner died of a failed start")
	}
}

// TestSpawnerDeathEndsSandboxes: when the spawner dies its sandboxes end
// (their inits' parent-death signal), and the next create starts a new
// spawner.
func TestSpawnerDeathEndsSandboxes(t *testing.T) {
	r := newSpawnerRuntime(t)
	ctx := context.Background()
	sb, err := r.Create(ctx, &sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Shutdown(ctx)
	// A pidfd of the init turns readable when it has exited.
	initFD, err := unix.PidfdOpen(sb.(*linuxSandbox).proc.pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(initFD)
	old := r.spawner.proc.pid
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox outlived its spawner")
	}
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(initFD), Events: unix.POLLIN}}, 30_000); n != 1 || err != nil {
		t.Errorf("the init did not exit after its spawner died: %d, %v", n, err)
	}
	// The runtime's own lease keeps the slot until Shutdown has removed
	// the sandbox's cgroup: no other moat may take it meanwhile.
	if !slotTaken(t, r.stateDir, sb.(*linuxSandbox).slot.slot) {
		t.Error("the slot of a sandbox not shut down yet went with its spawner")
	}

	sb2, err := r.Create(ctx, &sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		t.Fatalf("create after the spawner died: %v", err)
	}
	defer sb2.Shutdown(ctx)
	if r.spawner.proc.pid == old {
		t.Error("no new spawner was started")
	}
	res, err := sb2.Exec(ctx, &sandbox.Process{Args: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after restart: %v %+v", err, res)
	}
}

// TestSpawnerReclaimsItsSlotsOnly: a spawner whose runtime is gone (it
// gets SIGTERM, its parent-death signal, when the runtime's process dies)
// ends its sandboxes, a frozen one included, and removes their cgroups
// (the calls' too) itself, before anyone calls Shutdown; the sandboxes of another runtime on the host, and their
// cgroups and layers, are untouched. Control: the cgroups existed.
func TestSpawnerReclaimsItsSlotsOnly(t *testing.T) {
	r1 := newSpawnerRuntime(t)
	r2 := newSpawnerRuntime(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefix := "reclaim-" + strconv.FormatUint(uint64(os.Getpid()), 36) + "-"
	t.Cleanup(func() {
		for _, p := range etcLayersOf(r1.stateDir, prefix) {
			_ = os.RemoveAll(p)
		}
	})

	var mine []*linuxSandbox
	var dirs []string
	for i := range 3 {
		sb, err := r1.Create(ctx, &sandbox.Spec{Hostname: prefix + strconv.Itoa(i), Limits: sandbox.Limits{Pids: 64}})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Shutdown(context.Background())
		ls := sb.(*linuxSandbox)
		mine = append(mine, ls)
		// A call running at the end, in a cgroup of its own.
		if _, err := ls.Start(ctx, &sandbox.Process{Args: []string{"sleep", "1000"}}); err != nil {
			t.Fatal(err)
		}
		for _, p := range ls.cg.paths {
			dirs = append(dirs, p)
		}
		calls, _ := os.ReadDir(ls.cg.paths["pids"])
		for _, c := range calls {
			if c.IsDir() && strings.HasPrefix(c.Name(), "call-") {
				dirs = append(dirs, ls.cg.paths["pids"]+"/"+c.Name())
			}
		}
	}
	other, err := r2.Create(ctx, &sandbox.Spec{Hostname: prefix + "other", Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Shutdown(context.Background())
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("control: cgroup %s of a live sandbox: %v", d, err)
		}
	}
	if len(dirs) < 3*len(v1Controllers)+3 {
		t.Fatalf("control: %d cgroup directories for 3 sandboxes with a call each", len(dirs))
	}
	if got := len(etcLayersOf(r1.stateDir, prefix)); got != 4 {
		t.Fatalf("control: %d /etc layers for 4 hostnames", got)
	}
	if err := mine[0].cg.freeze(true); err != nil && !errors.Is(err, sandbox.ErrNoFreezer) {
		t.Fatal(err)
	}

	sp := r1.spawner.proc
	if err := syscall.Kill(sp.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sp.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the spawner did not exit on SIGTERM")
	}
	for _, sb := range mine {
		<-sb.Done()
	}
	// Nothing of r1's sandboxes is left though r1 has not shut them down.
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s outlived its spawner", d)
		}
	}
	// (r1's process, alive here, still holds its sandboxes' layers: the
	// spawner's collection of them after a real crash is checked by
	// cmd/moat's TestServeKilledLeavesNothing.)
	for _, sb := range mine {
		_ = sb.Shutdown(context.Background())
	}
	if got := etcLayersOf(r1.stateDir, prefix); len(got) != 1 || got[prefix+"other"] == "" {
		t.Errorf("/etc layers after the spawner's reclaim: %v, want only the other runtime's", got)
	}
	// The other runtime's sandbox lives on, in its cgroup.
	for _, p := range other.(*linuxSandbox).cg.paths {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the other runtime's cgroup %s: %v", p, err)
		}
	}
	res, err := other.Exec(ctx, &sandbox.Process{Args: []string{"cat", "/etc/hostname"}})
	if err != nil || res.Stdout != prefix+"other\n" {
		t.Fatalf("the other runtime's sandbox: %+v %v", res, err)
	}
}
