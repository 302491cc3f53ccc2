//go:build linux

package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

const allocPy = "import sys; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'x' * len(b[::4096]); print('allocated')"

// TestMemoryLimit: past --memory the kernel's OOM killer ends the call
// (exit 137, exit_reason oom); the same program succeeds with more memory.
func TestMemoryLimit(t *testing.T) {
	res := testutil.Run(t, []string{"--memory", "64m"}, "python3", "-c", allocPy, "300")
	if res.ExitCode != 137 || res.ExitReason != sandbox.ReasonOOM || res.Signal != 9 {
		t.Fatalf("64m: exit %d reason %s (%s)", res.ExitCode, res.ExitReason, res.Error)
	}
	if res.PeakMemoryBytes > 64<<20 {
		t.Fatalf("peak %d above the limit", res.PeakMemoryBytes)
	}
	ctl := testutil.Run(t, []string{"--memory", "1g"}, "python3", "-c", allocPy, "300")
	if ctl.ExitCode != 0 || ctl.Stdout != "allocated\n" || ctl.PeakMemoryBytes < 300<<20 {
		t.Fatalf("control: exit %d out %q peak %d", ctl.ExitCode, ctl.Stdout, ctl.PeakMemoryBytes)
	}
	if ctl.Enforcement.Limits.MemoryBytes != 1<<30 {
		t.Fatalf("enforcement limits %+v", ctl.Enforcement.Limits)
	}
}

const forkPy = `import os, signal
n = 0
while n < 300:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        signal.pause()
    n += 1
print(n)`

// TestPidsLimit: --pids caps the processes of the whole sandbox; the
// control shows the same program forks freely with a larger limit.
func TestPidsLimit(t *testing.T) {
	res := testutil.Run(t, []string{"--pids", "32"}, "python3", "-c", forkPy)
	n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if res.ExitCode != 0 || n >= 32 || n < 10 {
		t.Fatalf("--pids 32: exit %d, forked %q", res.ExitCode, res.Stdout)
	}
	ctl := testutil.Run(t, []string{"--pids", "1024"}, "python3", "-c", forkPy)
	if strings.TrimSpace(ctl.Stdout) != "300" {
		t.Fatalf("control forked %q", ctl.Stdout)
	}
}

// bombPy starts a fork bomb (every process forks in a loop, parent and
// child alike, and holds its pid once the kernel refuses a fork); the
// first refusal is reported through a pipe, and the main process says so.
const bombPy = `import os, signal
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    while True:
        try:
            os.fork()
        except OSError:
            os.write(w, b"x")
            signal.pause()
os.close(w)
os.read(r, 1)
print("saturated", flush=True)
signal.pause()`

// TestForkBomb: a real fork bomb is held by the pids limit. The sandbox
// says when its own fork fails; the test then reads, from the kernel's
// pids controller, that the sandbox never held more than its limit and
// that forks were refused, then stops the call with SIGTERM (forwarded to
// the command: exit 143, and the whole bomb dies with the sandbox). The
// host can still run processes.
func TestForkBomb(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := startUntil(t, "saturated", "run", "--pids", "64", "--timeout", "30s", "--", "python3", "-c", bombPy)
	slot, _ := sandboxOf(t, cmd.Process.Pid)
	dir := fmt.Sprintf("/sys/fs/cgroup/pids/moat/%d", slot)
	peak, _ := os.ReadFile(dir + "/pids.peak")
	events, _ := os.ReadFile(dir + "/pids.events")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+15 {
		t.Fatalf("moat: %v, want exit 143", err)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(peak))); err != nil || n > 64 {
		t.Fatalf("pids.peak %q with --pids 64", peak)
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(string(events)), "max ")); err != nil || n < 1 {
		t.Fatalf("pids.events %q: no fork was refused", events)
	}
	if out, err := exec.Command("/bin/echo", "host ok").Output(); err != nil || string(out) != "host ok\n" {
		t.Fatalf("host cannot run a process after the bomb: %v", err)
	}
}

