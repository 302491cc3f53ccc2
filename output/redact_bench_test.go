package output

import (
	"io"
	"math/rand/v2"
	"testing"
)

func benchText(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	const alpha = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n-_./:"
	b := make([]byte, n)
	for i := range b {
		b[i] = alpha[r.IntN(len(alpha))]
	}
	return b
}

func benchRedactor(b *testing.B, secrets map[string][]byte) {
	chunk := benchText(32 << 10)
	b.SetBytes(int64(len(chunk)))
	w := NewRedactor(io.Discard, secrets)
	for b.Loop() {
		w.Write(chunk)
	}
}

// BenchmarkRedactor1: one secret (three forms) in random text that never holds it.
func BenchmarkRedactor1(b *testing.B) {
	benchRedactor(b, map[string][]byte{"T": []byte("ghp_Secret-Token-0123456789abcdef\n")})
}

// BenchmarkRedactor4: four secrets, none in the text.
func BenchmarkRedactor4(b *testing.B) {
	benchRedactor(b, map[string][]byte{"A": []byte("ghp_Secret-Token-0123456789abcdef\n"), "B": []byte("line one\nline two\n"), "C": []byte("4242"), "D": []byte("xoxb-Slack-Token-zzzz")})
}

// BenchmarkFold: the ASCII lower-casing every byte goes through.
func BenchmarkFold(b *testing.B) {
	chunk := benchText(32 << 10)
	buf := make([]byte, len(chunk))
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		copy(buf, chunk)
		foldASCII(buf)
	}
}

// BenchmarkRedactorDense: output full of one secret (one in every 120
// bytes) while three others never occur.
func BenchmarkRedactorDense(b *testing.B) {
	t := benchText(32 << 10)
	var chunk []byte
	for i := 0; len(chunk) < 32<<10; i += 100 {
		chunk = append(chunk, t[i:i+100]...)
		chunk = append(chunk, "xoxb-Slack-Token-zzzz"...)
	}
	b.SetBytes(int64(len(chunk)))
	w := NewRedactor(io.Discard, map[string][]byte{"A": []byte("ghp_Secret-Token-0123456789abcdef\n"), "B": []byte("line one\nline two\n"), "C": []byte("4242"), "D": []byte("xoxb-Slack-Token-zzzz")})
	for b.Loop() {
		w.Write(chunk)
	}
}
