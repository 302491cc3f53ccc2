// Package seccomp builds and installs moat's seccomp-BPF filter, the
// kernel-surface layer of the sandbox (the "privilege", "kernel surface",
// "terminal injection" and "sockets" rows of docs/THREAT-MODEL.md).
//
// The filter is classic BPF assembled in pure Go with golang.org/x/net/bpf;
// libseccomp is not used. A Profile says what is denied, Default returns
// moat's profile, Assemble compiles a profile for the architecture the binary
// was built for, and Install loads the program for every thread of the
// calling process.
//
// The assembled program has this shape:
//
//	    ld   [arch]
//	    jeq  #AUDIT_ARCH_<native>, next, kill  ; i386 (int 0x80), arm32: KILL_PROCESS
//	    ld   [nr]
//	    jgt  #<highest known nr>, high, next
//	    <balanced binary search (jge) over runs of syscall numbers that
//	     share a verdict; each leaf is "ret ALLOW", "ret ERRNO|e", or a
//	     small argument block for clone, ioctl, personality, socket, ...>
//	high:
//	    jeq  #0xffffffff, unknown, next        ; x86-64 only: nr -1 is not x32
//	    jset #0x40000000, kill, next           ; x86-64 only: x32 ABI
//	unknown:
//	    ret  #ERRNO|ENOSYS                     ; syscalls newer than the table
//	kill:
//	    ret  #KILL_PROCESS
//
// Every path that ends in ALLOW without passing an argument block reads only
// seccomp_data.nr and .arch and uses only the instructions the kernel's
// seccomp action cache can emulate (ld w abs, ja, jeq/jge/jgt/jset k,
// and k, ret k). On Linux 5.11 and later the kernel therefore learns, per
// syscall number, that ordinary syscalls are always allowed and stops running
// the filter for them. Arguments are loaded only inside the argument blocks.
//
// Argument conditions look at the low 32 bits of an argument only. Every
// argument the default profile inspects (clone flags, ioctl cmd, personality,
// socket domain, type and protocol) is an int or unsigned int that the kernel
// truncates to those same 32 bits, so values with junk in the high half (for
// example ioctl cmd 0xffffffff00005412) are judged as the kernel will see them.
//
// Errno values in a Profile are Linux errno numbers, whatever the build OS.
package seccomp

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"syscall"

	"golang.org/x/net/bpf"
)

// Return values of a seccomp filter (SECCOMP_RET_*).
const (
	retKillProcess uint32 = 0x80000000
	retErrno       uint32 = 0x00050000
	retAllow       uint32 = 0x7fff0000
)

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// maxInsns is BPF_MAXINSNS, the kernel's limit on a classic BPF program.
const maxInsns = 4096

// maxErrno is the largest errno the kernel passes through SECCOMP_RET_ERRNO.
const maxErrno = 4095

// Linux errno numbers. They are spelled out because the package may be built
// (for tests or tooling) on an OS whose syscall constants differ.
const (
	errEPERM           = syscall.Errno(1)
	errEACCES          = syscall.Errno(13)
	errEINVAL          = syscall.Errno(22)
	errENOSYS          = syscall.Errno(38)
	errEPROTONOSUPPORT = syscall.Errno(93)
	errEOPNOTSUPP      = syscall.Errno(95)
	errEAFNOSUPPORT    = syscall.Errno(97)
)

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

// archInfo describes one architecture: its audit number and syscall table.
// Both supported architectures (x86-64, arm64) are little-endian, which the
// argument offsets rely on.
type archInfo struct {
	// name is the kernel's name for the architecture.
	name string
	// auditArch is the AUDIT_ARCH_* value of the native ABI.
	auditArch uint32
	// x32Bit is __X32_SYSCALL_BIT on x86-64, 0 elsewhere.
	x32Bit uint32
	// maxSyscall is the highest syscall number in syscalls.
	maxSyscall uint32
	// syscalls maps names to numbers (built on first use).
	syscalls func() map[string]uint32
	// foreign lists names other supported architectures have and this one
	// lacks.
	foreign []string
}

