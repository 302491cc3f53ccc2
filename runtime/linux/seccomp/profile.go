package seccomp

import (
	"fmt"
	"sort"
	"strconv"
	"syscall"
)

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
	// Rules restrict syscalls by their argument values. The kernel cannot
	// cache the decision for these syscalls, so the filter runs on every
	// call of theirs: the first eight are tested one by one, in this
	// order, ahead of the search over the other syscall numbers. List the
	// most frequently called first.
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
