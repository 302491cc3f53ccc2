package workflow

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// chainDoc is a sequential chain of n steps, each starting from the one
// before it.
func chainDoc(n int) []byte {
	var b strings.Builder
	b.WriteString("steps:\n  - {id: s0, sh: x}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  - {id: s%d, sh: x, from: s%d}\n", i, i-1)
	}
	return []byte(b.String())
}

// fanDoc is a parallel group of n steps followed by a parallel group of m
// steps that each need the first group by name and read the outputs of
// its first step.
func fanDoc(n, m int) []byte {
	var b strings.Builder
	b.WriteString("steps:\n  - group: wide\n    mode: parallel\n    steps:\n")
	for i := range n {
		fmt.Fprintf(&b, "      - {id: w%d, sh: x, outputs: [/o]}\n", i)
	}
	b.WriteString("  - group: fan\n    mode: parallel\n    steps:\n")
	for i := range m {
		fmt.Fprintf(&b, "      - {id: f%d, sh: x, needs: [wide], inputs: {w0: /in}, from: w%d}\n", i, i%n)
	}
	return []byte(b.String())
}

func TestLimits(t *testing.T) {
	if _, err := Compile(chainDoc(MaxItems), Options{}); err != nil {
		t.Fatalf("a chain of %d steps: %v", MaxItems, err)
	}
	_, err := Compile(chainDoc(MaxItems+1), Options{})
	if errs := errorsOf(t, err); len(errs) != 1 || !strings.Contains(errs[0].Msg, "at most 5000") {
		t.Errorf("a chain of %d steps: %v", MaxItems+1, err)
	}
	// 1100 steps that each wait for a group of 1000: over the bound of
	// waits in all.
	_, err = Compile(fanDoc(1000, 1100), Options{})
	if errs := errorsOf(t, err); len(errs) != 1 || !strings.Contains(errs[0].Msg, "wait for more than") {
		t.Errorf("fan of 1000x1100: %v", err)
	}
	if _, err := Compile(fanDoc(1000, 900), Options{}); err != nil {
		t.Errorf("fan of 1000x900: %v", err)
	}
}

func BenchmarkCompileChain(b *testing.B) {
	data := chainDoc(MaxItems)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Compile(data, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileFan(b *testing.B) {
	data := fanDoc(1000, 900)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Compile(data, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileCI(b *testing.B) {
	data, err := os.ReadFile("testdata/ci.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Compile(data, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
