package output

import (
	"bytes"
	"context"
	"io"
	"testing"
)

func TestBudgetLimits(t *testing.T) {
	b := NewBudget(100, 60)
	a1, a2, b1 := b.Account("a"), b.Account("a"), b.Account("b")
	if !a1.Grow(50) || a2.Grow(20) || !a2.Grow(10) || !b1.Grow(40) || b1.Grow(1) {
		t.Fatalf("grants: held %d, a %d, b %d", b.Held(), b.TenantHeld("a"), b.TenantHeld("b"))
	}
	a1.Close()
	a1.Close()
	if b.Held() != 50 || b.TenantHeld("a") != 10 || b.Peak() != 100 || b.Refused() != 2 {
		t.Fatalf("held %d a %d peak %d refused %d", b.Held(), b.TenantHeld("a"), b.Peak(), b.Refused())
	}
	var nilAcct *Account
	if !nilAcct.Grow(1 << 40) {
		t.Fatal("a nil account refused")
	}
}

// A capture the budget starves keeps what it holds, spills the kept bytes
// and the whole rest of the stream, and gives its memory back on Release.
func TestCaptureStarved(t *testing.T) {
	b := NewBudget(1<<20, 1<<20)
	other := b.Account("t")
	other.Grow(1<<20 - 10000) // leaves 10000 bytes
	c := NewCapture(100000)
	var spill bytes.Buffer
	c.SetBudget(b.Account("t"), func() io.Writer { return &spill })
	stream := bytes.Repeat([]byte("0123456789"), 50000) // 500000 bytes
	for i := 0; i < len(stream); i += 3000 {
		c.Write(stream[i:min(i+3000, len(stream))])
	}
	if !c.Starved() || !c.Truncated() || c.Total() != int64(len(stream)) {
		t.Fatalf("starved %v truncated %v total %d", c.Starved(), c.Truncated(), c.Total())
	}
	if held := b.Held() - other.Held(); held > 10000 || int64(c.Held()) != held {
		t.Fatalf("capture holds %d (budget says %d), over the 10000 left", c.Held(), held)
	}
	// The spill has every byte: what was kept when it began, then the rest.
	if spill.Len() != len(stream) || !bytes.Equal(spill.Bytes(), stream) {
		t.Fatalf("spill of %d bytes, want the whole %d-byte stream", spill.Len(), len(stream))
	}
	s := c.Release()
	if !bytes.HasPrefix([]byte(s), stream[:100]) || b.Held() != other.Held() || c.Held() != 0 {
		t.Fatalf("after release: held %d, text %.40q", b.Held(), s)
	}
}

// A log over its budget drops its oldest chunks, then new ones when it has
// nothing left; Off numbers bytes so a reader can count what it lost.
func TestLogBudget(t *testing.T) {
	b := NewBudget(10, 10)
	l := NewLog(1000)
	l.SetBudget(b.Account("t"))
	w := l.Writer("stdout")
	for _, s := range []string{"aaaa", "bbbb", "cccc", "dddddddddddd", "ee"} {
		w.Write([]byte(s))
	}
	chunks, _, lost, _ := readNow(l, 0)
	if !lost || len(chunks) != 1 || string(chunks[0].Data) != "ee" || chunks[0].Off != 24 || chunks[0].Seq != 5 {
		t.Fatalf("lost %v chunks %+v", lost, chunks)
	}
	// The chunk is charged what its copy takes (its size class).
	if b.Held() != int64(cap(chunks[0].Data)) || l.LostBefore() != 24 {
		t.Fatalf("held %d lost before %d", b.Held(), l.LostBefore())
	}
	l.Release()
	if b.Held() != 0 || l.Size() != 0 {
		t.Fatalf("held %d after release", b.Held())
	}
}

func readNow(l *Log, after uint64) ([]Chunk, bool, bool, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return l.Read(ctx, after)
}