// Profile describes what the filter denies. Everything it does not mention is
// allowed. Independently of the fields, the assembled filter always kills the
// process (SECCOMP_RET_KILL_PROCESS) for a syscall made through a foreign ABI
// (seccomp_data.arch other than the native one, e.g. int 0x80 on x86-64) and,
// on x86-64, for an x32 syscall number.
//
// A syscall may appear in only one of Deny, Errno and Rules. Names are the
// kernel's syscall names ("umount2", "newfstatat"). A name that exists only
// on another architecture moat supports ("iopl" on arm64) is skipped; a name
// unknown on every supported architecture makes Assemble fail.
type Profile struct {
	// Deny lists syscalls that always fail with EPERM.
	Deny []string
	// Errno lists syscalls that always fail with the given errno
	// (1..4095), for cases where EPERM is the wrong answer, such as clone3
	// failing with ENOSYS so that callers fall back to clone.
	Errno map[string]syscall.Errno
	// Rules restrict syscalls by their argument values.
	Rules []ArgRule
	// UnknownErrno is the errno for syscall numbers above the highest one
	// this package knows for the architecture, i.e. syscalls added to the
	// kernel after this table was written. Zero allows them.
	UnknownErrno syscall.Errno
}

// ArgRule decides a syscall by its arguments: the first case whose
// conditions all hold gives the result, and Default applies when none does.
type ArgRule struct {
	// Syscall is the name of the syscall the rule applies to.
	Syscall string
	// Cases are tried in order.
	Cases []ArgCase
	// Default is the errno when no case matches; zero allows the call.
	Default syscall.Errno
	// Desc is a short description for Summary.
	Desc string
}

// ArgCase is one case of an ArgRule.
type ArgCase struct {
	// When lists conditions that must all hold. An empty list always
	// matches, which makes the remaining cases and the rule's Default
	// unreachable.
	When []ArgCond
	// Errno is the result when the case matches; zero allows the call.
	Errno syscall.Errno
}

// CmpOp is the comparison an ArgCond makes.
type CmpOp int

// Comparisons. All of them look at the low 32 bits of the argument.
const (
	// CmpEq holds when the argument equals Value.
	CmpEq CmpOp = iota + 1
	// CmpMaskedEq holds when the argument ANDed with Mask equals Value.
	CmpMaskedEq
	// CmpAnySet holds when the argument has any of the bits of Value set.
	CmpAnySet
)

// ArgCond is a condition on the low 32 bits of one syscall argument.
type ArgCond struct {
	// Arg is the argument index, 0 to 5.
	Arg int
	// Op is the comparison.
	Op CmpOp
	// Value is the operand of the comparison.
	Value uint32
	// Mask is applied before comparing, for CmpMaskedEq only.
	Mask uint32
}

// ArgEq returns the condition "low 32 bits of argument arg == v".
func ArgEq(arg int, v uint32) ArgCond { return ArgCond{Arg: arg, Op: CmpEq, Value: v} }

// ArgMaskedEq returns the condition "(low 32 bits of argument arg) & mask == v".
func ArgMaskedEq(arg int, mask, v uint32) ArgCond {
	return ArgCond{Arg: arg, Op: CmpMaskedEq, Mask: mask, Value: v}
}

// ArgAnySet returns the condition "low 32 bits of argument arg have any bit of bits set".
func ArgAnySet(arg int, bits uint32) ArgCond {
	return ArgCond{Arg: arg, Op: CmpAnySet, Value: bits}
}

// TSyncError reports that the kernel could not synchronize the filter to
// every thread of the process (SECCOMP_FILTER_FLAG_TSYNC): thread TID is
// already under a filter stack that is not an ancestor of the caller's. No
// thread, the caller included, got the new filter.
type TSyncError struct {
	// TID is the id of the thread that could not be synchronized.
	TID int
}

// Error implements error.
func (e *TSyncError) Error() string {
	return "TSYNC failed: thread " + strconv.Itoa(e.TID) + " has an incompatible seccomp filter"
}

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
			{
				Syscall: "clone",
				Desc:    "namespace flags (CLONE_NEW*): EPERM",
				Cases: []ArgCase{
					{When: []ArgCond{ArgAnySet(0, cloneNamespaceFlags)}, Errno: errEPERM},
				},
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
			{
				Syscall: "ioctl",
				Desc:    "TIOCSTI, TIOCLINUX (low 32 bits of cmd): EPERM",
				Cases: []ArgCase{
					{When: []ArgCond{ArgEq(1, ioctlTIOCSTI)}, Errno: errEPERM},
					{When: []ArgCond{ArgEq(1, ioctlTIOCLINUX)}, Errno: errEPERM},
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
		},
		UnknownErrno: errENOSYS,
	}
}

