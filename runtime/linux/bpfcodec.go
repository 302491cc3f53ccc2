package linux

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
)

// encodeBPF serialises a seccomp program in the kernel's sock_filter
// layout (code u16, jt u8, jf u8, k u32; little endian on the architectures
// moat supports) so the host can assemble it while the init boots.
func encodeBPF(prog []bpf.RawInstruction) []byte {
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = binary.LittleEndian.AppendUint16(b, in.Op)
		b = append(b, in.Jt, in.Jf)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	return b
}

// decodeBPF is the inverse of encodeBPF.
func decodeBPF(b []byte) ([]bpf.RawInstruction, error) {
	if len(b) == 0 || len(b)%8 != 0 || len(b)/8 > 4096 {
		return nil, fmt.Errorf("seccomp program of %d bytes is malformed", len(b))
	}
	prog := make([]bpf.RawInstruction, len(b)/8)
	for i := range prog {
		o := b[8*i:]
		prog[i] = bpf.RawInstruction{Op: binary.LittleEndian.Uint16(o), Jt: o[2], Jf: o[3], K: binary.LittleEndian.Uint32(o[4:])}
	}
	return prog, nil
}
