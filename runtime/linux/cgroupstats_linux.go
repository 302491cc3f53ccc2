package linux

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The few cgroup files a sandbox's accounting and teardown need are read
// and removed here directly: the cgroups library's GetStats reads every
// statistic of every hierarchy (~46 files on v1), and its Destroy lists
// each hierarchy's processes before removing anything, for what is, at
// the end of a run, one read of three files and one rmdir per hierarchy.

// userHZ is the unit of cpuacct.stat (USER_HZ, 100 on every architecture
// moat supports).
const userHZ = 100

// usage reads what the cgroup accounted for the sandbox: peak memory,
// user and system CPU time, and the OOM-kill count.
func (c *sandboxCgroup) usage() usage {
	var u usage
	if c == nil {
		u.statsErr = errNoCgroup
		return u
	}
	if p := c.paths[""]; p != "" {
		u.statsErr = u.readV2(p)
	} else {
		u.statsErr = u.readV1(c.paths["memory"], c.paths["cpuacct"])
	}
	u.oomKills, u.oomError = c.oomKillCount()
	return u
}

// readV2 reads memory.peak and cpu.stat of a v2 cgroup.
func (u *usage) readV2(dir string) error {
	peak, err := readCgroupUint(dir, "memory.peak")
	if err != nil {
		return err
	}
	user, err := readCgroupKey(dir, "cpu.stat", "user_usec")
	if err != nil {
		return err
	}
	sys, err := readCgroupKey(dir, "cpu.stat", "system_usec")
	if err != nil {
		return err
	}
	u.peakMemory, u.userNs, u.sysNs = int64(peak), int64(user)*1000, int64(sys)*1000
	return nil
}

// readV1 reads memory.max_usage_in_bytes and cpuacct.stat of a v1 cgroup.
func (u *usage) readV1(memory, cpuacct string) error {
	peak, err := readCgroupUint(memory, "memory.max_usage_in_bytes")
	if err != nil {
		return err
	}
	b, err := readCgroupFile(cpuacct, "cpuacct.stat")
	if err != nil {
		return err
	}
	user, err := cgroupKey(b, "user")
	if err != nil {
		return fmt.Errorf("cpuacct.stat: %w", err)
	}
	sys, err := cgroupKey(b, "system")
	if err != nil {
		return fmt.Errorf("cpuacct.stat: %w", err)
	}
	u.peakMemory = int64(peak)
	u.userNs, u.sysNs = int64(user*1e9/userHZ), int64(sys*1e9/userHZ)
	return nil
}

// oomKillCount is the memory cgroup's count of OOM kills (memory.events
// on v2, memory.oom_control on v1).
func (c *sandboxCgroup) oomKillCount() (uint64, error) {
	if p := c.paths[""]; p != "" {
		return readCgroupKey(p, "memory.events", "oom_kill")
	}
	return readCgroupKey(c.paths["memory"], "memory.oom_control", "oom_kill")
}

// removeEmpty removes the cgroup's directories, which succeeds at once
// when no process is left in them and they have no children (the usual
// end of a sandbox: its init has been reaped, and with it the pid
// namespace). It reports whether every one is gone; the caller falls back
// to killing and removing what is left (killCgroup, the library's
// Destroy).
func (c *sandboxCgroup) removeEmpty() bool {
	ok := true
	for _, p := range c.paths {
		if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) {
			ok = false
		}
	}
	return ok
}

// readCgroupFile reads one cgroup file (a few hundred bytes at most)
// with plain system calls: os.ReadFile would register the descriptor with
// the runtime's poller (cgroup files can be polled), four more system
// calls on the path of every exec.
func readCgroupFile(dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for {
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: read %s: %w", path, err)
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// readCgroupUint reads a cgroup file holding one unsigned number.
func readCgroupUint(dir, name string) (uint64, error) {
	b, err := readCgroupFile(dir, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", name, err)
	}
	return v, nil
}

// readCgroupKey reads the value of key in a cgroup file of "key value"
// lines.
func readCgroupKey(dir, name, key string) (uint64, error) {
	b, err := readCgroupFile(dir, name)
	if err != nil {
		return 0, err
	}
	v, err := cgroupKey(b, key)
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", name, err)
	}
	return v, nil
}

// errNoKey reports a key missing from a cgroup file.
var errNoKey = errors.New("key not found")

// cgroupKey returns the value of key in b, lines of "key value".
func cgroupKey(b []byte, key string) (uint64, error) {
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte{' '})
		if ok && string(k) == key {
			return strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: %w", key, errNoKey)
}
