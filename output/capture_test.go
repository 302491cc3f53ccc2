package output

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

func TestCaptureFits(t *testing.T) {
	c := NewCapture(10)
	c.Write([]byte("abc"))
	c.Write([]byte("defghij"))
	if got := c.String(); got != "abcdefghij" || c.Truncated() || c.Total() != 10 {
		t.Fatalf("got %q truncated=%v total=%d", got, c.Truncated(), c.Total())
	}
}

// TestCaptureHeadTail writes the same stream in chunks of every size and
// checks head, tail, marker and count against a reference.
func TestCaptureHeadTail(t *testing.T) {
	var stream []byte
	for i := range 1000 {
		stream = append(stream, byte('a'+i%26))
	}
	for _, limit := range []int{1, 2, 7, 10, 999, 1000} {
		for chunk := 1; chunk <= 64; chunk *= 2 {
			c := NewCapture(limit)
			for i := 0; i < len(stream); i += chunk {
				c.Write(stream[i:min(i+chunk, len(stream))])
			}
			h, tl := limit/2, limit-limit/2
			want := string(stream[:h]) + string(stream[len(stream)-tl:])
			if len(stream) > limit {
				want = string(stream[:h]) + "\n[... " + itoa(len(stream)-limit) + " bytes truncated ...]\n" + string(stream[len(stream)-tl:])
			}
			if got := c.String(); got != want {
				t.Fatalf("limit %d chunk %d: got %q want %q", limit, chunk, got, want)
			}
			if c.Total() != int64(len(stream)) || c.Truncated() != (len(stream) > limit) {
				t.Fatalf("limit %d: total %d truncated %v", limit, c.Total(), c.Truncated())
			}
		}
	}
}

// TestCaptureMemoryBound: a flood never grows the buffers past the limit.
func TestCaptureMemoryBound(t *testing.T) {
	c := NewCapture(1000)
	buf := bytes.Repeat([]byte("x"), 4096)
	for range 1000 {
		c.Write(buf)
	}
	if cap(c.head)+cap(c.tail) > 2*1000 {
		t.Fatalf("buffers grew to %d", cap(c.head)+cap(c.tail))
	}
	if !strings.Contains(c.String(), "[... 4095000 bytes truncated ...]") {
		t.Fatal("marker missing")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