// sysEntry is one row of a syscall table.
type sysEntry struct {
	name string
	nr   uint32
}

// tableMap indexes syscall tables by name.
func tableMap(lists ...[]sysEntry) map[string]uint32 {
	m := make(map[string]uint32, 512)
	for _, list := range lists {
		for _, e := range list {
			m[e.name] = e.nr
		}
	}
	return m
}

// syscallClass groups syscalls into the classes Summary reports.
var syscallClass = map[string]string{
	"ptrace": "process-inspection", "process_vm_readv": "process-inspection",
	"process_vm_writev": "process-inspection", "process_madvise": "process-inspection",
	"pidfd_getfd": "process-inspection", "kcmp": "process-inspection",
	"keyctl": "keyrings", "add_key": "keyrings", "request_key": "keyrings",
	"bpf": "bpf", "perf_event_open": "perf", "userfaultfd": "userfaultfd",
	"io_uring_setup": "io_uring", "io_uring_enter": "io_uring", "io_uring_register": "io_uring",
	"kexec_load": "kernel-code-loading", "kexec_file_load": "kernel-code-loading",
	"init_module": "kernel-code-loading", "finit_module": "kernel-code-loading",
	"delete_module":     "kernel-code-loading",
	"open_by_handle_at": "file-handles", "name_to_handle_at": "file-handles",
	"mount": "mounts", "umount2": "mounts", "pivot_root": "mounts", "chroot": "mounts",
	"fsopen": "mounts", "fsconfig": "mounts", "fsmount": "mounts", "fspick": "mounts",
	"move_mount": "mounts", "open_tree": "mounts", "open_tree_attr": "mounts",
	"mount_setattr": "mounts",
	"setns":         "namespaces", "unshare": "namespaces", "clone": "namespaces", "clone3": "namespaces",
	"acct": "system-admin", "swapon": "system-admin", "swapoff": "system-admin",
	"reboot": "system-admin", "quotactl": "system-admin", "quotactl_fd": "system-admin",
	"syslog": "system-admin", "vhangup": "system-admin", "lookup_dcookie": "system-admin",
	"settimeofday": "clocks", "clock_settime": "clocks", "clock_adjtime": "clocks",
	"adjtimex": "clocks",
	"iopl":     "x86-port-io-ldt", "ioperm": "x86-port-io-ldt", "modify_ldt": "x86-port-io-ldt",
	"uselib": "obsolete", "create_module": "obsolete", "get_kernel_syms": "obsolete",
	"query_module": "obsolete", "nfsservctl": "obsolete", "_sysctl": "obsolete",
	"move_pages": "numa-migration", "migrate_pages": "numa-migration",
	"fanotify_init": "fanotify",
	"personality":   "personality",
	"ioctl":         "terminal-injection",
	"socket":        "socket-families", "socketpair": "socket-families",
}

// Summary is a short description of what a profile enforces, for `moat
// doctor` and result.enforcement. It marshals to JSON as is.
type Summary struct {
	// Arch is the kernel's name for the architecture ("x86_64", "aarch64").
	Arch string `json:"arch"`
	// DefaultAction is what happens to syscalls the profile does not
	// mention ("allow").
	DefaultAction string `json:"default_action"`
	// ForeignArch is what happens to syscalls made through another ABI.
	ForeignArch string `json:"foreign_arch"`
	// X32 is what happens to x32 syscalls; empty where there is no x32 ABI.
	X32 string `json:"x32,omitempty"`
	// MaxSyscall is the highest syscall number the table knows.
	MaxSyscall uint32 `json:"max_syscall"`
	// UnknownSyscalls is what happens to numbers above MaxSyscall: an errno
	// name or "allow".
	UnknownSyscalls string `json:"unknown_syscalls"`
	// DeniedCount is the number of syscalls that always fail.
	DeniedCount int `json:"denied_count"`
	// Denied maps each syscall that always fails to its errno name.
	Denied map[string]string `json:"denied"`
	// ArgFiltered maps each syscall decided by its arguments to a
	// description of the rule.
	ArgFiltered map[string]string `json:"arg_filtered"`
	// Classes lists the classes of denied or filtered syscalls, sorted.
	Classes []string `json:"classes"`
	// Instructions is the length of the assembled program, 0 if it could
	// not be assembled.
	Instructions int `json:"instructions"`
	// Error is set when the profile does not assemble.
	Error string `json:"error,omitempty"`
}

