//go:build amd64 || arm64

package seccomp

import (
	"fmt"
	"syscall"
	"testing"

	"golang.org/x/net/bpf"
)

// legacyAssemble is the assembler as it was before the argument rules were
// tested ahead of the search: the architecture check, then one balanced
// search over every syscall number with the argument blocks in its leaves.
// It is kept as the reference the current layout must agree with, decision
// for decision.
func legacyAssemble(t testing.TB, p *Profile, ar *archInfo) []bpf.RawInstruction {
	t.Helper()
	special, _, err := p.resolve(ar)
	if err != nil {
		t.Fatal(err)
	}
	runs := buildRuns(special, nil, ar.maxSyscall)
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
		t.Fatal(err)
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// manyRules is the default profile plus more argument rules than are
// chained, some on adjacent numbers and one on syscall 0, so that rules
// also end up in the search and chained numbers sit next to each other and
// at the start of the range.
func manyRules() *Profile {
	p := Default()
	for i, name := range []string{"read", "write", "open", "close", "fcntl", "dup", "dup2", "lseek", "mmap", "prctl", "getppid"} {
		if _, ok := native.syscalls()[name]; !ok {
			continue // open, dup2 do not exist on arm64
		}
		p.Rules = append(p.Rules, ArgRule{
			Syscall: name,
			Cases: []ArgCase{
				{When: []ArgCond{ArgEq(0, uint32(i)), ArgMaskedEq(1, 0xff, 0x12)}, Errno: syscall.Errno(i + 1)},
				{When: []ArgCond{ArgAnySet(2, 0x40000000)}, Errno: errEPERM},
			},
			Default: syscall.Errno(i % 2),
		})
	}
	return p
}

// probeNumbers returns the syscall numbers the equivalence test tries:
// every number up to two past the table, with and without the x32 bit, and
// the boundaries of the other ranges.
func probeNumbers(ar *archInfo) []uint32 {
	var nrs []uint32
	for n := uint32(0); n <= ar.maxSyscall+2; n++ {
		nrs = append(nrs, n, n|0x40000000, n|0x80000000)
	}
	return append(nrs, ar.maxSyscall+100, 0x3fffffff, 0x40000000|512, 0x40000000|547,
		0x7fffffff, 0xbfffffff, 0xc0000000, 0xfffffffe, 0xffffffff)
}

// probeArgs returns argument vectors for syscall nr: many for a number with
// an argument rule, two otherwise (the decision must not depend on them).
func probeArgs(ruled bool) [][6]uint64 {
	if !ruled {
		return [][6]uint64{{}, {^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}}
	}
	var out [][6]uint64
	for _, a0 := range interestingValues {
		for _, a1 := range interestingValues {
			for _, a2 := range []uint64{0, 1, 9, 0x300, 0x40000000, 0xffffffff, 0xffffffff00000000} {
				out = append(out,
					[6]uint64{uint64(a0), uint64(a1), a2},
					[6]uint64{0xffffffff00000000 | uint64(a0), 0x0000000100000000 | uint64(a1), a2, 7, 7, 7})
			}
		}
	}
	return out
}

// TestSameDecisionsAsLegacy proves the current layout changes no decision
// and no cacheability: for every syscall number of the table, the numbers
// above it, x32 numbers and the boundaries, on the native and the foreign
// architectures, and for the numbers with an argument rule a grid of
// argument values, the program returns exactly what the legacy one does,
// and the kernel's action cache can prove "always allowed" for exactly the
// same numbers.
func TestSameDecisionsAsLegacy(t *testing.T) {
	profiles := []struct {
		name string
		p    *Profile
	}{
		{"default", Default()},
		{"empty", &Profile{}},
		{"many rules", manyRules()},
	}
	arches := []uint32{native.auditArch, 0x40000003 /* i386 */, 0x40000028 /* arm */, 0xc000003e /* x86-64 */, 0xc00000b7 /* aarch64 */, 0x4000003e /* x86-64 without __AUDIT_ARCH_64BIT */, 0}
	for _, pc := range profiles {
		t.Run(pc.name, func(t *testing.T) {
			old := legacyAssemble(t, pc.p, &native)
			cur := mustAssemble(t, pc.p)
			ruled := map[uint32]bool{}
			for _, r := range pc.p.Rules {
				if n, ok := native.syscalls()[r.Syscall]; ok {
					ruled[n] = true
				}
			}
			compared := 0
			for _, arch := range arches {
				for _, nr := range probeNumbers(&native) {
					if got, want := constAllow(cur, nr, arch), constAllow(old, nr, arch); got != want {
						t.Errorf("nr %#x arch %#x: cacheable %v, legacy %v", nr, arch, got, want)
					}
					for _, args := range probeArgs(ruled[nr] && arch == native.auditArch) {
						d := seccompData{nr: nr, arch: arch, args: args}
						want := runProg(t, old, d)
						if got := runProg(t, cur, d); got != want {
							t.Fatalf("nr %#x arch %#x args %#x: %s, legacy %s", nr, arch, args, retName(got), retName(want))
						}
						if arch == native.auditArch {
							if ref := reference(pc.p, d); ref != want {
								t.Fatalf("nr %#x args %#x: legacy %s, reference %s", nr, args, retName(want), retName(ref))
							}
						}
						compared++
					}
				}
			}
			t.Logf("%d decisions compared; %d instructions, legacy %d", compared, len(cur), len(old))
		})
	}
}

// TestRulePaths checks the argument rules come first: right after the
// syscall number is loaded, one jeq per chained rule in the profile's order
// leads to its block; later rules are left to the search; and
// ioctl(TCGETS), the hottest syscall the kernel cannot cache, runs 8
// instructions.
func TestRulePaths(t *testing.T) {
	p := manyRules()
	prog := mustAssemble(t, p)
	ldNr := -1
	for pc, in := range prog {
		if in.Op == rawLdWAbs && in.K == offNr {
			ldNr = pc
			break
		}
	}
	if ldNr < 0 {
		t.Fatal("no load of the syscall number")
	}
	var names []string
	for _, r := range p.Rules {
		if _, ok := native.syscalls()[r.Syscall]; ok {
			names = append(names, r.Syscall)
		}
	}
	if len(names) <= maxChained {
		t.Fatalf("profile has %d rules, want more than %d", len(names), maxChained)
	}
	for i, name := range names[:maxChained] {
		nr := native.syscalls()[name]
		pc := ldNr + 1 + i
		if in := prog[pc]; in.Op != rawJeqK || in.K != nr || in.Jf != 0 {
			t.Errorf("instruction %d is %+v, want jeq #%d (%s) falling through", pc, in, nr, name)
		}
	}
	if in := prog[ldNr+1+maxChained]; in.Op != rawJgtK || in.K != native.maxSyscall {
		t.Errorf("instruction after the chain is %+v, want jgt #%d", in, native.maxSyscall)
	}
	for _, name := range names[maxChained:] {
		nr := native.syscalls()[name]
		for pc := ldNr + 1; pc <= ldNr+maxChained; pc++ {
			if prog[pc].K == nr {
				t.Errorf("%s (rule %d) is chained; only the first %d rules should be", name, pc-ldNr-1, maxChained)
			}
		}
	}
	def := mustAssemble(t, Default())
	ioctl := native.syscalls()["ioctl"]
	for _, cmd := range []uint64{0x5401, 0x5412, 0x541b, 0x541c} {
		if _, steps, _ := emulate(def, call("ioctl", ioctl, 1, cmd)); steps > 8 {
			t.Errorf("ioctl(%#x) runs %d instructions, want <= 8", cmd, steps)
		}
	}
}

func TestBuildRunsSkip(t *testing.T) {
	deny := verdict{ret: errnoRet(errEPERM)}
	enosys := verdict{ret: errnoRet(errENOSYS)}
	rule := verdict{rule: &ArgRule{Syscall: "x"}}
	cases := []struct {
		name    string
		special map[uint32]verdict
		skip    []uint32
		want    string
	}{
		{"none", nil, nil, "[0-9 allow]"},
		{"skip first", map[uint32]verdict{0: rule, 3: deny}, []uint32{0}, "[0-2 allow][3-3 deny][4-9 allow]"},
		{"skip first two", map[uint32]verdict{0: rule, 1: rule, 2: deny}, []uint32{0, 1}, "[0-2 deny][3-9 allow]"},
		{"skip joins deny", map[uint32]verdict{3: deny, 4: rule, 5: deny}, []uint32{4}, "[0-2 allow][3-5 deny][6-9 allow]"},
		{"skip between verdicts", map[uint32]verdict{3: deny, 4: rule, 5: enosys}, []uint32{4}, "[0-2 allow][3-4 deny][5-5 enosys][6-9 allow]"},
		{"skip after rule", map[uint32]verdict{3: rule, 4: rule}, []uint32{4}, "[0-2 allow][3-4 rule][5-9 allow]"},
		{"skip last", map[uint32]verdict{8: deny, 9: rule}, []uint32{9}, "[0-7 allow][8-9 deny]"},
		{"skip all", map[uint32]verdict{0: rule}, []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, "[0-9 allow]"},
		{"unskipped rule", map[uint32]verdict{4: rule}, nil, "[0-3 allow][4-4 rule][5-9 allow]"},
	}
	name := func(v verdict) string {
		switch {
		case v.rule != nil:
			return "rule"
		case v.ret == retAllow:
			return "allow"
		case v.ret == deny.ret:
			return "deny"
		case v.ret == enosys.ret:
			return "enosys"
		}
		return "?"
	}
	for _, c := range cases {
		skip := map[uint32]bool{}
		for _, n := range c.skip {
			skip[n] = true
		}
		got := ""
		for _, r := range buildRuns(c.special, skip, 9) {
			got += fmt.Sprintf("[%d-%d %s]", r.lo, r.hi, name(r.v))
		}
		if got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
}
