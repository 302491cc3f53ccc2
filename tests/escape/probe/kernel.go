//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kernel-surface attempts: process inspection, keyrings, bpf, perf,
// userfaultfd, io_uring, kexec, modules, file handles, personality,
// foreign ABIs.

func init() {
	register("ptrace-attach", 1, "PID (attach, wait, detach)", opPtraceAttach)
	register("ptrace-seize", 1, "PID (seize, detach)", opPtraceSeize)
	register("ptrace-child", 0, "(fork a child of the probe and attach to it)", opPtraceChild)
	register("pvm-read", 1, "PID|self (process_vm_readv)", func(r *Result, a []string) error { return pvm(r, a[0], false) })
	register("pvm-write", 1, "PID|self (process_vm_writev)", func(r *Result, a []string) error { return pvm(r, a[0], true) })
	register("kill", 2, "PID SIGNUM", opKill)
	register("keyctl", 0, "(KEYCTL_GET_KEYRING_ID of the process keyring, create)", opKeyctl)
	register("add-key", 0, "(user key in the process keyring)", opAddKey)
	register("request-key", 0, "(absent user key, no callout)", opRequestKey)
	register("bpf", 0, "(BPF_MAP_CREATE: 1-entry array map)", opBPF)
	register("perf-event-open", 0, "(software task clock, self, user space only)", opPerf)
	register("userfaultfd", 0, "(UFFD_USER_MODE_ONLY)", opUserfaultfd)
	register("io-uring-setup", 0, "(1 entry)", opIOUringSetup)
	register("io-uring-enter", 0, "(fd -1)", func(r *Result, a []string) error {
		return rawErr(unix.SYS_IO_URING_ENTER, ^uintptr(0), 0, 0, 0, 0, 0)
	})
	register("io-uring-register", 0, "(fd -1)", func(r *Result, a []string) error {
		return rawErr(unix.SYS_IO_URING_REGISTER, ^uintptr(0), 0, 0, 0, 0, 0)
	})
	// kexec_load with more segments than KEXEC_SEGMENT_MAX: the kernel
	// rejects it (EINVAL) after its permission checks and before touching
	// anything. nr_segments must never be 0: that unloads the loaded image.
	register("kexec-load", 0, "(1000 segments: invalid)", func(r *Result, a []string) error {
		return rawErr(unix.SYS_KEXEC_LOAD, 0, 1000, 0, 0, 0, 0)
	})
	// kexec_file_load with an undefined flag: EINVAL after the permission
	// checks; KEXEC_FILE_UNLOAD (bit 0) is never set.
	register("kexec-file-load", 0, "(undefined flag: invalid)", func(r *Result, a []string) error {
		return rawErr(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0x80000000, 0)
	})
	// init_module of a zero-length image: ENOEXEC after the permission
	// checks.
	register("init-module", 0, "(empty image: invalid)", func(r *Result, a []string) error {
		empty := []byte{0}
		return rawErr(unix.SYS_INIT_MODULE, 0, 0, uintptr(unsafe.Pointer(&empty[0])), 0, 0, 0)
	})
	register("finit-module", 0, "(fd -1: invalid)", func(r *Result, a []string) error {
		empty := []byte{0}
		return rawErr(unix.SYS_FINIT_MODULE, ^uintptr(0), uintptr(unsafe.Pointer(&empty[0])), 0, 0, 0, 0)
	})
	register("delete-module", 0, "(a module that does not exist)", func(r *Result, a []string) error {
		name, _ := unix.BytePtrFromString("moat_escape_no_such_module")
		return rawErr(unix.SYS_DELETE_MODULE, uintptr(unsafe.Pointer(name)), unix.O_NONBLOCK, 0, 0, 0, 0)
	})
	register("name-to-handle", 1, "PATH", opNameToHandle)
	register("open-by-handle", 1, "PATH (name_to_handle_at, then open_by_handle_at O_RDONLY)", opOpenByHandle)
	register("open-by-handle-forged", 1, "MOUNTDIR (forged handle of inode 2, the root of ext*)", opOpenByHandleForged)
	register("personality", 1, "HEX", opPersonality)
	register("int80", 0, "(i386 getpid through int 0x80; killed under moat)", opInt80)
	register("x32", 0, "(x32 getpid, nr|0x40000000; killed under moat)", opX32)
	register("raw", 1, "NR [ARG...] (raw syscall, numeric arguments)", opRaw)
	register("syslog", 1, "ACTION (3 read all, 10 size of buffer)", opSyslog)
}

