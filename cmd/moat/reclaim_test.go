//go:build linux

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// cgroupMounts are the cgroup hierarchies mounted on this host (v1
// controllers and the unified one) that moat may use.
func cgroupMounts(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, c := range []string{"memory", "cpu", "cpuacct", "pids", "freezer", "unified"} {
		p := filepath.Join("/sys/fs/cgroup", c)
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// childrenOf returns the pids whose parent is ppid.
func childrenOf(ppid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) >= 2 && f[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// pidsSlot is the uid slot of pid's pids cgroup (/moat/SLOT[/call-N]).
func pidsSlot(pid int) (int, bool) {
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(cg), "\n") {
		if _, path, ok := strings.Cut(l, ":pids:/moat/"); ok {
			first, _, _ := strings.Cut(path, "/")
			slot, err := strconv.Atoi(first)
			return slot, err == nil
		}
	}
	return 0, false
}

// slotLeased reports whether a live process holds uid slot's lease.
func slotLeased(slot int) bool {
	f, err := os.OpenFile("/run/moat/uidslots.lock", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(slot), Len: 1}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk) == nil && lk.Type != unix.F_UNLCK
}

// etcLayersNamed lists the /etc layers under /run/moat/etc whose hostname
// starts with prefix.
func etcLayersNamed(prefix string) []string {
	ents, _ := os.ReadDir("/run/moat/etc")
	var out []string
	for _, e := range ents {
		p := filepath.Join("/run/moat/etc", e.Name())
		if b, err := os.ReadFile(filepath.Join(p, "hostname")); err == nil && strings.HasPrefix(string(b), prefix) {
			out = append(out, p)
		}
	}
	return out
}

// moatMounts are the host's mounts a sandbox could leave: overlays,
// namespace binds, and anything under /run/moat or the cgroup trees (other
// tests' own mounts, running beside this one, are not counted).
func moatMounts(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 10 {
			continue
		}
		_, post, _ := strings.Cut(l, " - ")
		fstype, _, _ := strings.Cut(post, " ")
		if fstype == "overlay" || fstype == "nsfs" || strings.HasPrefix(f[4], "/run/moat") || strings.HasPrefix(f[4], "/sys/fs/cgroup/") {
			out[f[0]+" "+f[4]] = true
		}
	}
	return out
}

