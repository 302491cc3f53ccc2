//go:build linux && (amd64 || arm64)

package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestTableMatchesXSys cross-checks the table against golang.org/x/sys for
// every syscall the default profile names that exists on all supported
// architectures (x86-only ones are checked in syscalls_linux_amd64_test.go).
func TestTableMatchesXSys(t *testing.T) {
	want := map[string]uintptr{
		"ptrace": unix.SYS_PTRACE, "process_vm_readv": unix.SYS_PROCESS_VM_READV,
		"process_vm_writev": unix.SYS_PROCESS_VM_WRITEV, "process_madvise": unix.SYS_PROCESS_MADVISE,
		"pidfd_getfd": unix.SYS_PIDFD_GETFD, "kcmp": unix.SYS_KCMP, "keyctl": unix.SYS_KEYCTL,
		"add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY, "bpf": unix.SYS_BPF,
		"perf_event_open": unix.SYS_PERF_EVENT_OPEN, "userfaultfd": unix.SYS_USERFAULTFD,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER,
		"io_uring_register": unix.SYS_IO_URING_REGISTER, "kexec_load": unix.SYS_KEXEC_LOAD,
		"kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "init_module": unix.SYS_INIT_MODULE,
		"finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
		"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
		"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT,
		"chroot": unix.SYS_CHROOT, "setns": unix.SYS_SETNS, "unshare": unix.SYS_UNSHARE,
		"fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT,
		"fspick": unix.SYS_FSPICK, "move_mount": unix.SYS_MOVE_MOUNT, "open_tree": unix.SYS_OPEN_TREE,
		"open_tree_attr": unix.SYS_OPEN_TREE_ATTR, "mount_setattr": unix.SYS_MOUNT_SETATTR,
		"acct": unix.SYS_ACCT, "swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF,
		"reboot": unix.SYS_REBOOT, "quotactl": unix.SYS_QUOTACTL, "quotactl_fd": unix.SYS_QUOTACTL_FD,
		"syslog": unix.SYS_SYSLOG, "settimeofday": unix.SYS_SETTIMEOFDAY,
		"clock_settime": unix.SYS_CLOCK_SETTIME, "clock_adjtime": unix.SYS_CLOCK_ADJTIME,
		"adjtimex": unix.SYS_ADJTIMEX, "vhangup": unix.SYS_VHANGUP, "lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE,
		"nfsservctl": unix.SYS_NFSSERVCTL, "move_pages": unix.SYS_MOVE_PAGES,
		"migrate_pages": unix.SYS_MIGRATE_PAGES, "fanotify_init": unix.SYS_FANOTIFY_INIT,
		"clone": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3, "personality": unix.SYS_PERSONALITY,
		"ioctl": unix.SYS_IOCTL, "socket": unix.SYS_SOCKET, "socketpair": unix.SYS_SOCKETPAIR,
		"read": unix.SYS_READ, "getpid": unix.SYS_GETPID, "rseq_slice_yield": unix.SYS_RSEQ_SLICE_YIELD,
	}
	for name, n := range xsysArchOnly {
		want[name] = n
	}
	for name, n := range want {
		if got, ok := native.syscalls()[name]; !ok || uintptr(got) != n {
			t.Errorf("%s: table has %d (present %v), x/sys has %d", name, got, ok, n)
		}
	}
}
