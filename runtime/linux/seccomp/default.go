package seccomp

import "syscall"

// Linux constants used by the default profile's argument rules. They have the
// same values on x86-64 and arm64.
const (
	cloneNewTime   = 0x00000080
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000

	// cloneNamespaceFlags are the clone flags that create namespaces.
	cloneNamespaceFlags = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC |
		cloneNewUser | cloneNewPID | cloneNewNet | cloneNewTime

	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16

	sockRaw      = 3
	sockPacket   = 10
	sockTypeMask = 0xf

	netlinkRoute = 0

	ioctlTIOCSTI   = 0x5412
	ioctlTIOCLINUX = 0x541c

	perLinux        = 0x0000
	perLinux32      = 0x0008
	perUname26      = 0x20000
	perQuery        = 0xffffffff
	perLinux32Uname = perLinux32 | perUname26
)

// Default returns moat's default profile. Each call returns a new Profile that
// the caller may modify.
//
// Decisions:
//   - foreign ABI (i386, x32): KILL_PROCESS (always, see Profile);
//   - syscall numbers above the table: ENOSYS;
//   - clone3: ENOSYS, because its flags sit in a struct BPF cannot read;
//     glibc and others then fall back to clone;
//   - clone with any namespace flag (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
//     NEWUSER, NEWPID, NEWNET, NEWTIME) in the low 32 bits of flags: EPERM;
//   - personality other than PER_LINUX, PER_LINUX32, UNAME26,
//     PER_LINUX32|UNAME26 and the 0xffffffff query: EPERM;
//   - ioctl TIOCSTI and TIOCLINUX (cmd compared on its low 32 bits): EPERM;
//   - socket: AF_UNIX, AF_INET and AF_INET6 allowed, but SOCK_RAW and
//     SOCK_PACKET on AF_INET/AF_INET6 fail with EPERM (what a process without
//     CAP_NET_RAW gets); AF_NETLINK only with NETLINK_ROUTE, other netlink
//     protocols fail with EPROTONOSUPPORT; every other family fails with
//     EAFNOSUPPORT, which programs treat as "not built into this kernel";
//   - socketpair: AF_UNIX only, others EAFNOSUPPORT;
//   - the Deny list (process inspection, keyrings, bpf, perf, userfaultfd,
//     io_uring, kexec and modules, file handles, mounts and namespaces,
//     system administration, clocks, x86 port I/O and LDT, obsolete
//     syscalls, NUMA page migration, fanotify): EPERM;
//   - everything else: ALLOW.
func Default() *Profile {
	return &Profile{
		Deny: []string{
			// Process inspection and cross-process memory access.
			"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise",
			"pidfd_getfd", "kcmp",
			// Kernel keyrings.
			"keyctl", "add_key", "request_key",
			// eBPF, perf, userfaultfd, io_uring.
			"bpf", "perf_event_open", "userfaultfd",
			"io_uring_setup", "io_uring_enter", "io_uring_register",
			// Kernel code loading.
			"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
			// File handles (bypass path-based confinement).
			"open_by_handle_at", "name_to_handle_at",
			// Mounts, root changes and namespaces.
			"mount", "umount2", "pivot_root", "chroot", "setns", "unshare",
			"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
			"open_tree_attr", "mount_setattr",
			// System administration.
			"acct", "swapon", "swapoff", "reboot", "quotactl", "quotactl_fd",
			"syslog", "vhangup", "lookup_dcookie",
			// Clocks.
			"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
			// x86 port I/O and LDT.
			"iopl", "ioperm", "modify_ldt",
			// Obsolete.
			"uselib", "create_module", "get_kernel_syms", "query_module",
			"nfsservctl", "_sysctl",
			// NUMA page migration of other processes.
			"move_pages", "migrate_pages",
			// Filesystem-wide event monitoring.
			"fanotify_init",
		},
		Errno: map[string]syscall.Errno{
			"clone3": errENOSYS,
		},
		Rules: []ArgRule{
			// Most frequently called first: the filter tests them in this
			// order (see Profile.Rules), and ioctl is by far the hottest.
			{
				Syscall: "ioctl",
				Desc:    "TIOCSTI, TIOCLINUX (low 32 bits of cmd): EPERM",
				Cases: []ArgCase{
					{When: []ArgCond{ArgEq(1, ioctlTIOCSTI)}, Errno: errEPERM},
					{When: []ArgCond{ArgEq(1, ioctlTIOCLINUX)}, Errno: errEPERM},
				},
			},
			{
				Syscall: "clone",
				Desc:    "namespace flags (CLONE_NEW*): EPERM",
				Cases: []ArgCase{
					{When: []ArgCond{ArgAnySet(0, cloneNamespaceFlags)}, Errno: errEPERM},
				},
			},
			{
				Syscall: "socket",
				Desc: "AF_UNIX, AF_INET, AF_INET6 (SOCK_RAW, SOCK_PACKET: EPERM), " +
					"AF_NETLINK with NETLINK_ROUTE only (others EPROTONOSUPPORT); other families EAFNOSUPPORT",
				Cases: []ArgCase{
					{When: []ArgCond{ArgEq(0, afUnix)}},
					{When: []ArgCond{ArgEq(0, afInet), ArgMaskedEq(1, sockTypeMask, sockRaw)}, Errno: errEPERM},
					{When: []ArgCond{ArgEq(0, afInet), ArgMaskedEq(1, sockTypeMask, sockPacket)}, Errno: errEPERM},
					{When: []ArgCond{ArgEq(0, afInet)}},
					{When: []ArgCond{ArgEq(0, afInet6), ArgMaskedEq(1, sockTypeMask, sockRaw)}, Errno: errEPERM},
					{When: []ArgCond{ArgEq(0, afInet6), ArgMaskedEq(1, sockTypeMask, sockPacket)}, Errno: errEPERM},
					{When: []ArgCond{ArgEq(0, afInet6)}},
					{When: []ArgCond{ArgEq(0, afNetlink), ArgEq(2, netlinkRoute)}},
					{When: []ArgCond{ArgEq(0, afNetlink)}, Errno: errEPROTONOSUPPORT},
				},
				Default: errEAFNOSUPPORT,
			},
			{
				Syscall: "socketpair",
				Desc:    "AF_UNIX only; others EAFNOSUPPORT",
				Cases: []ArgCase{
					{When: []ArgCond{ArgEq(0, afUnix)}},
				},
				Default: errEAFNOSUPPORT,
			},
			{
				Syscall: "personality",
				Desc:    "only PER_LINUX, PER_LINUX32, UNAME26 and the query; others EPERM",
				Cases: []ArgCase{
					{When: []ArgCond{ArgEq(0, perQuery)}},
					{When: []ArgCond{ArgEq(0, perLinux)}},
					{When: []ArgCond{ArgEq(0, perLinux32)}},
					{When: []ArgCond{ArgEq(0, perUname26)}},
					{When: []ArgCond{ArgEq(0, perLinux32Uname)}},
				},
				Default: errEPERM,
			},
		},
		UnknownErrno: errENOSYS,
	}
}
