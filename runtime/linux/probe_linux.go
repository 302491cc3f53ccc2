package linux

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	errNoLandlock = errors.New("landlock is not available")
	errNotRoot    = errors.New("moat's linux runtime must run as root (uid 0) to map an unprivileged uid range and make idmapped mounts")
)

// landlockABI returns the Landlock ABI version of the running kernel, or 0
// when Landlock is missing or disabled.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// Probe examines what this host can enforce. It creates nothing lasting:
// namespace and mount probes run in a throwaway child (moat doctor starts
// a real sandbox for the end-to-end check).
func Probe() []Check {
	var checks []Check
	add := func(name string, ok, required bool, detail string) {
		checks = append(checks, Check{Name: name, OK: ok, Detail: detail, Required: required})
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	add("kernel", true, false, unix.ByteSliceToString(uts.Release[:]))
	add("root", os.Geteuid() == 0, true, fmt.Sprintf("euid %d", os.Geteuid()))
	max := readInt("/proc/sys/user/max_user_namespaces")
	add("user namespaces", max > 0, true, fmt.Sprintf("max_user_namespaces=%d", max))
	for _, ns := range []string{"mnt", "pid", "net", "ipc", "uts", "cgroup", "user"} {
		_, err := os.Stat("/proc/self/ns/" + ns)
		add(ns+" namespace", err == nil, true, errDetail(err, "present"))
	}
	abi := landlockABI()
	add("landlock", abi >= 1, true, fmt.Sprintf("ABI %d", abi))
	sec, _ := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	secOK := strings.Contains(string(sec), "errno") && strings.Contains(string(sec), "kill_process")
	add("seccomp filter", secOK, true, strings.TrimSpace(string(sec)))
	add("openat2", syscallExists(unix.SYS_OPENAT2), true, "RESOLVE_IN_ROOT path resolution")
	add("mount API", syscallExists(unix.SYS_OPEN_TREE) && syscallExists(unix.SYS_MOUNT_SETATTR), true,
		"open_tree, move_mount, mount_setattr (detached and idmapped mounts)")
	add("close_range", syscallExists(unix.SYS_CLOSE_RANGE), true, "CLOSE_RANGE_CLOEXEC")
	fs, _ := os.ReadFile("/proc/filesystems")
	add("overlayfs", strings.Contains(string(fs), "overlay"), true, "read-only /etc view")
	add("tmpfs", strings.Contains(string(fs), "tmpfs"), true, "root, /tmp, home, /dev")
	add("devpts", strings.Contains(string(fs), "devpts"), true, "private pty instance")
	l := findCgroups()
	if l.err != nil {
		add("cgroups", false, true, l.err.Error())
	} else {
		var where []string
		for c, m := range l.mounts {
			where = append(where, fmt.Sprintf("%s=%s", c, m))
		}
		sort.Strings(where)
		add("cgroups", true, true, l.describe()+": "+strings.Join(where, " ")+" (--memory, --cpus, --pids)")
		swap := "swap accounting available: --memory keeps sandboxes out of swap"
		if !l.swapLimit {
			swap = "no swap accounting"
			if l.swapOn {
				swap += " and swap is on: --memory is refused"
			} else {
				swap += "; no swap is active, so none can be used"
			}
		}
		add("swap limit", l.swapLimit || !l.swapOn, true, swap)
	}
	return checks
}

// syscallExists reports whether the kernel knows a syscall: called with
// invalid arguments it fails with something other than ENOSYS.
func syscallExists(nr uintptr) bool {
	bad := uintptr(unsafe.Pointer(nil))
	_, _, errno := unix.Syscall6(nr, ^uintptr(0), bad, 0, 0, 0, 0)
	return errno != unix.ENOSYS
}

func readInt(p string) int {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func errDetail(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}