// Summary returns a short description of what the profile enforces on the
// running architecture. Syscalls that do not exist on it are left out.
func (p *Profile) Summary() Summary {
	s := Summary{
		Arch:            native.name,
		DefaultAction:   "allow",
		ForeignArch:     "kill_process",
		MaxSyscall:      native.maxSyscall,
		UnknownSyscalls: actionName(p.UnknownErrno),
		Denied:          map[string]string{},
		ArgFiltered:     map[string]string{},
		Classes:         []string{},
	}
	if native.x32Bit != 0 {
		s.X32 = "kill_process"
	}
	classes := map[string]bool{}
	note := func(name string) {
		if c, ok := syscallClass[name]; ok {
			classes[c] = true
		} else {
			classes["other"] = true
		}
	}
	present := func(name string) bool {
		_, ok := native.syscalls()[name]
		return ok
	}
	for _, name := range p.Deny {
		if present(name) {
			s.Denied[name] = errnoName(errEPERM)
			note(name)
		}
	}
	for name, e := range p.Errno {
		if present(name) {
			s.Denied[name] = errnoName(e)
			note(name)
		}
	}
	for _, r := range p.Rules {
		if present(r.Syscall) {
			desc := r.Desc
			if desc == "" {
				desc = "argument rule"
			}
			s.ArgFiltered[r.Syscall] = desc
			note(r.Syscall)
		}
	}
	s.DeniedCount = len(s.Denied)
	for c := range classes {
		s.Classes = append(s.Classes, c)
	}
	sort.Strings(s.Classes)
	prog, err := p.Assemble()
	if err != nil {
		s.Error = err.Error()
	} else {
		s.Instructions = len(prog)
	}
	return s
}

// actionName names the result of a zero-means-allow errno.
func actionName(e syscall.Errno) string {
	if e == 0 {
		return "allow"
	}
	return errnoName(e)
}

// errnoName returns the Linux name of the errnos this package uses.
func errnoName(e syscall.Errno) string {
	switch e {
	case errEPERM:
		return "EPERM"
	case errEACCES:
		return "EACCES"
	case errEINVAL:
		return "EINVAL"
	case errENOSYS:
		return "ENOSYS"
	case errEPROTONOSUPPORT:
		return "EPROTONOSUPPORT"
	case errEOPNOTSUPP:
		return "EOPNOTSUPP"
	case errEAFNOSUPPORT:
		return "EAFNOSUPPORT"
	}
	return "errno " + strconv.Itoa(int(e))
}

// Assemble compiles the profile for the architecture the binary was built
// for (x86-64 or arm64; others return an error wrapping
// errors.ErrUnsupported).
func (p *Profile) Assemble() ([]bpf.RawInstruction, error) {
	return p.assemble(&native)
}

// verdict is what the filter does for one syscall number: return ret, or run
// rule when rule is not nil.
type verdict struct {
	ret  uint32
	rule *ArgRule
}

// run is a range of syscall numbers with the same verdict.
type run struct {
	lo, hi uint32
	v      verdict
}

