package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// Call cgroups: in a long-lived sandbox each process the host starts gets
// a cgroup of its own, a child of the sandbox's cgroup in the v1 pids
// hierarchy, so that a timeout or a cancel can kill the call's whole tree,
// descendants that left its session or process group (setsid, double
// fork) included, without ending the sandbox. The agent's forking thread
// moves itself into the call's cgroup around the fork (through a "tasks"
// file the host opened), so the process starts inside before it runs a
// single instruction. On a v2-only host a thread cannot move alone and
// clone3 (CLONE_INTO_CGROUP) is denied by the sandbox's own seccomp
// filter, so there a timeout kills the process group only; the
// enforcement report says which applies.

// callCgroupsOK says whether the sandbox can give each call a cgroup.
func (c *sandboxCgroup) callCgroupsOK() bool {
	return c != nil && c.paths[""] == "" && c.paths["pids"] != ""
}

// callCgroup is the cgroup of one call.
type callCgroup struct {
	dir string
	fd  int // its "tasks" file, open for writing until sent to the agent
}

// newCall creates the cgroup of call id and opens its "tasks" file.
func (c *sandboxCgroup) newCall(id uint64) (*callCgroup, error) {
	dir := filepath.Join(c.paths["pids"], "call-"+strconv.FormatUint(id, 10))
	if err := unix.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("call cgroup: %w", err)
	}
	fd, err := unix.Open(filepath.Join(dir, "tasks"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Rmdir(dir)
		return nil, fmt.Errorf("call cgroup: %w", err)
	}
	return &callCgroup{dir: dir, fd: fd}, nil
}

// closeFD closes the host's copy of the "tasks" file.
func (cc *callCgroup) closeFD() {
	if cc != nil && cc.fd >= 0 {
		unix.Close(cc.fd)
		cc.fd = -1
	}
}

// kill ends every process of the call: no more forks (pids.max 0), then
// SIGKILL through pidfds to each process found, waiting for them to exit,
// until the cgroup is empty. skip is the init's host pid, never killed
// here (it only passes through a call's cgroup while it forks).
func (cc *callCgroup) kill(skip int) error {
	if cc == nil {
		return nil
	}
	if err := os.WriteFile(filepath.Join(cc.dir, "pids.max"), []byte("0"), 0); err != nil {
		return fmt.Errorf("call cgroup: freeze forks: %w", err)
	}
	for range 16 {
		pids, err := cgroups.GetPids(cc.dir)
		if err != nil {
			return fmt.Errorf("call cgroup: %w", err)
		}
		var fds []unix.PollFd
		for _, pid := range pids {
			if pid == skip {
				continue
			}
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue // gone already
			}
			if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
				unix.Close(fd)
				continue
			}
			fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
		if len(fds) == 0 {
			return nil
		}
		// A pidfd turns readable when its process has exited.
		for _, p := range fds {
			_, _ = unix.Poll([]unix.PollFd{p}, 5000)
			unix.Close(int(p.Fd))
		}
	}
	return errors.New("call cgroup: processes keep appearing")
}

// remove deletes the call's cgroup; false if processes still hold it (a
// background process the call left running).
func (cc *callCgroup) remove() bool {
	err := unix.Rmdir(cc.dir)
	return err == nil || errors.Is(err, unix.ENOENT)
}

// releaseCall removes the cgroup of an ended call, or keeps it for later
// when processes the call left are still running in it; cgroups kept
// earlier are retried on the way.
func (c *sandboxCgroup) releaseCall(cc *callCgroup) {
	if cc == nil {
		return
	}
	cc.closeFD()
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.keptCalls[:0]
	for _, old := range c.keptCalls {
		if !old.remove() {
			kept = append(kept, old)
		}
	}
	c.keptCalls = kept
	if !cc.remove() {
		c.keptCalls = append(c.keptCalls, cc)
	}
}
