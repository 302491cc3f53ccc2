// Package output captures a process's output stream within a fixed memory
// budget: past the limit it keeps the first half and the last half and
// counts what it dropped, so a flood can neither exhaust memory nor hide
// how the stream ended.
package output

import (
	"io"
	"strconv"
	"strings"
	"sync"
)

// DefaultLimit is the cap of a captured stream in bytes.
const DefaultLimit = 2_000_000

// Capture is an io.Writer that keeps at most Limit bytes: the first half
// of the stream and its last half. It is safe for concurrent use.
//
// A Capture may also be charged to an Account of a Budget (SetBudget):
// its buffers then grow only as far as the account allows. When the
// budget refuses, the capture keeps what it holds (its head, and a tail
// ring of the size it had reached, which goes on taking the newest
// bytes) and hands everything it has and everything that follows to a
// spill writer, if it has one.
type Capture struct {
	mu    sync.Mutex
	limit int
	hcap  int // the head's cap: limit/2, less once starved
	tcap  int // the tail ring's size: limit-limit/2, less once starved
	head  []byte
	tail  []byte // ring buffer of the last tcap bytes
	pos   int    // next write position in tail once it is full
	full  bool
	total int64

	acct     *Account
	spillTo  func() io.Writer
	spill    io.Writer
	starved  bool
	released bool
}

// NewCapture returns a Capture of limit bytes (DefaultLimit if limit <= 0).
func NewCapture(limit int) *Capture {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &Capture{limit: limit, hcap: limit / 2, tcap: limit - limit/2}
}

// SetBudget charges the capture's buffers to acct. spill, if not nil, is
// called once, when the budget first refuses; the writer it returns
// receives the bytes kept so far (the whole stream until then: nothing is
// dropped before the buffers reach their limit), straight from the
// buffers, then every later byte of the stream. Call it before the first
// Write.
func (c *Capture) SetBudget(acct *Account, spill func() io.Writer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acct, c.spillTo = acct, spill
}

// growTo makes room for need bytes in buf, at most max: the capacity
// doubles (so a stream written in small pieces is not copied over and
// over), at most limit, and what it adds is charged to the account first.
// false means the budget refused.
func (c *Capture) growTo(buf *[]byte, need, limit int) bool {
	if need <= cap(*buf) {
		return true
	}
	nc := min(limit, max(need, 2*cap(*buf), 4096))
	if !c.acct.Grow(nc - cap(*buf)) {
		// Try for just what is needed before giving up.
		nc = need
		if !c.acct.Grow(nc - cap(*buf)) {
			return false
		}
	}
	nb := make([]byte, len(*buf), nc)
	copy(nb, *buf)
	*buf = nb
	return true
}

// starve freezes the buffers at what they hold, and starts the spill with
// the bytes kept before the pending ones (those of the write under way,
// which the spill takes next). The budget refuses only while the buffers
// grow, before any byte is dropped: what they hold is the whole stream so
// far, written to the spill from the buffers themselves, without a copy.
func (c *Capture) starve() {
	c.starved = true
	c.hcap = len(c.head)
	if !c.full {
		c.tcap = len(c.tail)
		c.full, c.pos = c.tcap > 0, 0
	}
	if c.spillTo != nil {
		c.spill = c.spillTo()
		_, _ = c.spill.Write(c.head)
		_, _ = c.spill.Write(c.tail[c.pos:])
		_, _ = c.spill.Write(c.tail[:c.pos])
	}
}

