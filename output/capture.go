// Package output captures a process's output stream within a fixed memory
// budget: past the limit it keeps the first half and the last half and
// counts what it dropped, so a flood can neither exhaust memory nor hide
// how the stream ended.
package output

import (
	"strconv"
	"sync"
)

// DefaultLimit is the cap of a captured stream in bytes.
const DefaultLimit = 2_000_000

// Capture is an io.Writer that keeps at most Limit bytes: the first half
// of the stream and its last half. It is safe for concurrent use.
type Capture struct {
	mu    sync.Mutex
	limit int
	head  []byte
	tail  []byte // ring buffer of the last limit-len(head) bytes
	pos   int    // next write position in tail once it is full
	full  bool
	total int64
}

// NewCapture returns a Capture of limit bytes (DefaultLimit if limit <= 0).
func NewCapture(limit int) *Capture {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &Capture{limit: limit}
}

func (c *Capture) headCap() int { return c.limit / 2 }
func (c *Capture) tailCap() int { return c.limit - c.limit/2 }

// Write records p. It never fails.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	if room := c.headCap() - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	tc := c.tailCap()
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
	return c.total > int64(c.limit)
}

// String returns the kept bytes: the whole stream when it fit, otherwise
// its head, a "[... N bytes truncated ...]" marker and its tail.
func (c *Capture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var tail []byte
	if c.full {
		tail = append(append(tail, c.tail[c.pos:]...), c.tail[:c.pos]...)
	} else {
		tail = c.tail
	}
	kept := int64(len(c.head) + len(tail))
	if c.total <= kept {
		return string(c.head) + string(tail)
	}
	return string(c.head) + "\n[... " + strconv.FormatInt(c.total-kept, 10) + " bytes truncated ...]\n" + string(tail)
}
