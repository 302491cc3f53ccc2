//go:build linux && (amd64 || arm64)

package seccomp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The kernel tests re-execute the test binary. childEnv selects what the
// child does; TestMain dispatches on it before any test runs.
const childEnv = "MOAT_SECCOMP_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

// Child modes.
const (
	modeControl  = "probe-control"  // run the probes without a filter
	modeFiltered = "probe-filtered" // install Default(), then run the probes
	modeX32      = "x32-filtered"   // install Default(), then make an x32 syscall
	modeX32Ctl   = "x32-control"    // make an x32 syscall without a filter
	modeExit0    = "exit0"          // exit 0 at once
	modePlain    = "plain"          // an ordinary Go program
	modeBad      = "bad-install"    // Install a program the kernel rejects
)

// result is the outcome of one probe: Errno 0 is success, -1 a failure that
// is not an errno, -2 "could not be attempted here".
type result struct {
	Errno int    `json:"errno"`
	Msg   string `json:"msg,omitempty"`
}

// report is what a probe child prints.
type report struct {
	Setup           string            `json:"setup,omitempty"`
	Probes          map[string]result `json:"probes"`
	Threads         int               `json:"threads"`
	ThreadsFiltered int               `json:"threads_filtered"`
	ThreadsNNP      int               `json:"threads_nnp"`
	PlainSeccomp    string            `json:"plain_seccomp"`
}

// probeEnv is what probes may use.
type probeEnv struct {
	exe   string // the test binary
	tty   int    // our controlling terminal (a pty slave), or -1
	plain string // output of the plain Go program
}

// probe is one attempt made in both children.
type probe struct {
	name string
	// want is the result under the filter. Unless allowed or noControl is
	// set, the control child (no filter) must get something else;
	// otherwise the environment already blocks the call and the probe
	// proves nothing, so it is skipped.
	want syscall.Errno
	// allowed marks calls the filter must not change: the filtered result
	// must equal the control result.
	allowed bool
	// noControl marks probes where no control can succeed (a syscall
	// number the kernel does not have).
	noControl bool
	fn        func(e *probeEnv) error
}

const (
	missingPath = "/nonexistent-moat-seccomp-test"
	afAlg       = 38
	afVsock     = 40
	afKey       = 15
	afPacket    = 17
)

func sys(trap uintptr, a ...uintptr) error {
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := unix.Syscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
	if e != 0 {
		return e
	}
	return nil
}

// sysFD is sys for calls that return a descriptor, which it closes.
func sysFD(trap uintptr, a ...uintptr) error {
	var args [6]uintptr
	copy(args[:], a)
	fd, _, e := unix.Syscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
	if e != 0 {
		return e
	}
	unix.Close(int(fd))
	return nil
}

// atFDCWD is AT_FDCWD as a syscall argument.
var atFDCWD = func() uintptr { fd := unix.AT_FDCWD; return uintptr(fd) }()

func cstr(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(p))
}

