//go:build linux

package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Install loads prog as a seccomp filter for every thread of the calling
// process: seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC). The
// filter cannot be removed and is inherited across fork, clone and execve.
//
// The caller should already have set PR_SET_NO_NEW_PRIVS. Because that flag
// is per thread and the Go scheduler may run Install on another thread than
// the one that set it, Install also sets it on the thread it locks itself to
// (setting it twice is harmless); TSYNC then gives it to every thread.
//
// Errors wrap the errno (errors.Is(err, unix.EACCES), ...). If the kernel
// cannot synchronize some thread, the error is a *TSyncError with its id and
// no thread got the filter.
func Install(prog []bpf.RawInstruction) error {
	if len(prog) == 0 || len(prog) > maxInsns {
		return fmt.Errorf("seccomp: install: program has %d instructions, want 1-%d", len(prog), maxInsns)
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: install: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	r1, _, errno := unix.Syscall(unix.SYS_SECCOMP,
		unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		var hint string
		switch {
		case errors.Is(errno, unix.EACCES):
			hint = " (no_new_privs not set and no CAP_SYS_ADMIN)"
		case errors.Is(errno, unix.EINVAL):
			hint = " (kernel rejected the program or lacks CONFIG_SECCOMP_FILTER)"
		}
		return fmt.Errorf("seccomp: install: seccomp(SECCOMP_SET_MODE_FILTER, TSYNC)%s: %w", hint, errno)
	}
	if r1 != 0 {
		return fmt.Errorf("seccomp: install: %w", &TSyncError{TID: int(r1)})
	}
	return nil
}
