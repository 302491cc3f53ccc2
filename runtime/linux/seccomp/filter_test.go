//go:build amd64 || arm64

package seccomp

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/net/bpf"
)

// seccompData is struct seccomp_data.
type seccompData struct {
	nr   uint32
	arch uint32
	ip   uint64
	args [6]uint64
}

// bytes lays d out as the kernel does on a little-endian machine.
func (d *seccompData) bytes() []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], d.nr)
	binary.LittleEndian.PutUint32(b[4:], d.arch)
	binary.LittleEndian.PutUint64(b[8:], d.ip)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// Classic BPF opcodes this package may emit: exactly the ones the kernel's
// seccomp action cache emulates (seccomp_is_const_allow).
const (
	rawLdWAbs  = 0x20 // BPF_LD|BPF_W|BPF_ABS
	rawJa      = 0x05 // BPF_JMP|BPF_JA
	rawJeqK    = 0x15 // BPF_JMP|BPF_JEQ|BPF_K
	rawJgtK    = 0x25 // BPF_JMP|BPF_JGT|BPF_K
	rawJgeK    = 0x35 // BPF_JMP|BPF_JGE|BPF_K
	rawJsetK   = 0x45 // BPF_JMP|BPF_JSET|BPF_K
	rawAluAndK = 0x54 // BPF_ALU|BPF_AND|BPF_K
	rawRetK    = 0x06 // BPF_RET|BPF_K
)

// validate applies the static checks the kernel makes (bpf_check_classic and
// seccomp_check_filter) for the instructions above.
func validate(prog []bpf.RawInstruction) error {
	if len(prog) == 0 || len(prog) > maxInsns {
		return fmt.Errorf("length %d", len(prog))
	}
	for pc, in := range prog {
		switch in.Op {
		case rawLdWAbs:
			if in.K >= 64 || in.K&3 != 0 {
				return fmt.Errorf("pc %d: bad load offset %d", pc, in.K)
			}
		case rawJa:
			if uint64(pc)+1+uint64(in.K) >= uint64(len(prog)) {
				return fmt.Errorf("pc %d: ja out of range", pc)
			}
		case rawJeqK, rawJgtK, rawJgeK, rawJsetK:
			if pc+1+int(in.Jt) >= len(prog) || pc+1+int(in.Jf) >= len(prog) {
				return fmt.Errorf("pc %d: jump out of range", pc)
			}
		case rawAluAndK, rawRetK:
		default:
			return fmt.Errorf("pc %d: opcode %#x is not one the seccomp cache emulates", pc, in.Op)
		}
	}
	if prog[len(prog)-1].Op != rawRetK {
		return errors.New("last instruction is not ret")
	}
	return nil
}