func socketProbe(domain, typ, proto int) func(*probeEnv) error {
	return func(*probeEnv) error {
		fd, err := unix.Socket(domain, typ, proto)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
}

func ttyIoctl(cmd uintptr, arg byte) func(*probeEnv) error {
	return func(e *probeEnv) error {
		if e.tty < 0 {
			return errNA
		}
		b := arg
		err := sys(unix.SYS_IOCTL, uintptr(e.tty), cmd, uintptr(unsafe.Pointer(&b)))
		runtime.KeepAlive(&b)
		return err
	}
}

var errNA = errors.New("not applicable here")

// runSelf runs the test binary in mode with attr and returns its error.
func runSelf(e *probeEnv, mode string, attr *syscall.SysProcAttr) (string, error) {
	cmd := exec.Command(e.exe)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.SysProcAttr = attr
	out, err := cmd.Output()
	return string(out), err
}

func probes() []probe {
	ps := []probe{
		// Namespaces and privilege.
		{name: "unshare(CLONE_NEWUSER)", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
		}},
		{name: "fork+unshare(CLONE_NEWUSER)", want: unix.EPERM, fn: func(e *probeEnv) error {
			_, err := runSelf(e, modeExit0, &syscall.SysProcAttr{Unshareflags: unix.CLONE_NEWUSER})
			return err
		}},
		{name: "clone(CLONE_NEWUSER|CLONE_NEWNET)", want: unix.EPERM, fn: func(e *probeEnv) error {
			_, err := runSelf(e, modeExit0, &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNET})
			return err
		}},
		{name: "clone(CLONE_NEWPID)", want: unix.EPERM, fn: func(e *probeEnv) error {
			_, err := runSelf(e, modeExit0, &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID})
			return err
		}},
		{name: "clone3", want: unix.ENOSYS, fn: func(*probeEnv) error {
			return sys(unix.SYS_CLONE3, 0, 0) // size 0: EINVAL without the filter
		}},
		{name: "setns", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_SETNS, ^uintptr(0), 0)
		}},
		{name: "mount", want: unix.EPERM, fn: func(*probeEnv) error {
			return unix.Mount("none", missingPath, "moat-bogus-fs", 0, "")
		}},
		{name: "umount2", want: unix.EPERM, fn: func(*probeEnv) error {
			return unix.Unmount(missingPath, 0x100) // invalid flags: EINVAL
		}},
		{name: "pivot_root", want: unix.EPERM, fn: func(*probeEnv) error {
			return unix.PivotRoot(missingPath, missingPath)
		}},
		{name: "chroot", want: unix.EPERM, fn: func(*probeEnv) error {
			return unix.Chroot(missingPath)
		}},
		{name: "fsopen", want: unix.EPERM, fn: func(*probeEnv) error {
			return sysFD(unix.SYS_FSOPEN, cstr("moat-bogus-fs"), 0)
		}},
		{name: "open_tree", want: unix.EPERM, fn: func(*probeEnv) error {
			return sysFD(unix.SYS_OPEN_TREE, atFDCWD, cstr("/"), unix.OPEN_TREE_CLOEXEC)
		}},
		// Keyrings, bpf, perf, userfaultfd, io_uring.
		{name: "keyctl", want: unix.EPERM, fn: func(*probeEnv) error {
			_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
			return err
		}},
		{name: "add_key", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_ADD_KEY, cstr("moat-bogus-type"), cstr("x"), 0, 0, uintptr(unix.KEY_SPEC_PROCESS_KEYRING&0xffffffff))
		}},
		{name: "request_key", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_REQUEST_KEY, cstr("moat-bogus-type"), cstr("x"), 0, 0)
		}},
		{name: "bpf(BPF_MAP_CREATE)", want: unix.EPERM, fn: func(*probeEnv) error {
			var attr [18]uint32 // map_type, key_size, value_size, max_entries, ...
			attr[0], attr[1], attr[2], attr[3] = unix.BPF_MAP_TYPE_ARRAY, 4, 4, 1
			err := sysFD(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
			runtime.KeepAlive(&attr)
			return err
		}},
		{name: "bpf(invalid command)", want: unix.EPERM, fn: func(*probeEnv) error {
			var attr [8]byte
			err := sys(unix.SYS_BPF, 0x7fff, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
			runtime.KeepAlive(&attr)
			return err
		}},
		{name: "perf_event_open", want: unix.EPERM, fn: func(*probeEnv) error {
			attr := unix.PerfEventAttr{
				Type:   unix.PERF_TYPE_SOFTWARE,
				Config: unix.PERF_COUNT_SW_CPU_CLOCK,
				Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
				Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
			}
			fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{name: "userfaultfd", want: unix.EPERM, fn: func(*probeEnv) error {
			return sysFD(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1) // UFFD_USER_MODE_ONLY
		}},
		{name: "io_uring_setup", want: unix.EPERM, fn: func(*probeEnv) error {
			var params [120]byte
			err := sysFD(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)))
			runtime.KeepAlive(&params)
			return err
		}},
		// Process inspection.
		{name: "ptrace(PTRACE_PEEKDATA, self)", want: unix.EPERM, fn: func(*probeEnv) error {
			var word uintptr
			err := sys(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, uintptr(unix.Getpid()), uintptr(unsafe.Pointer(&word)), uintptr(unsafe.Pointer(&word)))
			runtime.KeepAlive(&word)
			return err
		}},
		{name: "process_vm_readv(self)", want: unix.EPERM, fn: func(*probeEnv) error {
			src, dst := []byte("moat1234"), make([]byte, 8)
			local := []unix.Iovec{{Base: &dst[0]}}
			local[0].SetLen(len(dst))
			remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: len(src)}}
			_, err := unix.ProcessVMReadv(unix.Getpid(), local, remote, 0)
			runtime.KeepAlive(src)
			return err
		}},
		{name: "kcmp(self, self, KCMP_VM)", want: unix.EPERM, fn: func(*probeEnv) error {
			pid := uintptr(unix.Getpid())
			return sys(unix.SYS_KCMP, pid, pid, 1)
		}},
		{name: "pidfd_getfd(self)", want: unix.EPERM, fn: func(*probeEnv) error {
			pidfd, err := unix.PidfdOpen(unix.Getpid(), 0)
			if err != nil {
				return fmt.Errorf("pidfd_open: %w", err)
			}
			defer unix.Close(pidfd)
			fd, err := unix.PidfdGetfd(pidfd, 0, 0)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		// File handles.
		{name: "name_to_handle_at(/)", want: unix.EPERM, fn: func(*probeEnv) error {
			_, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
			return err
		}},
		{name: "open_by_handle_at(bogus handle)", want: unix.EPERM, fn: func(*probeEnv) error {
			var h [16]byte // handle_bytes 0: EINVAL
			err := sysFD(unix.SYS_OPEN_BY_HANDLE_AT, atFDCWD, uintptr(unsafe.Pointer(&h)), unix.O_RDONLY)
			runtime.KeepAlive(&h)
			return err
		}},
		// Kernel code and system administration; every argument is
		// invalid, so the calls can do nothing even as root.
		{name: "finit_module(-1)", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_FINIT_MODULE, ^uintptr(0), cstr(""), 0)
		}},
		{name: "delete_module(missing)", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_DELETE_MODULE, cstr("moat_seccomp_no_such_module"), unix.O_NONBLOCK)
		}},
		{name: "kexec_load(invalid flags)", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0x100)
		}},
		{name: "reboot(invalid magic)", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_REBOOT, 0, 0, 0xbad, 0) // wrong magic, invalid cmd: EINVAL
		}},
		{name: "swapon(missing)", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_SWAPON, cstr(missingPath), 0)
		}},
		{name: "clock_settime(CLOCK_MONOTONIC)", want: unix.EPERM, fn: func(*probeEnv) error {
			ts := unix.Timespec{}
			err := sys(unix.SYS_CLOCK_SETTIME, unix.CLOCK_MONOTONIC, uintptr(unsafe.Pointer(&ts)))
			runtime.KeepAlive(&ts)
			return err
		}},
		{name: "syslog(SIZE_BUFFER)", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_SYSLOG, unix.SYSLOG_ACTION_SIZE_BUFFER, 0, 0)
		}},
		// Terminal injection, on our own controlling terminal.
		{name: "ioctl(tty, TIOCSTI)", want: unix.EPERM, fn: ttyIoctl(unix.TIOCSTI, 'x')},
		{name: "ioctl(tty, 0xffffffff00005412)", want: unix.EPERM, fn: ttyIoctl(uintptr(0xffffffff00005412&uint64(^uintptr(0))), 'x')},
		{name: "ioctl(tty, TIOCLINUX, invalid subcode)", want: unix.EPERM, fn: ttyIoctl(unix.TIOCLINUX, 0xff)},
		// Socket families.
		{name: "socket(AF_PACKET)", want: unix.EAFNOSUPPORT, fn: socketProbe(afPacket, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0x0300)},
		{name: "socket(AF_ALG)", want: unix.EAFNOSUPPORT, fn: socketProbe(afAlg, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)},
		{name: "socket(AF_VSOCK)", want: unix.EAFNOSUPPORT, fn: socketProbe(afVsock, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)},
		{name: "socket(AF_KEY)", want: unix.EAFNOSUPPORT, fn: socketProbe(afKey, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 2)},
		{name: "socket(AF_INET, SOCK_RAW)", want: unix.EPERM, fn: socketProbe(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)},
		{name: "socket(AF_INET6, SOCK_RAW)", want: unix.EPERM, fn: socketProbe(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)},
		{name: "socket(AF_NETLINK, NETLINK_AUDIT)", want: unix.EPROTONOSUPPORT, fn: socketProbe(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)},
		{name: "socketpair(AF_INET)", want: unix.EAFNOSUPPORT, fn: func(*probeEnv) error {
			fds, err := unix.Socketpair(unix.AF_INET, unix.SOCK_STREAM, 0)
			if err == nil {
				unix.Close(fds[0])
				unix.Close(fds[1])
			}
			return err
		}},
		// Personality (changes only this throwaway child).
		{name: "personality(ADDR_NO_RANDOMIZE)", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(unix.SYS_PERSONALITY, 0x0040000)
		}},
		{name: "syscall above the table", want: unix.ENOSYS, noControl: true, fn: func(*probeEnv) error {
			return sys(uintptr(native.maxSyscall + 1))
		}},

		// Calls the filter must leave alone.
		{name: "getpid", allowed: true, fn: func(*probeEnv) error { return sys(unix.SYS_GETPID) }},
		{name: "openat+read", allowed: true, fn: func(*probeEnv) error {
			_, err := os.ReadFile("/proc/self/status")
			return err
		}},
		{name: "write+read temp file", allowed: true, fn: func(*probeEnv) error {
			f, err := os.CreateTemp("", "moat-seccomp-*")
			if err != nil {
				return err
			}
			defer os.Remove(f.Name())
			defer f.Close()
			if _, err := f.WriteString("hello"); err != nil {
				return err
			}
			b := make([]byte, 5)
			if _, err := f.ReadAt(b, 0); err != nil || string(b) != "hello" {
				return fmt.Errorf("read back %q: %v", b, err)
			}
			return nil
		}},
		{name: "mmap", allowed: true, fn: func(*probeEnv) error {
			b, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				return err
			}
			b[4096] = 1
			return unix.Munmap(b)
		}},
		{name: "new OS threads", allowed: true, fn: func(*probeEnv) error {
			done := make(chan error)
			for i := 0; i < 4; i++ {
				go func() {
					runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
					done <- sys(unix.SYS_GETTID)
				}()
			}
			for i := 0; i < 4; i++ {
				if err := <-done; err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "personality(query)", allowed: true, fn: func(*probeEnv) error { return sys(unix.SYS_PERSONALITY, 0xffffffff) }},
		{name: "ioctl(tty, TCGETS)", allowed: true, fn: func(e *probeEnv) error {
			if e.tty < 0 {
				return errNA
			}
			_, err := unix.IoctlGetTermios(e.tty, unix.TCGETS)
			return err
		}},
		{name: "ioctl(tty, TIOCGWINSZ)", allowed: true, fn: func(e *probeEnv) error {
			if e.tty < 0 {
				return errNA
			}
			_, err := unix.IoctlGetWinsize(e.tty, unix.TIOCGWINSZ)
			return err
		}},
		{name: "socket(AF_INET, SOCK_STREAM)", allowed: true, fn: socketProbe(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)},
		{name: "socket(AF_INET6, SOCK_DGRAM)", allowed: true, fn: socketProbe(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)},
		{name: "socket(AF_UNIX)", allowed: true, fn: socketProbe(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)},
		{name: "socket(AF_NETLINK, NETLINK_ROUTE)", allowed: true, fn: socketProbe(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)},
		{name: "socketpair(AF_UNIX)", allowed: true, fn: func(*probeEnv) error {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if err == nil {
				unix.Close(fds[0])
				unix.Close(fds[1])
			}
			return err
		}},
		{name: "tcp loopback round trip", allowed: true, fn: func(*probeEnv) error {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			defer l.Close()
			go func() {
				c, err := l.Accept()
				if err == nil {
					c.Write([]byte("pong"))
					c.Close()
				}
			}()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				return err
			}
			defer c.Close()
			b := make([]byte, 4)
			if _, err := c.Read(b); err != nil || string(b) != "pong" {
				return fmt.Errorf("read %q: %v", b, err)
			}
			return nil
		}},
		{name: "pidfd_open(self)", allowed: true, fn: func(*probeEnv) error {
			fd, err := unix.PidfdOpen(unix.Getpid(), 0)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{name: "fork+exec a plain Go program", allowed: true, fn: func(e *probeEnv) error {
			out, err := runSelf(e, modePlain, nil)
			e.plain = out
			if err != nil {
				return err
			}
			if !strings.HasPrefix(out, "plain ok") {
				return fmt.Errorf("plain program printed %q", out)
			}
			return nil
		}},
	}
	// x86-only syscalls, by number from the table.
	if n, ok := native.syscalls()["iopl"]; ok {
		ps = append(ps, probe{name: "iopl(4)", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(uintptr(n), 4) // level > 3: EINVAL
		}})
	}
	if n, ok := native.syscalls()["ioperm"]; ok {
		ps = append(ps, probe{name: "ioperm(0, 1, off)", want: unix.EPERM, fn: func(*probeEnv) error {
			return sys(uintptr(n), 0, 1, 0) // turning access off needs no privilege
		}})
	}
	if n, ok := native.syscalls()["modify_ldt"]; ok {
		ps = append(ps, probe{name: "modify_ldt(read)", want: unix.EPERM, fn: func(*probeEnv) error {
			var buf [16]byte
			err := sys(uintptr(n), 0, uintptr(unsafe.Pointer(&buf)), unsafe.Sizeof(buf))
			runtime.KeepAlive(&buf)
			return err
		}})
	}
	return ps
}