// startUntil starts moat with args and returns once the sandbox has
// printed the line want: the sandbox's own word is the synchronisation.
func startUntil(t *testing.T, want string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testutil.Moat(t), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != want+"\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("sandbox printed %q (%v), want %q; stderr %q", line, err, want, stderr.String())
	}
	return cmd
}

// TestDiskLimit: /tmp, home and an in-memory workspace share one --disk
// cap and writes past it get ENOSPC; the control has room.
func TestDiskLimit(t *testing.T) {
	script := `dd if=/dev/zero of=/tmp/a bs=1M count=6 2>/dev/null && echo tmp-ok
dd if=/dev/zero of=$HOME/b bs=1M count=6 2>&1 | grep -o 'No space left on device' | head -1`
	res := testutil.Sh(t, script, "--disk", "10m")
	if res.Stdout != "tmp-ok\nNo space left on device\n" {
		t.Fatalf("--disk 10m: %q %q", res.Stdout, res.Stderr)
	}
	ctl := testutil.Sh(t, script, "--disk", "100m")
	if ctl.Stdout != "tmp-ok\n" {
		t.Fatalf("control: %q %q", ctl.Stdout, ctl.Stderr)
	}
}

// TestCPULimit: a CPU spin gets its quota and no more. The assertion is on
// CPU time the cgroup accounted over the spin, never on wall-clock speed.
func TestCPULimit(t *testing.T) {
	spin := "timeout 1 sh -c 'while :; do :; done'; true"
	res := testutil.Sh(t, spin, "--cpus", "0.2")
	used := res.CPUUserMs + res.CPUSysMs
	// 0.2 CPU over ~1 s of wall time is ~200 ms; allow for the period
	// boundary and the shell's start.
	if bound := int64(0.2*float64(res.DurationMs)) + 150; used > bound {
		t.Fatalf("--cpus 0.2: used %d ms of CPU in %d ms (bound %d)", used, res.DurationMs, bound)
	}
	ctl := testutil.Sh(t, spin, "--cpus", "2")
	ctlUsed := ctl.CPUUserMs + ctl.CPUSysMs
	if ctlUsed < 2*used || ctlUsed < 300 {
		t.Fatalf("control used %d ms, limited %d ms", ctlUsed, used)
	}
}

// TestTimeoutBoundedGrace: a process that ignores SIGTERM (and a
// background child) is killed within the grace period; 124.
func TestTimeoutBoundedGrace(t *testing.T) {
	res := testutil.Sh(t, "trap '' TERM; sleep 100 & sleep 100", "--timeout", "300ms")
	if res.ExitCode != 124 || res.ExitReason != sandbox.ReasonTimeout {
		t.Fatalf("exit %d reason %s", res.ExitCode, res.ExitReason)
	}
	// 300 ms + the 2 s default grace, with slack for a loaded machine.
	if res.DurationMs > 300+2000+3000 {
		t.Fatalf("took %d ms", res.DurationMs)
	}
}