// rawErr makes a raw syscall and returns its errno as an error.
func rawErr(nr, a1, a2, a3, a4, a5, a6 uintptr) error {
	_, _, e := unix.Syscall6(nr, a1, a2, a3, a4, a5, a6)
	return errnoErr(e)
}

func atoiPid(s string) (int, error) {
	if s == "self" {
		return os.Getpid(), nil
	}
	return strconv.Atoi(s)
}

func opPtraceAttach(r *Result, a []string) error {
	pid, err := atoiPid(a[0])
	if err != nil {
		return err
	}
	return ptraceAttach(pid)
}

// ptraceAttach attaches to pid, waits for the stop and detaches. ptrace
// state belongs to a thread, so the goroutine stays on its thread.
func ptraceAttach(pid int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		return err
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return wrap("wait for tracee", err)
	}
	return wrap("detach", unix.PtraceDetach(pid))
}

func opPtraceSeize(r *Result, a []string) error {
	pid, err := atoiPid(a[0])
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(pid); err != nil {
		return err
	}
	if err := unix.PtraceInterrupt(pid); err != nil {
		return wrap("interrupt", err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return wrap("wait for tracee", err)
	}
	return wrap("detach", unix.PtraceDetach(pid))
}

// startChild starts a copy of the probe that blocks until its stdin
// closes; stop ends it.
func startChild() (pid int, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	cmd := exec.Command(self, "block")
	w, err := cmd.StdinPipe()
	if err != nil {
		return 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	return cmd.Process.Pid, func() {
		w.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}, nil
}

func opPtraceChild(r *Result, a []string) error {
	pid, stop, err := startChild()
	if err != nil {
		return wrap("start child", unwrapPathErr(err))
	}
	defer stop()
	r.set("pid", pid)
	return ptraceAttach(pid)
}

// pvm copies 8 bytes from (or to) the target. For "self" the remote
// address is a local variable, so the call succeeds unless something
// forbids it; for another pid it is an arbitrary low address, so a
// permitted call fails with EFAULT and a forbidden one with EPERM.
func pvm(r *Result, target string, write bool) error {
	pid, err := atoiPid(target)
	if err != nil {
		return err
	}
	var local, remote [8]byte
	copy(local[:], "moatmoat")
	lv := []unix.Iovec{{Base: &local[0], Len: 8}}
	raddr := uintptr(0x10000)
	if pid == os.Getpid() {
		raddr = uintptr(unsafe.Pointer(&remote[0]))
	}
	rv := []unix.RemoteIovec{{Base: raddr, Len: 8}}
	var n int
	if write {
		n, err = unix.ProcessVMWritev(pid, lv, rv, 0)
	} else {
		n, err = unix.ProcessVMReadv(pid, lv, rv, 0)
	}
	runtime.KeepAlive(&remote)
	if err != nil {
		return err
	}
	r.set("bytes", n)
	return nil
}

func opKill(r *Result, a []string) error {
	pid, err := strconv.Atoi(a[0])
	if err != nil {
		return err
	}
	sig, err := strconv.Atoi(a[1])
	if err != nil {
		return err
	}
	return unix.Kill(pid, syscall.Signal(sig))
}

func opKeyctl(r *Result, a []string) error {
	id, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_PROCESS_KEYRING, 1, 0, 0)
	if err != nil {
		return err
	}
	r.set("keyring", id)
	return nil
}

func opAddKey(r *Result, a []string) error {
	id, err := unix.AddKey("user", "moat-escape-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
	if err != nil {
		return err
	}
	r.set("key", id)
	return nil
}

func opRequestKey(r *Result, a []string) error {
	_, err := unix.RequestKey("user", "moat-escape-probe-absent", "", unix.KEY_SPEC_PROCESS_KEYRING)
	return err
}

func opBPF(r *Result, a []string) error {
	// union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size,
	// max_entries, then zeroes.
	var attr [128]byte
	le := func(off int, v uint32) {
		attr[off], attr[off+1], attr[off+2], attr[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	le(0, unix.BPF_MAP_TYPE_ARRAY)
	le(4, 4)
	le(8, 4)
	le(12, 1)
	fd, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr))
	if e != 0 {
		return e
	}
	return unix.Close(int(fd))
}

func opPerf(r *Result, a []string) error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Config: unix.PERF_COUNT_SW_TASK_CLOCK,
		Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
	}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func opUserfaultfd(r *Result, a []string) error {
	const uffdUserModeOnly = 1
	fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|uffdUserModeOnly, 0, 0)
	if e != 0 {
		return e
	}
	return unix.Close(int(fd))
}

func opIOUringSetup(r *Result, a []string) error {
	var params [120]byte // struct io_uring_params
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if e != 0 {
		return e
	}
	return unix.Close(int(fd))
}

