package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
)

// maxProgram is the kernel's limit on a classic BPF program's length
// (BPF_MAXINSNS).
const maxProgram = 4096

// Encode serialises a seccomp program in the kernel's sock_filter layout
// (code u16, jt u8, jf u8, k u32; little endian on the architectures moat
// supports): the form the host assembles while the init boots and sends
// it in the setup message.
func Encode(prog []bpf.RawInstruction) []byte {
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = binary.LittleEndian.AppendUint16(b, in.Op)
		b = append(b, in.Jt, in.Jf)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	return b
}

// Decode is the inverse of Encode. It refuses an empty program, a length
// that is not a whole number of instructions, and one longer than the
// kernel accepts.
func Decode(b []byte) ([]bpf.RawInstruction, error) {
	if len(b) == 0 || len(b)%8 != 0 || len(b)/8 > maxProgram {
		return nil, fmt.Errorf("seccomp program of %d bytes is malformed", len(b))
	}
	prog := make([]bpf.RawInstruction, len(b)/8)
	for i := range prog {
		o := b[8*i:]
		prog[i] = bpf.RawInstruction{Op: binary.LittleEndian.Uint16(o), Jt: o[2], Jf: o[3], K: binary.LittleEndian.Uint32(o[4:])}
	}
	return prog, nil
}
