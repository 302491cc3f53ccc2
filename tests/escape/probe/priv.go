//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Privilege attempts: namespaces, mounts, root changes, identity.

func init() {
	register("clone", 1, "FLAGS (newuser|newns|... ; raw clone, the child exits at once)", opClone)
	register("clone3", 1, "FLAGS (raw clone3, the child exits at once)", opClone3)
	register("unshare", 1, "FLAGS (in a single-threaded child)", opUnshare)
	register("setns", 2, "NSPATH FLAGS (in a single-threaded child)", opSetns)
	register("setns-pidfd", 2, "PID|self FLAGS (pidfd_open, then setns in a single-threaded child)", opSetnsPidfd)
	register("mount-tmpfs", 1, "DIR", func(r *Result, a []string) error {
		return unix.Mount("tmpfs", a[0], "tmpfs", 0, "size=1m")
	})
	register("umount", 1, "PATH (MNT_DETACH)", func(r *Result, a []string) error {
		return unix.Unmount(a[0], unix.MNT_DETACH)
	})
	register("fsopen", 0, "(tmpfs)", func(r *Result, a []string) error {
		fd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
	register("open-tree", 1, "PATH (OPEN_TREE_CLONE)", func(r *Result, a []string) error {
		fd, err := unix.OpenTree(unix.AT_FDCWD, a[0], unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
	register("mount-setattr", 1, "PATH (clear MOUNT_ATTR_RDONLY)", func(r *Result, a []string) error {
		return unix.MountSetattr(unix.AT_FDCWD, a[0], 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY})
	})
	register("move-mount", 2, "FROM TO", func(r *Result, a []string) error {
		return unix.MoveMount(unix.AT_FDCWD, a[0], unix.AT_FDCWD, a[1], 0)
	})
	register("pivot-root", 1, "DIR (chdir DIR; pivot_root . .)", opPivotRoot)
	register("chroot", 1, "DIR (in a child)", opChroot)
	register("sethostname", 1, "NAME", func(r *Result, a []string) error { return unix.Sethostname([]byte(a[0])) })
	register("setuid", 1, "UID (in a child)", func(r *Result, a []string) error { return idCall(unix.SYS_SETUID, a[0]) })
	register("setgid", 1, "GID (in a child)", func(r *Result, a []string) error { return idCall(unix.SYS_SETGID, a[0]) })
	register("setgroups0", 0, "(setgroups [0] in a child)", func(r *Result, a []string) error {
		groups := []uint32{0}
		return childSyscall(unix.SYS_SETGROUPS, 1, uintptr(unsafe.Pointer(&groups[0])), 0)
	})
	register("capset-all", 0, "(raise every capability, in a child)", opCapsetAll)
	register("ambient-raise", 1, "CAP (in a child)", func(r *Result, a []string) error {
		c, err := strconv.Atoi(a[0])
		if err != nil {
			return err
		}
		return childSyscall(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c))
	})
	register("ids", 0, "(uid, gid, capabilities, no_new_privs from /proc/self/status)", opIDs)
	register("exec-ids", 1, "PATH [ARG...] (exec it, report its ids from /proc/PID/status)", opExecIDs)
}

var nsFlags = map[string]uintptr{
	"newuser":   unix.CLONE_NEWUSER,
	"newns":     unix.CLONE_NEWNS,
	"newnet":    unix.CLONE_NEWNET,
	"newpid":    unix.CLONE_NEWPID,
	"newuts":    unix.CLONE_NEWUTS,
	"newipc":    unix.CLONE_NEWIPC,
	"newcgroup": unix.CLONE_NEWCGROUP,
	"newtime":   unix.CLONE_NEWTIME,
}

// parseFlags parses "newuser|newns" or a number.
func parseFlags(s string) (uintptr, error) {
	if n, err := strconv.ParseUint(s, 0, 64); err == nil {
		return uintptr(n), nil
	}
	var f uintptr
	for _, p := range strings.Split(s, "|") {
		v, ok := nsFlags[p]
		if !ok {
			return 0, fmt.Errorf("unknown flag %q", p)
		}
		f |= v
	}
	return f, nil
}

// rawForkSyscall forks a single-threaded copy of the process (plain clone,
// no CLONE_VM) that makes one system call and exits with its errno. Between
// the fork and the exit the child runs only this nosplit function and raw
// system calls, like the child half of syscall.ForkExec.
//
//go:nosplit
//go:norace
func rawForkSyscall(trap, a1, a2, a3 uintptr) (uintptr, syscall.Errno) {
	pid, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 || pid != 0 {
		return pid, e
	}
	_, _, e1 := syscall.RawSyscall(trap, a1, a2, a3)
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, uintptr(e1), 0, 0)
	return 0, 0
}

// rawCloneExit clones with flags (plus SIGCHLD); the child exits 0 at once.
//
//go:nosplit
//go:norace
func rawCloneExit(flags uintptr) (uintptr, syscall.Errno) {
	pid, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, flags|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 || pid != 0 {
		return pid, e
	}
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	return 0, 0
}

// cloneArgs is struct clone_args (version 0, 64 bytes).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls uint64
}

//go:nosplit
//go:norace
func rawClone3Exit(args *cloneArgs) (uintptr, syscall.Errno) {
	pid, _, e := syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(args)), unsafe.Sizeof(*args), 0)
	if e != 0 || pid != 0 {
		return pid, e
	}
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	return 0, 0
}