func toResult(err error) result {
	if err == nil {
		return result{}
	}
	if errors.Is(err, errNA) {
		return result{Errno: -2, Msg: err.Error()}
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return result{Errno: int(en), Msg: err.Error()}
	}
	return result{Errno: -1, Msg: err.Error()}
}

// openControllingTTY makes a new pty the controlling terminal of this
// process, which must be a session leader, and returns the slave.
func openControllingTTY() (int, error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	// The master stays open (leaked on purpose) for the child's lifetime.
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return -1, err
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		return -1, err
	}
	s, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.IoctlSetInt(s, unix.TIOCSCTTY, 0); err != nil {
		return -1, fmt.Errorf("TIOCSCTTY: %w", err)
	}
	return s, nil
}

// threadStatus counts the process's threads, those in seccomp filter mode,
// and those with no_new_privs.
func threadStatus() (threads, filtered, nnp int) {
	dirs, _ := filepath.Glob("/proc/self/task/*/status")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		threads++
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "Seccomp:" && f[1] == "2" {
				filtered++
			}
			if len(f) == 2 && f[0] == "NoNewPrivs:" && f[1] == "1" {
				nnp++
			}
		}
	}
	return
}

func seccompMode() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Seccomp:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func installDefault() error {
	prog, err := Default().Assemble()
	if err != nil {
		return err
	}
	// What the runtime does: no_new_privs first, then Install.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	return Install(prog)
}