func (p *Profile) assemble(ar *archInfo) ([]bpf.RawInstruction, error) {
	if ar.syscalls == nil {
		return nil, fmt.Errorf("seccomp: architecture %s: %w", ar.name, errors.ErrUnsupported)
	}
	if err := checkErrno(p.UnknownErrno, true); err != nil {
		return nil, fmt.Errorf("seccomp: UnknownErrno: %w", err)
	}
	special, err := p.resolve(ar)
	if err != nil {
		return nil, err
	}
	runs := buildRuns(special, ar.maxSyscall)

	a := &assembler{}
	kill := a.newLabel()
	high := a.newLabel()
	a.emit(sinsn{op: opLoad, k: offArch})
	a.emit(sinsn{op: opJEq, k: ar.auditArch, jt: lblNext, jf: kill})
	a.emit(sinsn{op: opLoad, k: offNr})
	a.emit(sinsn{op: opJGt, k: ar.maxSyscall, jt: high, jf: lblNext})
	a.tree(runs)
	a.bind(high)
	if ar.x32Bit != 0 {
		unknown := a.newLabel()
		a.emit(sinsn{op: opJEq, k: 0xffffffff, jt: unknown, jf: lblNext})
		a.emit(sinsn{op: opJSet, k: ar.x32Bit, jt: kill, jf: lblNext})
		a.bind(unknown)
	}
	a.emit(sinsn{op: opRet, k: errnoRet(p.UnknownErrno)})
	a.bind(kill)
	a.emit(sinsn{op: opRet, k: retKillProcess})

	insns, err := a.link()
	if err != nil {
		return nil, err
	}
	if len(insns) > maxInsns {
		return nil, fmt.Errorf("seccomp: program has %d instructions, the kernel accepts at most %d", len(insns), maxInsns)
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	return raw, nil
}

// resolve maps the profile's syscall names to numbers and verdicts.
func (p *Profile) resolve(ar *archInfo) (map[uint32]verdict, error) {
	foreign := make(map[string]bool, len(ar.foreign))
	for _, n := range ar.foreign {
		foreign[n] = true
	}
	owner := map[string]string{}
	special := map[uint32]verdict{}
	// add records the verdict for name; names that exist only on another
	// supported architecture are skipped.
	add := func(name, field string, v verdict) error {
		if prev, ok := owner[name]; ok {
			if prev == field && field == "Deny" {
				return nil // listed twice in Deny: harmless
			}
			return fmt.Errorf("seccomp: syscall %q appears in both %s and %s", name, prev, field)
		}
		owner[name] = field
		nr, ok := ar.syscalls()[name]
		if !ok {
			if foreign[name] {
				return nil
			}
			return fmt.Errorf("seccomp: %s: unknown syscall %q", field, name)
		}
		special[nr] = v
		return nil
	}
	for _, name := range p.Deny {
		if err := add(name, "Deny", verdict{ret: errnoRet(errEPERM)}); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(p.Errno))
	for name := range p.Errno {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		e := p.Errno[name]
		if err := checkErrno(e, false); err != nil {
			return nil, fmt.Errorf("seccomp: Errno[%q]: %w", name, err)
		}
		if err := add(name, "Errno", verdict{ret: errnoRet(e)}); err != nil {
			return nil, err
		}
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		if err := r.check(); err != nil {
			return nil, err
		}
		if err := add(r.Syscall, "Rules", verdict{rule: r}); err != nil {
			return nil, err
		}
	}
	return special, nil
}

// check validates a rule.
func (r *ArgRule) check() error {
	where := fmt.Sprintf("seccomp: rule for %q", r.Syscall)
	if err := checkErrno(r.Default, true); err != nil {
		return fmt.Errorf("%s: Default: %w", where, err)
	}
	for i, c := range r.Cases {
		if err := checkErrno(c.Errno, true); err != nil {
			return fmt.Errorf("%s: case %d: %w", where, i, err)
		}
		for j, cond := range c.When {
			if cond.Arg < 0 || cond.Arg > 5 {
				return fmt.Errorf("%s: case %d condition %d: argument index %d out of range 0-5", where, i, j, cond.Arg)
			}
			switch cond.Op {
			case CmpEq:
			case CmpMaskedEq:
				if cond.Value&^cond.Mask != 0 {
					return fmt.Errorf("%s: case %d condition %d: value %#x has bits outside mask %#x and can never match", where, i, j, cond.Value, cond.Mask)
				}
			case CmpAnySet:
				if cond.Value == 0 {
					return fmt.Errorf("%s: case %d condition %d: CmpAnySet with no bits can never match", where, i, j)
				}
			default:
				return fmt.Errorf("%s: case %d condition %d: unknown comparison %d", where, i, j, cond.Op)
			}
		}
	}
	return nil
}

// checkErrno validates an errno for SECCOMP_RET_ERRNO; zero is allowed only
// where it means "allow".
func checkErrno(e syscall.Errno, zeroOK bool) error {
	if e == 0 && zeroOK {
		return nil
	}
	if e < 1 || e > maxErrno {
		return fmt.Errorf("errno %d out of range 1-%d", int(e), maxErrno)
	}
	return nil
}

// errnoRet is the filter return value for an errno, ALLOW for zero.
func errnoRet(e syscall.Errno) uint32 {
	if e == 0 {
		return retAllow
	}
	return retErrno | uint32(e)
}

// buildRuns partitions [0, max] into maximal runs of numbers with the same
// verdict. Numbers with a rule always form a run of their own.
func buildRuns(special map[uint32]verdict, max uint32) []run {
	nrs := make([]uint32, 0, len(special))
	for nr := range special {
		nrs = append(nrs, nr)
	}
	sort.Slice(nrs, func(i, j int) bool { return nrs[i] < nrs[j] })
	allow := verdict{ret: retAllow}
	var runs []run
	push := func(lo, hi uint32, v verdict) {
		if n := len(runs); n > 0 {
			last := &runs[n-1]
			if last.hi+1 == lo && last.v.rule == nil && v.rule == nil && last.v.ret == v.ret {
				last.hi = hi
				return
			}
		}
		runs = append(runs, run{lo: lo, hi: hi, v: v})
	}
	next := uint32(0)
	for _, nr := range nrs {
		if nr > max {
			continue
		}
		if nr > next {
			push(next, nr-1, allow)
		}
		push(nr, nr, special[nr])
		next = nr + 1
	}
	if next <= max {
		push(next, max, allow)
	}
	return runs
}

// opKind is a symbolic instruction.
type opKind uint8

const (
	opLoad opKind = iota // A = 32-bit word at seccomp_data offset k
	opAnd                // A &= k
	opRet                // return k
	opJa                 // goto jt
	opJEq                // if A == k goto jt else jf
	opJGe                // if A >= k goto jt else jf
	opJGt                // if A > k goto jt else jf
	opJSet               // if A & k != 0 goto jt else jf
)

// label names a position in the program; lblNext is the next instruction.
type label int

const lblNext label = -1

// sinsn is an instruction whose jump targets are labels.
type sinsn struct {
	op     opKind
	k      uint32
	jt, jf label
}

func (s sinsn) isCond() bool { return s.op >= opJEq }

// assembler collects symbolic instructions and resolves them into classic
// BPF, inserting JA trampolines where a conditional jump is too far for its
// 8-bit offset.
type assembler struct {
	insns  []sinsn
	labels []int // label -> index of the instruction it marks; -1 if unbound
}

func (a *assembler) newLabel() label {
	a.labels = append(a.labels, -1)
	return label(len(a.labels) - 1)
}

func (a *assembler) bind(l label) { a.labels[l] = len(a.insns) }

func (a *assembler) emit(s sinsn) { a.insns = append(a.insns, s) }

// tree emits a balanced binary search over runs. A holds the syscall number,
// which is known to lie within the runs.
func (a *assembler) tree(runs []run) {
	if len(runs) == 1 {
		v := runs[0].v
		if v.rule != nil {
			a.rule(v.rule)
		} else {
			a.emit(sinsn{op: opRet, k: v.ret})
		}
		return
	}
	mid := len(runs) / 2
	right := a.newLabel()
	a.emit(sinsn{op: opJGe, k: runs[mid].lo, jt: right, jf: lblNext})
	a.tree(runs[:mid])
	a.bind(right)
	a.tree(runs[mid:])
}

// acc describes what the accumulator holds inside an argument block: the
// low word of argument arg ANDed with mask, or nothing known when arg < 0.
type acc struct {
	arg  int
	mask uint32
}

var accUnknown = acc{arg: -1}

// argLow is the offset of the low 32 bits of argument i (little-endian).
func argLow(i int) uint32 { return offArgs + 8*uint32(i) }

// rule emits the argument block of r. It always ends in a return.
func (a *assembler) rule(r *ArgRule) {
	const full = 0xffffffff
	have := accUnknown
	for _, c := range r.Cases {
		if len(c.When) == 0 {
			a.emit(sinsn{op: opRet, k: errnoRet(c.Errno)})
			return
		}
		nextCase := a.newLabel()
		var onFail acc
		for j, cond := range c.When {
			want := acc{arg: cond.Arg, mask: full}
			if cond.Op == CmpMaskedEq {
				want.mask = cond.Mask
			}
			if have.arg != want.arg || (have.mask != full && have.mask != want.mask) {
				a.emit(sinsn{op: opLoad, k: argLow(cond.Arg)})
				have = acc{arg: cond.Arg, mask: full}
			}
			if have.mask != want.mask {
				a.emit(sinsn{op: opAnd, k: want.mask})
				have.mask = want.mask
			}
			op := opJEq
			if cond.Op == CmpAnySet {
				op = opJSet
			}
			a.emit(sinsn{op: op, k: cond.Value, jt: lblNext, jf: nextCase})
			if j == 0 {
				onFail = have
			} else if onFail != have {
				onFail = accUnknown
			}
		}
		a.emit(sinsn{op: opRet, k: errnoRet(c.Errno)})
		a.bind(nextCase)
		have = onFail
	}
	a.emit(sinsn{op: opRet, k: errnoRet(r.Default)})
}

// link resolves labels and returns the program.
func (a *assembler) link() ([]bpf.Instruction, error) {
	n := len(a.insns)
	for l, idx := range a.labels {
		if idx < 0 || idx >= n {
			return nil, fmt.Errorf("seccomp: internal error: label %d unbound or past the end", l)
		}
	}
	// tramp[i][0] / [1]: the true / false branch of conditional jump i goes
	// through a JA placed right after it.
	tramp := make([][2]bool, n)
	pos := make([]int, n)
	ntramp := func(i int) int {
		c := 0
		for _, t := range tramp[i] {
			if t {
				c++
			}
		}
		return c
	}
	target := func(l label) int { return pos[a.labels[l]] }
	for {
		p := 0
		for i := range a.insns {
			pos[i] = p
			p += 1 + ntramp(i)
		}
		changed := false
		for i, in := range a.insns {
			if in.op == opJa && target(in.jt) <= pos[i] {
				return nil, fmt.Errorf("seccomp: internal error: backward jump at %d", i)
			}
			if !in.isCond() {
				continue
			}
			for b, l := range [2]label{in.jt, in.jf} {
				if l == lblNext || tramp[i][b] {
					continue
				}
				off := target(l) - (pos[i] + 1)
				if off < 0 {
					return nil, fmt.Errorf("seccomp: internal error: backward jump at %d", i)
				}
				if off > 255 {
					tramp[i][b] = true
					changed = true
				}
			}
		}
		if !changed {
			break
		}
	}
	out := make([]bpf.Instruction, 0, n+n/8)
	for i, in := range a.insns {
		switch in.op {
		case opLoad:
			out = append(out, bpf.LoadAbsolute{Off: in.k, Size: 4})
		case opAnd:
			out = append(out, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: in.k})
		case opRet:
			out = append(out, bpf.RetConstant{Val: in.k})
		case opJa:
			out = append(out, bpf.Jump{Skip: uint32(target(in.jt) - (pos[i] + 1))})
		default:
			nt := ntramp(i)
			skip := func(b int, l label) uint8 {
				switch {
				case tramp[i][b]:
					if b == 1 && tramp[i][0] {
						return 1
					}
					return 0
				case l == lblNext:
					return uint8(nt)
				default:
					return uint8(target(l) - (pos[i] + 1))
				}
			}
			var cond bpf.JumpTest
			switch in.op {
			case opJEq:
				cond = bpf.JumpEqual
			case opJGe:
				cond = bpf.JumpGreaterOrEqual
			case opJGt:
				cond = bpf.JumpGreaterThan
			case opJSet:
				cond = bpf.JumpBitsSet
			}
			out = append(out, bpf.JumpIf{Cond: cond, Val: in.k, SkipTrue: skip(0, in.jt), SkipFalse: skip(1, in.jf)})
			slot := 0
			for b, l := range [2]label{in.jt, in.jf} {
				if tramp[i][b] {
					slot++
					out = append(out, bpf.Jump{Skip: uint32(target(l) - (pos[i] + 1 + slot))})
				}
			}
		}
	}
	return out, nil
}