// emulate runs prog on d like the kernel's classic BPF interpreter and
// returns the filter's result and how many instructions ran.
func emulate(prog []bpf.RawInstruction, d seccompData) (uint32, int, error) {
	data := d.bytes()
	var a uint32
	steps := 0
	for pc := 0; pc < len(prog); pc++ {
		steps++
		in := prog[pc]
		switch in.Op {
		case rawLdWAbs:
			if in.K >= 64 || in.K&3 != 0 {
				return 0, steps, fmt.Errorf("pc %d: bad load offset %d", pc, in.K)
			}
			a = binary.LittleEndian.Uint32(data[in.K:])
		case rawJa:
			pc += int(in.K)
		case rawJeqK, rawJgtK, rawJgeK, rawJsetK:
			var ok bool
			switch in.Op {
			case rawJeqK:
				ok = a == in.K
			case rawJgtK:
				ok = a > in.K
			case rawJgeK:
				ok = a >= in.K
			case rawJsetK:
				ok = a&in.K != 0
			}
			if ok {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case rawAluAndK:
			a &= in.K
		case rawRetK:
			return in.K, steps, nil
		default:
			return 0, steps, fmt.Errorf("pc %d: unexpected opcode %#x", pc, in.Op)
		}
	}
	return 0, steps, errors.New("ran off the end of the program")
}

// constAllow is the kernel's seccomp_is_const_allow: whether the kernel can
// cache "always allowed" for syscall nr on arch.
func constAllow(prog []bpf.RawInstruction, nr, arch uint32) bool {
	var reg uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Op {
		case rawLdWAbs:
			switch in.K {
			case offNr:
				reg = nr
			case offArch:
				reg = arch
			default:
				return false
			}
		case rawRetK:
			return in.K == retAllow
		case rawJa:
			pc += int(in.K)
		case rawJeqK, rawJgeK, rawJgtK, rawJsetK:
			var ok bool
			switch in.Op {
			case rawJeqK:
				ok = reg == in.K
			case rawJgeK:
				ok = reg >= in.K
			case rawJgtK:
				ok = reg > in.K
			case rawJsetK:
				ok = reg&in.K != 0
			}
			if ok {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case rawAluAndK:
			reg &= in.K
		default:
			return false
		}
	}
	return false
}

// reference evaluates a profile directly, without BPF: the meaning the
// assembled program must have.
func reference(p *Profile, d seccompData) uint32 {
	if d.arch != native.auditArch {
		return retKillProcess
	}
	if d.nr > native.maxSyscall {
		if native.x32Bit != 0 && d.nr != 0xffffffff && d.nr&native.x32Bit != 0 {
			return retKillProcess
		}
		return errnoRet(p.UnknownErrno)
	}
	name := ""
	for n, nr := range native.syscalls() {
		if nr == d.nr {
			name = n
		}
	}
	for _, n := range p.Deny {
		if n == name {
			return retErrno | 1
		}
	}
	if e, ok := p.Errno[name]; ok {
		return errnoRet(e)
	}
	for _, r := range p.Rules {
		if r.Syscall != name {
			continue
		}
	cases:
		for _, c := range r.Cases {
			for _, cond := range c.When {
				v := uint32(d.args[cond.Arg])
				var ok bool
				switch cond.Op {
				case CmpEq:
					ok = v == cond.Value
				case CmpMaskedEq:
					ok = v&cond.Mask == cond.Value
				case CmpAnySet:
					ok = v&cond.Value != 0
				}
				if !ok {
					continue cases
				}
			}
			return errnoRet(c.Errno)
		}
		return errnoRet(r.Default)
	}
	return retAllow
}

func mustAssemble(t testing.TB, p *Profile) []bpf.RawInstruction {
	t.Helper()
	prog, err := p.Assemble()
	if err != nil {
		t.Fatalf("Assemble: %v", err)
	}
	if err := validate(prog); err != nil {
		t.Fatalf("program does not pass the kernel's checks: %v", err)
	}
	return prog
}

func runProg(t testing.TB, prog []bpf.RawInstruction, d seccompData) uint32 {
	t.Helper()
	ret, _, err := emulate(prog, d)
	if err != nil {
		t.Fatalf("emulate(nr=%d): %v", d.nr, err)
	}
	return ret
}

func sysnum(t testing.TB, name string) (uint32, bool) {
	t.Helper()
	n, ok := native.syscalls()[name]
	return n, ok
}

func call(name string, n uint32, args ...uint64) seccompData {
	d := seccompData{nr: n, arch: native.auditArch}
	copy(d.args[:], args)
	return d
}

func retName(r uint32) string {
	switch {
	case r == retAllow:
		return "ALLOW"
	case r == retKillProcess:
		return "KILL_PROCESS"
	case r&0xffff0000 == retErrno:
		return "ERRNO(" + errnoName(syscall.Errno(r&0xffff)) + ")"
	}
	return fmt.Sprintf("%#x", r)
}

const (
	ePERM           = retErrno | 1
	eNOSYS          = retErrno | 38
	ePROTONOSUPPORT = retErrno | 93
	eAFNOSUPPORT    = retErrno | 97
)

// TestDefaultDenied checks every syscall the brief says must fail.
func TestDefaultDenied(t *testing.T) {
	prog := mustAssemble(t, Default())
	mustDeny := []string{
		"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
		"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
		"io_uring_setup", "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load",
		"init_module", "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at",
		"mount", "umount2", "pivot_root", "chroot", "setns", "unshare", "fsopen", "fsconfig",
		"fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr", "acct",
		"swapon", "swapoff", "reboot", "quotactl", "quotactl_fd", "syslog", "iopl", "ioperm",
		"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup", "lookup_dcookie",
		"modify_ldt", "uselib", "create_module", "get_kernel_syms", "query_module", "nfsservctl",
		"_sysctl", "move_pages", "migrate_pages", "fanotify_init",
	}
	x86only := map[string]bool{"iopl": true, "ioperm": true, "modify_ldt": true, "uselib": true,
		"create_module": true, "get_kernel_syms": true, "query_module": true, "_sysctl": true}
	for _, name := range mustDeny {
		n, ok := sysnum(t, name)
		if !ok {
			if native.name == "x86_64" || !x86only[name] {
				t.Errorf("%s: missing from the %s table", name, native.name)
			}
			continue
		}
		d := call(name, n, 0xffffffffffffffff, 1, 2, 3, 4, 5)
		if got := runProg(t, prog, d); got != ePERM {
			t.Errorf("%s (%d): got %s, want ERRNO(EPERM)", name, n, retName(got))
		}
		if constAllow(prog, n, native.auditArch) {
			t.Errorf("%s: kernel would cache it as allowed", name)
		}
	}
	if n, _ := sysnum(t, "open_tree_attr"); n != 467 {
		t.Errorf("open_tree_attr = %d, want 467", n)
	}
	n, _ := sysnum(t, "clone3")
	if got := runProg(t, prog, call("clone3", n)); got != eNOSYS {
		t.Errorf("clone3: got %s, want ERRNO(ENOSYS)", retName(got))
	}
}

// TestDefaultAllowed checks ordinary syscalls pass and are cacheable.
func TestDefaultAllowed(t *testing.T) {
	prog := mustAssemble(t, Default())
	const cloneThread = 0x00000100 | 0x00000200 | 0x00000400 | 0x00000800 | 0x00010000 | 0x00040000 | 0x00080000 | 0x00100000 | 0x00200000
	cases := []struct {
		name string
		args []uint64
	}{
		{"read", nil}, {"write", nil}, {"openat", nil}, {"mmap", nil}, {"futex", nil},
		{"close", nil}, {"execve", nil}, {"exit_group", nil}, {"rt_sigreturn", nil},
		{"getpid", nil}, {"wait4", nil}, {"seccomp", nil}, {"landlock_create_ruleset", nil},
		{"prctl", nil}, {"pidfd_open", nil}, {"rseq", nil},
		{"clone", []uint64{cloneThread}},
		{"clone", []uint64{0x11}}, // fork: SIGCHLD
		{"clone", []uint64{0xffffffff00000011}},
		{"socket", []uint64{2, 1, 0}},        // AF_INET, SOCK_STREAM
		{"socket", []uint64{2, 0x80801, 0}},  // AF_INET, SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC
		{"socket", []uint64{10, 2, 17}},      // AF_INET6, SOCK_DGRAM, UDP
		{"socket", []uint64{2, 2, 1}},        // AF_INET, SOCK_DGRAM, ICMP (ping socket)
		{"socket", []uint64{1, 1, 0}},        // AF_UNIX
		{"socket", []uint64{16, 3, 0}},       // AF_NETLINK, SOCK_RAW, NETLINK_ROUTE
		{"socket", []uint64{0x100000002, 1}}, // high bits ignored, as by the kernel: AF_INET
		{"socketpair", []uint64{1, 1, 0}},
		{"ioctl", []uint64{0, 0x5401}}, // TCGETS
		{"ioctl", []uint64{0, 0x5413}}, // TIOCGWINSZ
		{"ioctl", []uint64{0, 0x541b}}, // FIONREAD
		{"personality", []uint64{0xffffffff}},
		{"personality", []uint64{0xffffffffffffffff}},
		{"personality", []uint64{0}},
		{"personality", []uint64{8}},
		{"personality", []uint64{0x20000}},
		{"personality", []uint64{0x20008}},
	}
	argRules := map[string]bool{}
	for _, r := range Default().Rules {
		argRules[r.Syscall] = true
	}
	for _, c := range cases {
		n, ok := sysnum(t, c.name)
		if !ok {
			t.Fatalf("%s: not in table", c.name)
		}
		if got := runProg(t, prog, call(c.name, n, c.args...)); got != retAllow {
			t.Errorf("%s%#x: got %s, want ALLOW", c.name, c.args, retName(got))
		}
		if !argRules[c.name] && !constAllow(prog, n, native.auditArch) {
			t.Errorf("%s: kernel could not cache it as allowed", c.name)
		}
	}
}

func TestDefaultArgRules(t *testing.T) {
	prog := mustAssemble(t, Default())
	cases := []struct {
		name string
		args []uint64
		want uint32
	}{
		// clone: each namespace flag.
		{"clone", []uint64{0x00020000 | 0x11}, ePERM},
		{"clone", []uint64{0x02000000}, ePERM},
		{"clone", []uint64{0x04000000}, ePERM},
		{"clone", []uint64{0x08000000}, ePERM},
		{"clone", []uint64{0x10000000}, ePERM},
		{"clone", []uint64{0x20000000}, ePERM},
		{"clone", []uint64{0x40000000}, ePERM},
		{"clone", []uint64{0x00000080}, ePERM},
		{"clone", []uint64{0xffffffff10000000}, ePERM},
		{"clone", []uint64{0x1000000000000011}, retAllow}, // the kernel drops the high half
		// personality.
		{"personality", []uint64{0x0040000}, ePERM},  // ADDR_NO_RANDOMIZE
		{"personality", []uint64{0x0400000}, ePERM},  // READ_IMPLIES_EXEC
		{"personality", []uint64{0x0000001}, ePERM},  // PER_SVR4
		{"personality", []uint64{0xfffffffe}, ePERM}, // not the query
		{"personality", []uint64{0x0020009}, ePERM},
		// ioctl.
		{"ioctl", []uint64{0, 0x5412}, ePERM},
		{"ioctl", []uint64{0, 0x541c}, ePERM},
		{"ioctl", []uint64{0, 0xffffffff00005412}, ePERM},
		{"ioctl", []uint64{0, 0x0000000100005412}, ePERM},
		{"ioctl", []uint64{0, 0xffffffff0000541c}, ePERM},
		{"ioctl", []uint64{0x5412, 0x5401}, retAllow},
		// socket families.
		{"socket", []uint64{17, 3, 0x300}, eAFNOSUPPORT}, // AF_PACKET
		{"socket", []uint64{40, 1, 0}, eAFNOSUPPORT},     // AF_VSOCK
		{"socket", []uint64{38, 5, 0}, eAFNOSUPPORT},     // AF_ALG
		{"socket", []uint64{15, 3, 2}, eAFNOSUPPORT},     // AF_KEY
		{"socket", []uint64{31, 5, 1}, eAFNOSUPPORT},     // AF_BLUETOOTH
		{"socket", []uint64{0, 1, 0}, eAFNOSUPPORT},      // AF_UNSPEC
		{"socket", []uint64{0xffffffff00000011, 3, 0}, eAFNOSUPPORT},
		{"socket", []uint64{2, 3, 1}, ePERM},                      // AF_INET SOCK_RAW
		{"socket", []uint64{2, 0x80803, 1}, ePERM},                // ... |SOCK_NONBLOCK|SOCK_CLOEXEC
		{"socket", []uint64{2, 10, 0x300}, ePERM},                 // AF_INET SOCK_PACKET
		{"socket", []uint64{10, 3, 58}, ePERM},                    // AF_INET6 SOCK_RAW
		{"socket", []uint64{10, 0xffffffff00080003, 58}, ePERM},   // high bits
		{"socket", []uint64{10, 10, 0}, ePERM},                    // AF_INET6 SOCK_PACKET
		{"socket", []uint64{16, 3, 9}, ePROTONOSUPPORT},           // NETLINK_AUDIT
		{"socket", []uint64{16, 3, 15}, ePROTONOSUPPORT},          // NETLINK_KOBJECT_UEVENT
		{"socket", []uint64{16, 3, 0xffffffff00000000}, retAllow}, // NETLINK_ROUTE with junk
		{"socketpair", []uint64{2, 1, 0}, eAFNOSUPPORT},
		{"socketpair", []uint64{16, 3, 0}, eAFNOSUPPORT},
	}
	for _, c := range cases {
		n, _ := sysnum(t, c.name)
		if got := runProg(t, prog, call(c.name, n, c.args...)); got != c.want {
			t.Errorf("%s%#x: got %s, want %s", c.name, c.args, retName(got), retName(c.want))
		}
	}
}

func TestArchAndRange(t *testing.T) {
	prog := mustAssemble(t, Default())
	getpid, _ := sysnum(t, "getpid")
	for _, arch := range []uint32{0x40000003 /* i386 */, 0x40000028 /* arm */, 0xc000003e, 0xc00000b7, 0} {
		if arch == native.auditArch {
			continue
		}
		d := call("getpid", getpid)
		d.arch = arch
		if got := runProg(t, prog, d); got != retKillProcess {
			t.Errorf("arch %#x: got %s, want KILL_PROCESS", arch, retName(got))
		}
	}
	max := native.maxSyscall
	for _, n := range []uint32{max + 1, max + 100, 0x3fffffff, 0xffffffff} {
		if got := runProg(t, prog, call("", n)); got != eNOSYS {
			t.Errorf("nr %#x: got %s, want ERRNO(ENOSYS)", n, retName(got))
		}
	}
	x32 := []uint32{0x40000000, 0x40000000 | getpid, 0x40000000 | 512, 0x40000000 | 547, 0x7fffffff}
	for _, n := range x32 {
		want := retKillProcess
		if native.x32Bit == 0 {
			want = eNOSYS
		}
		if got := runProg(t, prog, call("", n)); got != want {
			t.Errorf("nr %#x: got %s, want %s", n, retName(got), retName(want))
		}
	}
	if got := runProg(t, prog, call("", max)); got != retAllow {
		t.Errorf("highest known nr %d: got %s, want ALLOW", max, retName(got))
	}
}

// interestingValues are argument values around the default rules' constants.
var interestingValues = []uint32{
	0, 1, 2, 3, 8, 9, 10, 15, 16, 17, 38, 40, 0x11, 0x13, 0x80, 0x803, 0x80003, 0x8000a,
	0x5401, 0x5412, 0x541c, 0x20000, 0x20008, 0x40000, 0x00020000, 0x02000000, 0x04000000,
	0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x003d0f00, 0xfffffffe, 0xffffffff,
}

// TestDifferential compares the program with the reference evaluator on
// every syscall number and many argument vectors.
func TestDifferential(t *testing.T) {
	checkDifferential(t, Default())
}

func checkDifferential(t *testing.T, p *Profile) {
	t.Helper()
	prog := mustAssemble(t, p)
	rng := rand.New(rand.NewSource(1))
	highs := []uint64{0, 0xffffffff, 1, 0x80000000}
	randArgs := func() [6]uint64 {
		var a [6]uint64
		for i := range a {
			switch rng.Intn(3) {
			case 0:
				a[i] = rng.Uint64()
			case 1:
				a[i] = uint64(interestingValues[rng.Intn(len(interestingValues))])
			default:
				a[i] = highs[rng.Intn(len(highs))]<<32 | uint64(interestingValues[rng.Intn(len(interestingValues))])
			}
		}
		return a
	}
	check := func(d seccompData) {
		got, _, err := emulate(prog, d)
		if err != nil {
			t.Fatalf("nr %d: %v", d.nr, err)
		}
		if want := reference(p, d); got != want {
			t.Fatalf("nr %d arch %#x args %#x: program %s, reference %s", d.nr, d.arch, d.args, retName(got), retName(want))
		}
	}
	ruled := map[uint32]bool{}
	for _, r := range p.Rules {
		if n, ok := native.syscalls()[r.Syscall]; ok {
			ruled[n] = true
		}
	}
	for n := uint32(0); n <= native.maxSyscall+2; n++ {
		reps := 4
		if ruled[n] {
			reps = 3000
		}
		for i := 0; i < reps; i++ {
			check(seccompData{nr: n, arch: native.auditArch, args: randArgs()})
		}
	}
	// Exhaustive over the interesting values for the first three
	// arguments of each rule.
	for n := range ruled {
		for _, a0 := range interestingValues {
			for _, a1 := range interestingValues {
				for _, a2 := range []uint32{0, 1, 9, 0x300, 0xffffffff} {
					check(seccompData{nr: n, arch: native.auditArch, args: [6]uint64{uint64(a0), 0xffffffff00000000 | uint64(a1), uint64(a2)}})
				}
			}
		}
	}
	for i := 0; i < 20000; i++ {
		d := seccompData{nr: rng.Uint32(), arch: native.auditArch, args: randArgs()}
		if i%4 == 0 {
			d.arch = rng.Uint32()
		}
		check(d)
	}
}

// TestCacheable checks the kernel can cache every ordinary allowed syscall,
// and that paths are short.
func TestCacheable(t *testing.T) {
	p := Default()
	prog := mustAssemble(t, p)
	ruled := map[uint32]string{}
	for _, r := range p.Rules {
		ruled[native.syscalls()[r.Syscall]] = r.Syscall
	}
	var allowed, maxSteps int
	for n := uint32(0); n <= native.maxSyscall; n++ {
		d := seccompData{nr: n, arch: native.auditArch}
		ret, steps, err := emulate(prog, d)
		if err != nil {
			t.Fatal(err)
		}
		if _, isRule := ruled[n]; isRule {
			if constAllow(prog, n, native.auditArch) {
				t.Errorf("nr %d (%s) loads arguments but looks cacheable", n, ruled[n])
			}
			continue
		}
		if steps > maxSteps {
			maxSteps = steps
		}
		if ret == retAllow {
			allowed++
			if !constAllow(prog, n, native.auditArch) {
				t.Errorf("nr %d is allowed but the kernel could not cache it", n)
			}
		}
	}
	runs, chained := buildRunsFor(t, p)
	depth := bits.Len(uint(runs - 1))
	// ld arch, jeq, ld nr, a jeq per chained rule, jgt, depth jge nodes, ret.
	if limit := 4 + chained + depth + 1; maxSteps > limit {
		t.Errorf("longest nr-only path is %d instructions, want <= %d (%d chained rules, balanced search over %d runs)", maxSteps, limit, chained, runs)
	}
	ioctl := native.syscalls()["ioctl"]
	_, steps, _ := emulate(prog, call("ioctl", ioctl, 1, 0x5401))
	t.Logf("%s: %d instructions, %d runs, %d of %d numbers cacheable as allowed, longest plain path %d, ioctl(TCGETS) path %d",
		native.name, len(prog), runs, allowed, native.maxSyscall+1, maxSteps, steps)
	// ld arch, jeq, ld nr, jeq ioctl, ld cmd, jeq TIOCSTI, jeq TIOCLINUX, ret.
	if steps > 8 {
		t.Errorf("ioctl(TCGETS) runs %d instructions, want <= 8", steps)
	}
	if constAllow(prog, native.syscalls()["getpid"], 0x40000003) {
		t.Error("i386 getpid must not be cacheable")
	}
}

// buildRunsFor returns how many runs the search over p's syscall numbers
// has and how many rules are tested before it.
func buildRunsFor(t *testing.T, p *Profile) (runs, chained int) {
	special, ruled, err := p.resolve(&native)
	if err != nil {
		t.Fatal(err)
	}
	first, skip := chain(ruled)
	return len(buildRuns(special, skip, native.maxSyscall)), len(first)
}

// TestTrampolines forces conditional jumps farther than 255 instructions.
func TestTrampolines(t *testing.T) {
	p := Default()
	big := ArgRule{Syscall: "fcntl", Default: 0}
	for i := 0; i < 400; i++ {
		big.Cases = append(big.Cases, ArgCase{
			When:  []ArgCond{ArgEq(1, uint32(1000+i)), ArgMaskedEq(2, 0xff, uint32(i%256))},
			Errno: syscall.Errno(1 + i%200),
		})
	}
	big2 := ArgRule{Syscall: "read", Default: 0}
	for i := 0; i < 120; i++ {
		big2.Cases = append(big2.Cases, ArgCase{When: []ArgCond{ArgAnySet(0, 1<<(i%32)), ArgEq(2, uint32(i))}, Errno: 5})
	}
	p.Rules = append(p.Rules, big, big2)
	prog := mustAssemble(t, p)
	ja := 0
	for _, in := range prog {
		if in.Op == rawJa {
			ja++
		}
	}
	if ja == 0 {
		t.Fatal("expected trampolines in a program with long blocks")
	}
	t.Logf("%d instructions, %d trampolines", len(prog), ja)
	fcntl := native.syscalls()["fcntl"]
	for i := 0; i < 400; i++ {
		d := call("fcntl", fcntl, 0, uint64(1000+i), uint64(0xab00|i%256))
		if got, want := runProg(t, prog, d), errnoRet(syscall.Errno(1+i%200)); got != want {
			t.Fatalf("fcntl case %d: got %s, want %s", i, retName(got), retName(want))
		}
	}
	checkDifferential(t, p)
	// Ordinary syscalls stay cacheable despite the trampolines.
	if !constAllow(prog, native.syscalls()["write"], native.auditArch) {
		t.Error("write not cacheable")
	}
}

func TestTooLarge(t *testing.T) {
	p := Default()
	r := ArgRule{Syscall: "fcntl"}
	for i := 0; i < 2100; i++ {
		r.Cases = append(r.Cases, ArgCase{When: []ArgCond{ArgEq(1, uint32(i))}, Errno: 1})
	}
	p.Rules = append(p.Rules, r)
	_, err := p.Assemble()
	if err == nil || !strings.Contains(err.Error(), "at most 4096") {
		t.Fatalf("got %v, want a length error", err)
	}
}

func TestProfileErrors(t *testing.T) {
	cases := []struct {
		name string
		p    Profile
		want string
	}{
		{"unknown", Profile{Deny: []string{"no_such_syscall"}}, "unknown syscall"},
		{"conflict", Profile{Deny: []string{"ptrace"}, Errno: map[string]syscall.Errno{"ptrace": 38}}, "both"},
		{"rule conflict", Profile{Deny: []string{"ioctl"}, Rules: []ArgRule{{Syscall: "ioctl"}}}, "both"},
		{"errno zero", Profile{Errno: map[string]syscall.Errno{"ptrace": 0}}, "out of range"},
		{"errno big", Profile{Errno: map[string]syscall.Errno{"ptrace": 4096}}, "out of range"},
		{"unknown errno", Profile{UnknownErrno: 5000}, "UnknownErrno"},
		{"arg index", Profile{Rules: []ArgRule{{Syscall: "ioctl", Cases: []ArgCase{{When: []ArgCond{ArgEq(6, 1)}}}}}}, "argument index"},
		{"anyset zero", Profile{Rules: []ArgRule{{Syscall: "ioctl", Cases: []ArgCase{{When: []ArgCond{ArgAnySet(0, 0)}}}}}}, "never match"},
		{"mask", Profile{Rules: []ArgRule{{Syscall: "ioctl", Cases: []ArgCase{{When: []ArgCond{ArgMaskedEq(0, 0xf, 0x10)}}}}}}, "outside mask"},
		{"op", Profile{Rules: []ArgRule{{Syscall: "ioctl", Cases: []ArgCase{{When: []ArgCond{{Arg: 0, Op: 9}}}}}}}, "unknown comparison"},
		{"case errno", Profile{Rules: []ArgRule{{Syscall: "ioctl", Cases: []ArgCase{{Errno: 70000}}}}}, "out of range"},
	}
	for _, c := range cases {
		_, err := c.p.Assemble()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", c.name, err, c.want)
		}
	}
	// Duplicates within Deny are harmless; foreign names are skipped.
	p := Profile{Deny: []string{"ptrace", "ptrace"}}
	p.Deny = append(p.Deny, native.foreign...)
	if _, err := p.Assemble(); err != nil {
		t.Errorf("duplicates and foreign names: %v", err)
	}
	// An empty profile allows everything but still guards the ABI.
	prog := mustAssemble(t, &Profile{})
	if got := runProg(t, prog, call("", native.syscalls()["ptrace"])); got != retAllow {
		t.Errorf("empty profile: ptrace %s", retName(got))
	}
	if got := runProg(t, prog, call("", native.maxSyscall+1)); got != retAllow {
		t.Errorf("empty profile: unknown nr %s", retName(got))
	}
	d := call("", 0)
	d.arch = 0x40000003
	if got := runProg(t, prog, d); got != retKillProcess {
		t.Errorf("empty profile: foreign arch %s", retName(got))
	}
}