// waitChild reaps pid and turns its exit status into the errno the child
// reported.
func waitChild(pid int) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return wrap("wait", err)
		}
		break
	}
	if ws.Signaled() {
		return fmt.Errorf("child killed by signal %v", ws.Signal())
	}
	return errnoErr(syscall.Errno(ws.ExitStatus()))
}

// childSyscall makes one system call in a single-threaded child: unshare,
// setns and credential changes behave differently (or fail with EINVAL) in
// a multi-threaded Go process, and a child keeps their effects out of the
// probe.
func childSyscall(trap, a1, a2, a3 uintptr) error {
	pid, e := rawForkSyscall(trap, a1, a2, a3)
	if e != 0 {
		return wrap("fork", e)
	}
	return waitChild(int(pid))
}

func opClone(r *Result, a []string) error {
	f, err := parseFlags(a[0])
	if err != nil {
		return err
	}
	pid, e := rawCloneExit(f)
	if e != 0 {
		return e
	}
	return waitChild(int(pid))
}

func opClone3(r *Result, a []string) error {
	f, err := parseFlags(a[0])
	if err != nil {
		return err
	}
	args := &cloneArgs{flags: uint64(f), exitSignal: uint64(syscall.SIGCHLD)}
	pid, e := rawClone3Exit(args)
	if e != 0 {
		return e
	}
	return waitChild(int(pid))
}

func opUnshare(r *Result, a []string) error {
	f, err := parseFlags(a[0])
	if err != nil {
		return err
	}
	return childSyscall(unix.SYS_UNSHARE, f, 0, 0)
}

func opSetns(r *Result, a []string) error {
	f, err := parseFlags(a[1])
	if err != nil {
		return err
	}
	fd, err := unix.Open(a[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap("open "+a[0], err)
	}
	defer unix.Close(fd)
	return childSyscall(unix.SYS_SETNS, uintptr(fd), f, 0)
}

func opSetnsPidfd(r *Result, a []string) error {
	pid, err := atoiPid(a[0])
	if err != nil {
		return err
	}
	f, err := parseFlags(a[1])
	if err != nil {
		return err
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return wrap("pidfd_open", err)
	}
	defer unix.Close(fd)
	return childSyscall(unix.SYS_SETNS, uintptr(fd), f, 0)
}

func opPivotRoot(r *Result, a []string) error {
	if err := unix.Chdir(a[0]); err != nil {
		return wrap("chdir", err)
	}
	return unix.PivotRoot(".", ".")
}

func opChroot(r *Result, a []string) error {
	p, err := unix.BytePtrFromString(a[0])
	if err != nil {
		return err
	}
	return childSyscall(unix.SYS_CHROOT, uintptr(unsafe.Pointer(p)), 0, 0)
}

func idCall(trap uintptr, s string) error {
	id, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	return childSyscall(trap, uintptr(id), 0, 0)
}

// opCapsetAll tries to make every capability the kernel knows effective,
// permitted and inheritable.
func opCapsetAll(r *Result, a []string) error {
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	mask := uint64(1)<<(last+1) - 1
	lo, hi := uint32(mask), uint32(mask>>32)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: lo, Permitted: lo, Inheritable: lo},
		{Effective: hi, Permitted: hi, Inheritable: hi},
	}
	return childSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
}

// statusFields are the /proc/PID/status lines the identity ops report.
var statusFields = []string{"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
	"NoNewPrivs", "Seccomp", "Seccomp_filters", "NSpid", "NSsid"}

func readStatus(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, unwrapPathErr(err)
	}
	defer f.Close()
	want := map[string]bool{}
	for _, k := range statusFields {
		want[k] = true
	}
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && want[k] {
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out, sc.Err()
}

func opIDs(r *Result, a []string) error {
	r.set("uid", os.Getuid())
	r.set("euid", os.Geteuid())
	r.set("gid", os.Getgid())
	r.set("egid", os.Getegid())
	st, err := readStatus("/proc/self/status")
	if err != nil {
		return wrap("read /proc/self/status", err)
	}
	r.set("status", st)
	return nil
}

// opExecIDs executes PATH and reads the credentials the new program got
// from /proc/PID/status. os/exec returns from Start only once the execve
// has succeeded, and the child (running or a zombie) keeps its credentials
// until it is reaped, so the read always sees the post-exec identity. The
// child's stdin is a pipe that stays open until it is killed.
func opExecIDs(r *Result, a []string) error {
	cmd := exec.Command(a[0], a[1:]...)
	w, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := cmd.Start(); err != nil {
		return wrap("exec", unwrapPathErr(err))
	}
	pidDir := "/proc/" + strconv.Itoa(cmd.Process.Pid)
	st, err := readStatus(pidDir + "/status")
	if exe, lerr := os.Readlink(pidDir + "/exe"); lerr == nil {
		r.set("exe", exe)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		return wrap("read status", err)
	}
	r.set("status", st)
	uids := strings.Fields(st["Uid"])
	if len(uids) != 4 {
		return fmt.Errorf("unexpected Uid line %q", st["Uid"])
	}
	r.set("euid", uids[1])
	r.Detail = "Uid: " + st["Uid"] + " CapEff: " + st["CapEff"]
	return nil
}
