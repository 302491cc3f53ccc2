package output

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// jsonStringOf encodes the pieces with a JSONString of a small buffer.
func jsonStringOf(t *testing.T, pieces [][]byte) string {
	t.Helper()
	var out bytes.Buffer
	j := NewJSONString(&out, 64)
	for _, p := range pieces {
		if n, err := j.Write(p); n != len(p) || err != nil {
			t.Fatalf("write: %d %v", n, err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestJSONStringAsEncodingJSON: whatever the bytes and however they are
// split, the encoding is byte for byte what encoding/json writes for
// their concatenation.
func TestJSONStringAsEncodingJSON(t *testing.T) {
	alphabet := []string{"a", "Z", " ", "\x00", "\x1f", "\x7f", "\n", "\r", "\t", "\b", "\f", `"`, `\`, "<", ">", "&",
		"é", "€", "😀", "\u2028", "\u2029", "\xe2", "\x82", "\xac", "\xf0\x9f", "\x80", "\xff", "\xc0\xaf", "\xed\xa0\x80"}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 3000 {
		var sb strings.Builder
		for range rng.IntN(200) {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		s := []byte(sb.String())
		var pieces [][]byte
		for rest := s; len(rest) > 0; {
			k := min(len(rest), rng.IntN(9))
			pieces = append(pieces, rest[:k])
			rest = rest[k:]
		}
		want, _ := json.Marshal(string(s))
		if got := jsonStringOf(t, pieces); got != string(want) {
			t.Fatalf("round %d, %q in %d pieces:\n got %s\nwant %s", round, s, len(pieces), got, want)
		}
	}
	// Long runs go through the buffer in many flushes.
	long := bytes.Repeat([]byte("flood\x00<é>\n"), 10000)
	want, _ := json.Marshal(string(long))
	if got := jsonStringOf(t, [][]byte{long[:33333], long[33333:]}); got != string(want) {
		t.Fatal("a long string differs")
	}
	if got := jsonStringOf(t, nil); got != `""` {
		t.Fatalf("empty: %s", got)
	}
}

// TestCaptureWriteKept: WriteKept writes what String returns.
func TestCaptureWriteKept(t *testing.T) {
	for _, n := range []int{0, 10, 100, 1000, 5000} {
		c := NewCapture(1000)
		for i := range n {
			c.Write([]byte{byte('a' + i%26)})
		}
		var b bytes.Buffer
		if err := c.WriteKept(&b); err != nil || b.String() != c.String() || c.KeptLen() != b.Len() {
			t.Fatalf("%d bytes: WriteKept %q (%d), String %q", n, b.String(), c.KeptLen(), c.String())
		}
	}
}