// fileHandle is struct file_handle with room for the handle bytes.
type fileHandle struct {
	bytes uint32
	typ   int32
	data  [128]byte
}

func opNameToHandle(r *Result, a []string) error {
	h := fileHandle{bytes: 128}
	var mnt int32
	p, err := unix.BytePtrFromString(a[0])
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall6(unix.SYS_NAME_TO_HANDLE_AT, atFDCWD, uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&mnt)), 0, 0)
	if e != 0 {
		return e
	}
	r.set("handle_type", h.typ)
	r.set("handle_bytes", h.bytes)
	return nil
}

func openByHandle(mountDir string, h *fileHandle) error {
	mfd, err := unix.Open(mountDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap("open mount dir", err)
	}
	defer unix.Close(mfd)
	fd, _, e := unix.Syscall(unix.SYS_OPEN_BY_HANDLE_AT, uintptr(mfd), uintptr(unsafe.Pointer(h)), unix.O_RDONLY|unix.O_CLOEXEC)
	if e != 0 {
		return wrap("open_by_handle_at", e)
	}
	return unix.Close(int(fd))
}

func opOpenByHandle(r *Result, a []string) error {
	h := fileHandle{bytes: 128}
	var mnt int32
	p, err := unix.BytePtrFromString(a[0])
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall6(unix.SYS_NAME_TO_HANDLE_AT, atFDCWD, uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&mnt)), 0, 0)
	if e != 0 {
		return wrap("name_to_handle_at", e)
	}
	dir := a[0]
	if i := strings.LastIndex(dir, "/"); i > 0 {
		dir = dir[:i]
	} else {
		dir = "/"
	}
	return openByHandle(dir, &h)
}

// opOpenByHandleForged is the "shocker" attack: a hand-made handle for
// inode 2 (the root directory of an ext2/3/4 filesystem) with generation 0.
func opOpenByHandleForged(r *Result, a []string) error {
	h := fileHandle{bytes: 8, typ: 1} // FILEID_INO32_GEN: ino, gen
	h.data[0] = 2
	return openByHandle(a[0], &h)
}

func opPersonality(r *Result, a []string) error {
	v, err := strconv.ParseUint(strings.TrimPrefix(a[0], "0x"), 16, 64)
	if err != nil {
		return err
	}
	prev, _, e := unix.Syscall(unix.SYS_PERSONALITY, uintptr(v), 0, 0)
	if e != 0 {
		return e
	}
	r.set("previous", fmt.Sprintf("%#x", prev))
	// Put the default back so later attempts of a batch are unaffected.
	unix.Syscall(unix.SYS_PERSONALITY, 0, 0, 0)
	return nil
}

func opInt80(r *Result, a []string) error {
	if !haveInt80 {
		return fmt.Errorf("int 0x80 is x86-64 only")
	}
	const i386Getpid = 20
	got := int32(int80(i386Getpid, 0, 0, 0))
	r.set("pid", got)
	if got < 0 {
		return syscall.Errno(-got)
	}
	if int(got) != os.Getpid() {
		return fmt.Errorf("i386 getpid returned %d, want %d", got, os.Getpid())
	}
	return nil
}

func opX32(r *Result, a []string) error {
	if !haveInt80 {
		return fmt.Errorf("x32 is x86-64 only")
	}
	const x32Bit = 0x40000000
	pid, _, e := unix.RawSyscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
	if e != 0 {
		return e
	}
	r.set("pid", pid)
	return nil
}

func opRaw(r *Result, a []string) error {
	var v [7]uintptr
	for i, s := range a {
		if i >= len(v) {
			return fmt.Errorf("too many arguments")
		}
		n, err := strconv.ParseInt(s, 0, 64)
		if err != nil {
			u, uerr := strconv.ParseUint(s, 0, 64)
			if uerr != nil {
				return err
			}
			n = int64(u)
		}
		v[i] = uintptr(n)
	}
	ret, _, e := unix.Syscall6(v[0], v[1], v[2], v[3], v[4], v[5], v[6])
	if e != 0 {
		return e
	}
	r.set("ret", ret)
	return nil
}

func opSyslog(r *Result, a []string) error {
	action, err := strconv.Atoi(a[0])
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<16)
	n, _, e := unix.Syscall(unix.SYS_SYSLOG, uintptr(action), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if e != 0 {
		return e
	}
	// Only the size: the kernel log is never copied into test output.
	r.set("n", n)
	return nil
}

// atFDCWD is AT_FDCWD as a raw syscall argument.
var atFDCWD = func() uintptr { v := unix.AT_FDCWD; return uintptr(v) }()
