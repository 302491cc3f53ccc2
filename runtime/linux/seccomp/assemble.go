package seccomp

import (
	"errors"
	"fmt"
	"sort"
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

// maxChained is how many argument rules are tested one by one, in the
// profile's order, before the search over the other syscall numbers. The
// k-th chained rule is reached after k comparisons, where the search takes
// one more than its depth (7 for the default profile's 57 runs), and each
// adds one instruction to every path into the search: past about 8 a
// chain no longer pays.
const maxChained = 8

// chain splits off the rules tested before the search: the first
// maxChained of ruled, and the same numbers as a set for buildRuns.
func chain(ruled []uint32) (chained []uint32, skip map[uint32]bool) {
	chained = ruled[:min(len(ruled), maxChained)]
	skip = make(map[uint32]bool, len(chained))
	for _, nr := range chained {
		skip[nr] = true
	}
	return chained, skip
}

func (p *Profile) assemble(ar *archInfo) ([]bpf.RawInstruction, error) {
	if ar.syscalls == nil {
		return nil, fmt.Errorf("seccomp: architecture %s: %w", ar.name, errors.ErrUnsupported)
	}
	if err := checkErrno(p.UnknownErrno, true); err != nil {
		return nil, fmt.Errorf("seccomp: UnknownErrno: %w", err)
	}
	special, ruled, err := p.resolve(ar)
	if err != nil {
		return nil, err
	}
	chained, skip := chain(ruled)
	runs := buildRuns(special, skip, ar.maxSyscall)

	a := &assembler{}
	kill := a.newLabel()
	high := a.newLabel()
	search := a.newLabel()
	a.emit(sinsn{op: opLoad, k: offArch})
	a.emit(sinsn{op: opJEq, k: ar.auditArch, jt: lblNext, jf: kill})
	a.emit(sinsn{op: opLoad, k: offNr})
	// The syscalls decided by their arguments can never be cached by the
	// kernel, so every call of theirs runs the filter: test them first,
	// in the profile's order, and put their argument blocks right after.
	blocks := make([]label, len(chained))
	for i, nr := range chained {
		blocks[i] = a.newLabel()
		a.emit(sinsn{op: opJEq, k: nr, jt: blocks[i], jf: lblNext})
	}
	a.emit(sinsn{op: opJGt, k: ar.maxSyscall, jt: high, jf: search})
	for i, nr := range chained {
		a.bind(blocks[i])
		a.rule(special[nr].rule)
	}
	a.bind(search)
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

// resolve maps the profile's syscall names to numbers and verdicts. ruled
// lists the numbers that have an argument rule, in the order of p.Rules.
func (p *Profile) resolve(ar *archInfo) (special map[uint32]verdict, ruled []uint32, err error) {
	foreign := make(map[string]bool, len(ar.foreign))
	for _, n := range ar.foreign {
		foreign[n] = true
	}
	owner := map[string]string{}
	special = map[uint32]verdict{}
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
		if v.rule != nil {
			ruled = append(ruled, nr)
		}
		return nil
	}
	for _, name := range p.Deny {
		if err := add(name, "Deny", verdict{ret: errnoRet(errEPERM)}); err != nil {
			return nil, nil, err
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
			return nil, nil, fmt.Errorf("seccomp: Errno[%q]: %w", name, err)
		}
		if err := add(name, "Errno", verdict{ret: errnoRet(e)}); err != nil {
			return nil, nil, err
		}
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		if err := r.check(); err != nil {
			return nil, nil, err
		}
		if err := add(r.Syscall, "Rules", verdict{rule: r}); err != nil {
			return nil, nil, err
		}
	}
	return special, ruled, nil
}

// errnoRet is the filter return value for an errno, ALLOW for zero.
func errnoRet(e syscall.Errno) uint32 {
	if e == 0 {
		return retAllow
	}
	return retErrno | uint32(e)
}

// buildRuns partitions [0, max] into maximal runs of numbers with the same
// verdict. Numbers with a rule always form a run of their own. Numbers in
// skip are decided before the search and never reach it: each joins the run
// before it (the first run when there is none), so it costs the search
// nothing.
func buildRuns(special map[uint32]verdict, skip map[uint32]bool, max uint32) []run {
	nrs := make([]uint32, 0, len(special)+len(skip))
	for nr := range special {
		if !skip[nr] {
			nrs = append(nrs, nr)
		}
	}
	for nr := range skip {
		nrs = append(nrs, nr)
	}
	sort.Slice(nrs, func(i, j int) bool { return nrs[i] < nrs[j] })
	allow := verdict{ret: retAllow}
	var runs []run
	push := func(lo, hi uint32, v verdict) {
		n := len(runs)
		if n == 0 {
			lo = 0 // numbers skipped before the first run belong to it
		} else if last := &runs[n-1]; last.hi+1 == lo && last.v.rule == nil && v.rule == nil && last.v.ret == v.ret {
			last.hi = hi
			return
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
		next = nr + 1
		if skip[nr] {
			if n := len(runs); n > 0 {
				runs[n-1].hi = nr
			}
			continue
		}
		push(nr, nr, special[nr])
	}
	switch {
	case next <= max:
		push(next, max, allow)
	case len(runs) == 0: // every number was skipped
		runs = append(runs, run{lo: 0, hi: max, v: allow})
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