// removeCgroupTree removes dir's child cgroups, then dir (best effort).
func removeCgroupTree(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
		for _, f := range strings.Fields(string(procs)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
	_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
	_ = unix.Rmdir(dir)
}

// TestServeKilledLeavesNothing: kill -9 of a daemon holding N sandboxes,
// each with a call running, leaves none of their processes, cgroups (in
// every hierarchy), host mounts or /etc layers behind within a second,
// with no daemon restarted: the spawner, which outlives the daemon
// briefly, reclaims them. Control: while the daemon lived, they existed.
func TestServeKilledLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	n := 40
	if s := os.Getenv("MOAT_TEST_RECLAIM_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	mounts := moatMounts(t)
	sock := filepath.Join(dir, "api.sock")
	td := testutil.StartDaemon(t, dir, "--listen", "unix:"+sock, "--max-per-tenant", strconv.Itoa(n+8), "--max-sandboxes", strconv.Itoa(n+8))
	d := &daemon{Daemon: td, t: t, cmd: td.Cmd, token: td.Token, client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}}
	prefix := fmt.Sprintf("reclaim-%x-", rand.Uint32())

	// Whatever the outcome, leave the host as found: kill what is left
	// of the daemon's sandboxes and remove their cgroups and layers.
	var (
		slots  []int
		pidfds []int
	)
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		for _, fd := range pidfds {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 5000)
			unix.Close(fd)
		}
		for _, slot := range slots {
			if slotLeased(slot) {
				continue // someone else's now
			}
			for _, m := range cgroupMounts(t) {
				removeCgroupTree(filepath.Join(m, "moat", strconv.Itoa(slot)))
			}
		}
		for _, l := range etcLayersNamed(prefix) {
			_ = os.RemoveAll(l)
		}
	})

	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			var sb api.Sandbox
			if st := d.call("POST", "/v1/sandboxes", api.CreateSandbox{Hostname: prefix + strconv.Itoa(i)}, &sb); st != 201 {
				errs <- fmt.Sprintf("create %d: %d", i, st)
				return
			}
			var p api.Process
			if st := d.call("POST", "/v1/sandboxes/"+sb.ID+"/processes",
				api.Exec{Args: []string{"sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 </dev/null & exec sleep 1001"}}, &p); st != 201 {
				errs <- fmt.Sprintf("start in %d: %d", i, st)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}

	// Control: the daemon's spawner, its inits, their cgroups in every
	// hierarchy and their processes exist.
	var spawner int
	for _, pid := range childrenOf(d.cmd.Process.Pid) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(b), "__moat_spawner") {
			spawner = pid
		}
	}
	if spawner == 0 {
		t.Fatal("the daemon has no spawner")
	}
	spawnerFD, err := unix.PidfdOpen(spawner, 0)
	if err != nil {
		t.Fatal(err)
	}
	pidfds = append(pidfds, spawnerFD)
	var other []string
	for _, pid := range childrenOf(spawner) {
		if slot, ok := pidsSlot(pid); ok {
			slots = append(slots, slot)
		} else {
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			other = append(other, fmt.Sprintf("%d %q %q", pid, cmd, cg))
		}
	}
	if len(slots) != n {
		t.Fatalf("found %d sandboxes of the daemon, want %d; other children of the spawner: %v", len(slots), n, other)
	}
	var dirs []string
	for _, slot := range slots {
		for _, m := range cgroupMounts(t) {
			p := filepath.Join(m, "moat", strconv.Itoa(slot))
			if _, err := os.Stat(p); err == nil {
				dirs = append(dirs, p)
			} else if !strings.HasSuffix(m, "/unified") {
				t.Fatalf("cgroup %s of a live sandbox is missing", p)
			}
			if !strings.HasSuffix(m, "/pids") {
				continue
			}
			// Every process of the sandbox, its calls' cgroups included.
			_ = filepath.WalkDir(p, func(q string, e os.DirEntry, err error) error {
				if err != nil || e.Name() != "cgroup.procs" {
					return err
				}
				procs, _ := os.ReadFile(q)
				for _, f := range strings.Fields(string(procs)) {
					pid, _ := strconv.Atoi(f)
					if fd, err := unix.PidfdOpen(pid, 0); err == nil {
						pidfds = append(pidfds, fd)
					}
				}
				if q != filepath.Join(p, "cgroup.procs") {
					dirs = append(dirs, filepath.Dir(q))
				}
				return nil
			})
		}
	}
	if len(pidfds) < 1+2*n {
		t.Fatalf("found %d processes for %d sandboxes", len(pidfds)-1, n)
	}
	if got := len(etcLayersNamed(prefix)); got != n {
		t.Fatalf("%d /etc layers for %d live sandboxes", got, n)
	}

	// kill -9, no restart.
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = d.cmd.Wait()
	deadline := killed.Add(5 * time.Second)
	left := func() string {
		var out []string
		for _, fd := range pidfds {
			if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0); n != 1 {
				out = append(out, "a process")
				break
			}
		}
		for _, p := range dirs {
			if _, err := os.Stat(p); err == nil {
				slot, _ := strconv.Atoi(filepath.Base(p))
				if strings.HasPrefix(filepath.Base(p), "call-") {
					slot, _ = strconv.Atoi(filepath.Base(filepath.Dir(p)))
				}
				if !slotLeased(slot) || isAlive(spawnerFD) {
					out = append(out, "cgroup "+p)
					break
				}
			}
		}
		for m := range moatMounts(t) {
			if !mounts[m] {
				out = append(out, "host mount "+m)
				break
			}
		}
		if l := etcLayersNamed(prefix); len(l) > 0 {
			out = append(out, fmt.Sprintf("%d /etc layers", len(l)))
		}
		return strings.Join(out, ", ")
	}
	var still string
	for {
		still = left()
		if still == "" || time.Now().After(deadline) {
			break
		}
		// Poll: the host offers no event for "a cgroup directory is gone".
		_, _ = unix.Poll([]unix.PollFd{{Fd: int32(spawnerFD), Events: unix.POLLIN}}, 5)
	}
	took := time.Since(killed)
	if still == "" {
		t.Logf("%d sandboxes (%d processes, %d cgroup directories): nothing left %v after kill -9", n, len(pidfds)-1, len(dirs), took.Round(time.Millisecond))
	}
	if still != "" {
		t.Fatalf("%v after kill -9 of the daemon, still left: %s", took.Round(time.Millisecond), still)
	}
	if took > time.Second {
		t.Fatalf("reclaim took %v, want at most 1s", took)
	}
}

// isAlive reports whether the process of pidfd has not exited.
func isAlive(pidfd int) bool {
	n, _ := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 0)
	return n != 1
}