func childMain(mode string) int {
	switch mode {
	case modeExit0:
		return 0
	case modePlain:
		return plainMain()
	case modeX32, modeX32Ctl:
		unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
		if mode == modeX32 {
			if err := installDefault(); err != nil {
				fmt.Fprintln(os.Stderr, "install:", err)
				return 3
			}
		}
		_, _, e := unix.RawSyscall(uintptr(native.x32Bit|native.syscalls()["getpid"]), 0, 0, 0)
		fmt.Printf("x32 getpid returned, errno %d\n", int(e))
		return 0
	case modeBad:
		err := Install([]bpf.RawInstruction{{Op: 0xffff}})
		fmt.Printf("is EINVAL: %v; %v\n", errors.Is(err, unix.EINVAL), err)
		return 0
	case modeControl, modeFiltered:
		return probeMain(mode == modeFiltered)
	}
	fmt.Fprintln(os.Stderr, "unknown child mode", mode)
	return 2
}

// plainMain is an ordinary Go program: goroutines, timers, GC, files, a
// loopback connection.
func plainMain() int {
	ch := make(chan int)
	for i := 0; i < 16; i++ {
		go func(i int) {
			time.Sleep(time.Millisecond)
			ch <- i
		}(i)
	}
	sum := 0
	for i := 0; i < 16; i++ {
		sum += <-ch
	}
	runtime.GC()
	if _, err := os.ReadDir("/proc/self/fd"); err != nil {
		fmt.Println("readdir:", err)
		return 1
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err == nil {
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Close()
			}
		}()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			fmt.Println("dial:", err)
			return 1
		}
		c.Close()
		l.Close()
	}
	fmt.Printf("plain ok sum=%d seccomp=%s\n", sum, seccompMode())
	return 0
}