// TestOutputFlood: a flood of output is counted in full but never held in
// moat's memory.
func TestOutputFlood(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command(testutil.Moat(t), "run", "--json", "--sh", "head -c 200000000 /dev/zero")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"stdout_bytes": 200000000`) || !strings.Contains(string(out), `"truncated": true`) {
		t.Fatalf("result: %.300s", out)
	}
	rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024
	if rss > 120<<20 {
		t.Fatalf("moat's peak RSS %d MiB for a 200 MB flood", rss>>20)
	}
}

// TestSecrets: a secret reaches the command only as a sealed in-memory
// file, never in env, argv or a file on disk, and its value is redacted
// from captured and streamed output.
func TestSecrets(t *testing.T) {
	testutil.RequireRoot(t)
	const value = "hunter2-moat-test-secret"
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `cat "$TOKEN_FILE"; echo; cat "$TOKEN_FILE" >&2
base64 -w0 "$TOKEN_FILE"; echo
env | grep -c 'hunter[2]'
cat /proc/*/cmdline 2>/dev/null | grep -c 'hunter[2]'
grep -rl 'hunter[2]' /tmp /home /workspace /etc 2>/dev/null | wc -l
echo x 2>/dev/null >> "$TOKEN_FILE" || echo sealed`
	res := testutil.Sh(t, script, "--secret", "TOKEN=@"+f)
	want := "[REDACTED:TOKEN]\n" + base64.StdEncoding.EncodeToString([]byte(value)) + "\n0\n0\n0\nsealed\n"
	if res.Stdout != want || res.Stderr != "[REDACTED:TOKEN]" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	// Streaming redacts too.
	o := testutil.Exec(t, "run", "--secret", "TOKEN=@"+f, "--sh", `cat "$TOKEN_FILE"`)
	if o.Code != 0 || o.Stdout != "[REDACTED:TOKEN]" {
		t.Fatalf("streaming: %d %q", o.Code, o.Stdout)
	}
	for _, bad := range []string{"TOKEN=" + value, "TOKEN=@", "=@" + f, "TOKEN=@/nonexistent"} {
		if o := testutil.Exec(t, "run", "--secret", bad, "--", "true"); o.Code != 125 || strings.Contains(o.Stderr, value) {
			t.Errorf("--secret %q: exit %d stderr %q", bad, o.Code, o.Stderr)
		}
	}
}

// TestSpill: past the output limit the whole stream goes to a file the
// result names; a stream within the limit leaves no file.
func TestSpill(t *testing.T) {
	dir := t.TempDir()
	res := testutil.Run(t, []string{"--output-limit", "100", "--spill", dir}, "seq", "1", "1000")
	if !res.Truncated || res.OutputFile == "" || res.StderrFile != "" {
		t.Fatalf("%+v", res)
	}
	b, err := os.ReadFile(res.OutputFile)
	if err != nil || strings.Count(string(b), "\n") != 1000 || len(res.Stdout) > 200 {
		t.Fatalf("spill %d bytes, %v; kept %d", len(b), err, len(res.Stdout))
	}
	small := testutil.Run(t, []string{"--spill", dir}, "echo", "hi")
	if small.OutputFile != "" {
		t.Fatalf("untruncated stream spilled to %s", small.OutputFile)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("spill dir holds %d files, want 1", len(ents))
	}
}

// TestSpillSymlink: a spill directory reached through a symlink (one a
// sandbox could plant in its workspace) is refused (125) and nothing is
// written where it points; the control shows the same directory works
// when named by its real path.
func TestSpillSymlink(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "elsewhere")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(ws, "out"), filepath.Join(ws, "out", ".")} {
		o := testutil.Exec(t, "run", "--json", "--output-limit", "100", "--spill", dir, "--", "seq", "1", "1000")
		if o.Code != 125 || !strings.Contains(o.Stdout+o.Stderr, "symlink") {
			t.Errorf("--spill %s: exit %d %q %q", dir, o.Code, o.Stdout, o.Stderr)
		}
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Fatalf("written through the symlink: %v", ents)
	}
	res := testutil.Run(t, []string{"--output-limit", "100", "--spill", target}, "seq", "1", "1000")
	if res.OutputFile == "" || filepath.Dir(res.OutputFile) != target {
		t.Fatalf("control: %+v", res)
	}
}

// TestConfigDefaults: an operator's config file sets the limits a call
// gets when it sets none; flags override it; a bad file is a 125.
func TestConfigDefaults(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("[limits]\nmemory = \"96m\"\npids = 48\ncpus = 0.5\ndisk = \"20m\"\ntimeout = \"300ms\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := testutil.Run(t, []string{"--config", cfg}, "sleep", "5")
	l := res.Enforcement.Limits
	if res.ExitCode != 124 || l.MemoryBytes != 96<<20 || l.Pids != 48 || l.CPUs != 0.5 || l.DiskBytes != 20<<20 {
		t.Fatalf("exit %d limits %+v", res.ExitCode, l)
	}
	res = testutil.Run(t, []string{"--config", cfg, "--pids", "100", "--timeout", "10s"}, "true")
	if res.ExitCode != 0 || res.Enforcement.Limits.Pids != 100 {
		t.Fatalf("flags over config: %+v", res.Enforcement.Limits)
	}
	if err := os.WriteFile(cfg, []byte("[limits]\nmemroy = \"1g\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := testutil.Exec(t, "run", "--config", cfg, "--", "true")
	if o.Code != 125 || !strings.Contains(o.Stderr, cfg+":2") {
		t.Fatalf("bad config: %d %q", o.Code, o.Stderr)
	}
}

// TestBadLimits: limits the kernel could not enforce as asked are refused.
func TestBadLimits(t *testing.T) {
	testutil.RequireRoot(t)
	for _, args := range [][]string{
		{"--memory", "lots"}, {"--memory", "1m"}, {"--pids", "-1"}, {"--pids", "2"},
		{"--cpus", "-1"}, {"--cpus", "0.001"}, {"--disk", "0"}, {"--output-limit", "0"},
		{"--spill", "/nonexistent", "--json"}, {"--spill", "/tmp"},
	} {
		o := testutil.Exec(t, append(append([]string{"run"}, args...), "--", "true")...)
		if o.Code != 125 || strings.Count(strings.TrimSpace(o.Stderr), "\n") != 0 {
			t.Errorf("%v: exit %d stderr %q", args, o.Code, o.Stderr)
		}
	}
}

// cgroupDirs lists moat's per-sandbox cgroup directories on this host.
func cgroupDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, c := range []string{"memory", "cpu", "cpuacct", "pids", "unified"} {
		ents, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", c, "moat"))
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
				dirs = append(dirs, filepath.Join("/sys/fs/cgroup", c, "moat", e.Name()))
			}
		}
	}
	return dirs
}

// staleCgroups are per-sandbox cgroups whose uid slot no live moat holds.
func staleCgroups(t *testing.T) []string {
	t.Helper()
	f, err := os.OpenFile("/run/moat/uidslots.lock", os.O_RDWR, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	var stale []string
	for _, d := range cgroupDirs(t) {
		slot, _ := strconv.Atoi(filepath.Base(d))
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(slot), Len: 1}
		if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err == nil && lk.Type == unix.F_UNLCK {
			stale = append(stale, d)
		}
	}
	return stale
}

func mountCount(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// TestKilledMoatLeavesNothing: SIGKILL of moat mid-run takes the whole
// sandbox with it (PDEATHSIG on the init, whose exit ends the pid
// namespace and with it every mount); the cgroup it leaves is reclaimed by
// the next moat that starts.
func TestKilledMoatLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	mounts := mountCount(t)
	cmd := startUntil(t, "ready", "run", "--sh", "sleep 1000 & echo ready; exec sleep 1001")
	// Every process of the sandbox, as pidfds, found through the cgroup.
	slot, pids := sandboxOf(t, cmd.Process.Pid)
	if len(pids) < 3 {
		t.Fatalf("found %d sandbox processes", len(pids))
	}
	var pidfds []int
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err == nil {
			pidfds = append(pidfds, fd)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, fd := range pidfds {
		// A pidfd becomes readable when its process exits: no polling.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 10_000); n != 1 || err != nil {
			t.Fatalf("a sandbox process outlived moat (poll %d, %v)", n, err)
		}
		unix.Close(fd)
	}
	if got := mountCount(t); got != mounts {
		t.Fatalf("host mounts %d -> %d", mounts, got)
	}
	// The next moat reclaims the dead sandbox's cgroup.
	if o := testutil.Exec(t, "run", "--", "true"); o.Code != 0 {
		t.Fatalf("next run: %d %s", o.Code, o.Stderr)
	}
	for _, d := range cgroupDirs(t) {
		if filepath.Base(d) == strconv.Itoa(slot) && contains(staleCgroups(t), d) {
			t.Fatalf("cgroup %s of the killed sandbox was not reclaimed", d)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sandboxOf finds the uid slot and the processes (host pids) of the
// sandbox started by the moat process moatPid.
func sandboxOf(t *testing.T, moatPid int) (int, []int) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	parents := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) >= 2 {
			parents[pid], _ = strconv.Atoi(fields[1])
		}
	}
	for pid, ppid := range parents {
		// The init is moat's child (moat run) or its spawner's (moat
		// serve).
		if ppid != moatPid && parents[ppid] != moatPid {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(cg), "\n") {
			if _, path, ok := strings.Cut(l, ":pids:/moat/"); ok {
				// The init's forking thread may sit in a call's cgroup
				// (/moat/SLOT/CALL) at this moment: the slot is the
				// first component.
				first, _, _ := strings.Cut(path, "/")
				slot, err := strconv.Atoi(first)
				if err != nil {
					t.Fatalf("unexpected pids cgroup %q", l)
				}
				// The sandbox's processes, its calls' cgroups included.
				var pids []int
				err = filepath.WalkDir(fmt.Sprintf("/sys/fs/cgroup/pids/moat/%d", slot), func(p string, d fs.DirEntry, err error) error {
					if err != nil || d.Name() != "cgroup.procs" {
						return err
					}
					procs, err := os.ReadFile(p)
					for _, f := range strings.Fields(string(procs)) {
						n, _ := strconv.Atoi(f)
						pids = append(pids, n)
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return slot, pids
			}
		}
	}
	t.Fatal("no sandbox init found for moat pid", moatPid)
	return 0, nil
}

// TestThousandRuns: 1,000 sequential runs leave no cgroup, mount or
// temporary file behind.
func TestThousandRuns(t *testing.T) {
	testutil.RequireRoot(t)
	if testing.Short() {
		t.Skip("-short")
	}
	mounts := mountCount(t)
	// Other test binaries run beside this one and use /tmp: moat's runs
	// get a temp dir of their own, and /tmp is checked for the names of
	// the only temporary files moat makes (spills).
	private := t.TempDir()
	moatTmp := func() []string {
		var names []string
		ents, _ := os.ReadDir(os.TempDir())
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, "moat-") && (strings.HasSuffix(n, ".stdout") || strings.HasSuffix(n, ".stderr")) {
				names = append(names, n)
			}
		}
		return names
	}
	tmpBefore := moatTmp()
	moat := testutil.Moat(t)
	start := time.Now()
	for i := range 1000 {
		cmd := exec.Command(moat, "run", "--", "true")
		cmd.Env = append(os.Environ(), "TMPDIR="+private)
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			errors.As(err, &ee)
			t.Fatalf("run %d: %v", i, err)
		}
	}
	t.Logf("1000 runs in %s", time.Since(start))
	if got := mountCount(t); got != mounts {
		t.Fatalf("host mounts %d -> %d", mounts, got)
	}
	if stale := staleCgroups(t); len(stale) > 0 {
		t.Fatalf("cgroups left behind: %v", stale)
	}
	if left, _ := os.ReadDir(private); len(left) > 0 {
		t.Fatalf("runs left %d entries in their TMPDIR", len(left))
	}
	if after := moatTmp(); len(after) > len(tmpBefore) {
		t.Fatalf("moat's entries in %s grew from %v to %v", os.TempDir(), tmpBefore, after)
	}
}

// TestConcurrentRuns: many sandboxes at once get distinct uid ranges and
// cgroups, all succeed, and leave nothing behind.
func TestConcurrentRuns(t *testing.T) {
	testutil.RequireRoot(t)
	mounts := mountCount(t)
	const n = 24
	type out struct {
		res *sandbox.Result
		err error
	}
	results := make(chan out, n)
	for range n {
		go func() {
			b, err := exec.Command(testutil.Moat(t), "run", "--json", "--", "sh", "-c", "cat /proc/self/uid_map").Output()
			var r sandbox.Result
			if err == nil {
				err = json.Unmarshal(b, &r)
			}
			results <- out{&r, err}
		}()
	}
	ranges := map[string]bool{}
	for range n {
		o := <-results
		if o.err != nil || o.res.ExitCode != 0 {
			t.Fatalf("run failed: %v %+v", o.err, o.res)
		}
		userns, _ := o.res.Enforcement.Lookup("user_namespace")
		ranges[userns.Detail] = true
	}
	if len(ranges) != n {
		t.Fatalf("%d concurrent sandboxes shared uid ranges: %d distinct", n, len(ranges))
	}
	if got := mountCount(t); got != mounts {
		t.Fatalf("host mounts %d -> %d", mounts, got)
	}
	if stale := staleCgroups(t); len(stale) > 0 {
		t.Fatalf("cgroups left behind: %v", stale)
	}
}
