package seccomp

import (
	"reflect"
	"testing"

	"golang.org/x/net/bpf"
)

func TestCodecRoundTrip(t *testing.T) {
	prog := []bpf.RawInstruction{{Op: 0x20, Jt: 1, Jf: 2, K: 4}, {Op: 0x06, K: 0x7fff0000}}
	got, err := Decode(Encode(prog))
	if err != nil || !reflect.DeepEqual(got, prog) {
		t.Fatalf("got %v %v", got, err)
	}
	for _, bad := range [][]byte{nil, make([]byte, 7), make([]byte, 8*(maxProgram+1))} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("%d bytes accepted", len(bad))
		}
	}
}