func probeMain(filtered bool) int {
	unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	rep := report{Probes: map[string]result{}}
	env := &probeEnv{tty: -1}
	var setup []string
	exe, err := os.Executable()
	if err != nil {
		setup = append(setup, "executable: "+err.Error())
	}
	env.exe = exe
	if tty, err := openControllingTTY(); err != nil {
		setup = append(setup, "tty: "+err.Error())
	} else {
		env.tty = tty
	}
	// Park a few goroutines on their own threads so that TSYNC has
	// threads other than the caller's to synchronize.
	release := make(chan struct{})
	started := make(chan struct{})
	for i := 0; i < 3; i++ {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started <- struct{}{}
			<-release
		}()
		<-started
	}
	if filtered {
		if err := installDefault(); err != nil {
			fmt.Fprintln(os.Stderr, "install:", err)
			return 3
		}
	}
	for _, p := range probes() {
		rep.Probes[p.name] = toResult(p.fn(env))
	}
	rep.Threads, rep.ThreadsFiltered, rep.ThreadsNNP = threadStatus()
	close(release)
	if i := strings.Index(env.plain, "seccomp="); i >= 0 {
		rep.PlainSeccomp = strings.TrimSpace(env.plain[i+len("seccomp="):])
	}
	rep.Setup = strings.Join(setup, "; ")
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