func TestDefaultIsFresh(t *testing.T) {
	a := Default()
	a.Deny[0] = "read"
	a.Errno["clone3"] = 1
	a.Rules[0].Cases = nil
	b := Default()
	if b.Deny[0] == "read" || b.Errno["clone3"] != 38 || len(b.Rules[0].Cases) == 0 {
		t.Fatal("Default shares state between calls")
	}
}

func TestSummary(t *testing.T) {
	s := Default().Summary()
	if s.Error != "" || s.Instructions == 0 {
		t.Fatalf("summary error %q, %d instructions", s.Error, s.Instructions)
	}
	if s.Denied["ptrace"] != "EPERM" || s.Denied["clone3"] != "ENOSYS" || s.UnknownSyscalls != "ENOSYS" {
		t.Errorf("unexpected summary: %+v", s)
	}
	if s.DeniedCount != len(s.Denied) || s.DeniedCount < 50 {
		t.Errorf("denied count %d", s.DeniedCount)
	}
	for _, c := range []string{"io_uring", "keyrings", "mounts", "namespaces", "terminal-injection", "socket-families", "personality"} {
		i := sort.SearchStrings(s.Classes, c)
		if i == len(s.Classes) || s.Classes[i] != c {
			t.Errorf("class %q missing from %v", c, s.Classes)
		}
	}
	for _, c := range s.Classes {
		if c == "other" {
			t.Errorf("a default syscall has no class")
		}
	}
	if (native.x32Bit != 0) != (s.X32 == "kill_process") {
		t.Errorf("x32 = %q", s.X32)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("summary: %s", b)
	bad := Profile{Deny: []string{"nope"}}
	if s := bad.Summary(); s.Error == "" || s.Instructions != 0 {
		t.Errorf("summary of a bad profile: %+v", s)
	}
}

// TestTableSane checks the syscall table for the architecture.
func TestTableSane(t *testing.T) {
	seen := map[uint32]string{}
	var max uint32
	for name, n := range native.syscalls() {
		if other, dup := seen[n]; dup {
			t.Errorf("%s and %s share number %d", name, other, n)
		}
		seen[n] = name
		if n > max {
			max = n
		}
	}
	if max != native.maxSyscall {
		t.Errorf("maxSyscall %d, table max %d", native.maxSyscall, max)
	}
	for _, f := range native.foreign {
		if _, ok := native.syscalls()[f]; ok {
			t.Errorf("%s is both native and foreign", f)
		}
	}
	for name := range syscallClass {
		_, ok := native.syscalls()[name]
		foreign := false
		for _, f := range native.foreign {
			foreign = foreign || f == name
		}
		if !ok && !foreign {
			t.Errorf("class map names unknown syscall %q", name)
		}
	}
}