// Write records p. It never fails.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	if c.released {
		return n, nil
	}
	if room := c.hcap - len(c.head); room > 0 {
		k := min(room, len(p))
		if !c.starved && !c.growTo(&c.head, len(c.head)+k, c.hcap) {
			c.starve()
		}
		if !c.starved {
			c.head = append(c.head, p[:k]...)
			p = p[k:]
		}
	}
	if c.spill != nil {
		// Spilling: the file takes the whole rest of the stream; memory
		// keeps only the tail ring it already has.
		_, _ = c.spill.Write(p)
	}
	tc := c.tcap
	if tc == 0 {
		return n, nil
	}
	if !c.full && !c.starved {
		if !c.growTo(&c.tail, min(tc, len(c.tail)+len(p)), tc) {
			c.starve()
			if c.spill != nil {
				_, _ = c.spill.Write(p)
			}
			if tc = c.tcap; tc == 0 {
				return n, nil
			}
		}
	}
	if len(p) >= tc {
		// Only the last tc bytes of p can survive.
		c.tail = append(c.tail[:0], p[len(p)-tc:]...)
		c.pos, c.full = 0, true
		return n, nil
	}
	for len(p) > 0 {
		if !c.full {
			k := min(tc-len(c.tail), len(p))
			c.tail = append(c.tail, p[:k]...)
			p = p[k:]
			if len(c.tail) == tc {
				c.full, c.pos = true, 0
			}
			continue
		}
		k := copy(c.tail[c.pos:], p)
		p = p[k:]
		c.pos = (c.pos + k) % tc
	}
	return n, nil
}

// Total is the number of bytes written, kept or not.
func (c *Capture) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Truncated reports whether bytes were dropped.
func (c *Capture) Truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total > int64(len(c.head)+len(c.tail))
}

// Starved reports whether the budget stopped the capture from growing to
// its limit (it then kept less than the limit).
func (c *Capture) Starved() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starved
}

// Held is the memory the capture's buffers take.
func (c *Capture) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cap(c.head) + cap(c.tail)
}

// String returns the kept bytes: the whole stream when it fit, otherwise
// its head, a "[... N bytes truncated ...]" marker and its tail.
func (c *Capture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	c.writeKept(&b)
	return b.String()
}

// Release returns the kept bytes as String does, then frees the buffers
// and gives their bytes back to the budget; later writes are only
// counted.
func (c *Capture) Release() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	c.writeKept(&b)
	c.discardLocked()
	return b.String()
}

// WriteKept writes the kept bytes, as String returns them, to w without
// making a copy of them: the head, the marker and the tail in pieces.
// Call it once the stream is written.
func (c *Capture) WriteKept(w io.Writer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.kept() {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// KeptLen is the length of what String returns.
func (c *Capture) KeptLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.kept() {
		n += len(p)
	}
	return n
}

// kept is the kept bytes in order, in pieces; c.mu is held.
func (c *Capture) kept() [][]byte {
	var marker []byte
	if kept := int64(len(c.head) + len(c.tail)); c.total > kept {
		marker = []byte("\n[... " + strconv.FormatInt(c.total-kept, 10) + " bytes truncated ...]\n")
	}
	if c.full {
		return [][]byte{c.head, marker, c.tail[c.pos:], c.tail[:c.pos]}
	}
	return [][]byte{c.head, marker, c.tail}
}

// Discard frees the buffers and gives their bytes back to the budget, as
// Release does, without returning the kept bytes.
func (c *Capture) Discard() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.discardLocked()
}

func (c *Capture) discardLocked() {
	if !c.released {
		c.released = true
		c.head, c.tail, c.full, c.pos, c.hcap, c.tcap = nil, nil, false, 0, 0, 0
		c.acct.Close()
	}
}

// writeKept writes the kept bytes to b, sized once; c.mu is held.
func (c *Capture) writeKept(b interface {
	Grow(int)
	Write([]byte) (int, error)
	WriteString(string) (int, error)
}) {
	kept := int64(len(c.head) + len(c.tail))
	var marker string
	if c.total > kept {
		marker = "\n[... " + strconv.FormatInt(c.total-kept, 10) + " bytes truncated ...]\n"
	}
	b.Grow(int(kept) + len(marker))
	b.Write(c.head)
	b.WriteString(marker)
	if c.full {
		b.Write(c.tail[c.pos:])
		b.Write(c.tail[:c.pos])
	} else {
		b.Write(c.tail)
	}
}