// requireSeccomp skips when the kernel has no seccomp filter support.
func requireSeccomp(t *testing.T) {
	t.Helper()
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		t.Skipf("kernel without seccomp: %v", err)
	}
}

func startChild(t *testing.T, mode string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // so the child can own a terminal
	return cmd
}

func runProbeChild(t *testing.T, mode string) report {
	t.Helper()
	cmd := startChild(t, mode)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s child: %v\nstderr: %s", mode, err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%s child: bad report %q: %v", mode, out, err)
	}
	if rep.Setup != "" {
		t.Logf("%s child setup: %s", mode, rep.Setup)
	}
	return rep
}

func errnoString(r result) string {
	switch r.Errno {
	case 0:
		return "success"
	case -1, -2:
		return r.Msg
	}
	return fmt.Sprintf("%s (%d)", unix.ErrnoName(syscall.Errno(r.Errno)), r.Errno)
}

// TestKernel installs Default() in a child process and checks every probe
// against a control child without the filter.
func TestKernel(t *testing.T) {
	requireSeccomp(t)
	t.Logf("running as uid %d", os.Getuid())
	control := runProbeChild(t, modeControl)
	filtered := runProbeChild(t, modeFiltered)

	t.Run("threads", func(t *testing.T) {
		if filtered.Threads < 4 {
			t.Errorf("only %d threads; TSYNC was not exercised", filtered.Threads)
		}
		if filtered.ThreadsFiltered != filtered.Threads || filtered.ThreadsNNP != filtered.Threads {
			t.Errorf("%d threads, %d in seccomp filter mode, %d with no_new_privs; want all",
				filtered.Threads, filtered.ThreadsFiltered, filtered.ThreadsNNP)
		}
		if filtered.PlainSeccomp != "2" {
			t.Errorf("plain Go program under the filter reports Seccomp %q, want 2 (inherited)", filtered.PlainSeccomp)
		}
	})
	for _, p := range probes() {
		t.Run(p.name, func(t *testing.T) {
			c, f := control.Probes[p.name], filtered.Probes[p.name]
			if c.Errno == -2 || f.Errno == -2 {
				t.Skipf("not attempted: %s %s", c.Msg, f.Msg)
			}
			if p.allowed {
				if f.Errno != c.Errno {
					t.Errorf("filter changed an allowed call: control %s, filtered %s", errnoString(c), errnoString(f))
				}
				if f.Errno != 0 {
					t.Logf("fails in both children (environment): %s", errnoString(f))
				}
				return
			}
			if f.Errno != int(p.want) {
				t.Fatalf("under the filter: got %s, want %s (control: %s)", errnoString(f), errnoString(result{Errno: int(p.want)}), errnoString(c))
			}
			if p.noControl {
				return
			}
			if c.Errno == f.Errno {
				t.Skipf("control inconclusive: without the filter the call also fails with %s here, so this environment cannot show the filter's effect", errnoString(c))
			}
			t.Logf("filtered %s; control %s", errnoString(f), errnoString(c))
		})
	}
}

// TestKernelX32 checks that an x32 syscall kills the process under the
// filter and does not without it.
func TestKernelX32(t *testing.T) {
	requireSeccomp(t)
	if native.x32Bit == 0 {
		t.Skip("no x32 ABI on", native.name)
	}
	ctl := startChild(t, modeX32Ctl)
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("control: %v: %s", err, out)
	} else {
		t.Logf("control: %s", bytes.TrimSpace(out))
	}
	cmd := startChild(t, modeX32)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("want the child killed by SIGSYS, got err %v, output %q", err, out)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != unix.SIGSYS {
		t.Fatalf("want the child killed by SIGSYS, got %v, output %q", ws, out)
	}
}

// TestInstallErrors checks argument validation and, in a child, that the
// kernel's rejection of a bad program comes back as a wrapped errno.
func TestInstallErrors(t *testing.T) {
	if err := Install(nil); err == nil {
		t.Error("Install(nil) succeeded")
	}
	if err := Install(make([]bpf.RawInstruction, maxInsns+1)); err == nil {
		t.Error("Install of an oversized program succeeded")
	}
	requireSeccomp(t)
	out, err := startChild(t, modeBad).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "is EINVAL: true;") {
		t.Errorf("bad program: %v: %s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}
