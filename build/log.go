package build

import (
	"context"
	"os"
	"strings"
	"sync"

	"github.com/moat-sandbox/moat/api"
)

// logKeep is how much of the log's head and of its tail Log keeps in
// memory.
const logKeep = 32 << 10

// Log is the output of a build's command (stdout and stderr, interleaved
// as written): an io.Writer safe for concurrent writers that keeps the
// first and the last 32 KiB in memory (Summary) and writes everything to
// a spill file up to a cap (what build.log reads; Kept and Wait tell a
// reader how far it may read). Beyond the cap, output is counted and
// dropped; a failed write of the spill is kept (Err) and ends the
// spill, never the command's write. The command is never slowed by a
// reader: writes only wake waiters.
type Log struct {
	mu       sync.Mutex
	spill    *os.File
	max      int64
	head     []byte
	tail     [logKeep]byte // a ring of what came after head
	tailPos  int           // where the next byte of tail goes
	tailLen  int
	bytes    int64 // everything written
	kept     int64 // written to spill
	spillErr error
	closed   bool
	changed  chan struct{} // closed (and replaced) when kept grows or the log ends
	waiting  bool          // someone holds changed
}

// NewLog returns a Log writing to spill (nil: none: nothing is kept) at
// most max bytes. spill's offset must be where the log starts (a new
// file); the Log does not close it.
func NewLog(spill *os.File, max int64) *Log {
	return &Log{spill: spill, max: max, head: make([]byte, 0, logKeep), changed: make(chan struct{})}
}

// Write records p; it never fails. Writes after Close are dropped.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return len(p), nil
	}
	l.bytes += int64(len(p))
	rest := p
	if n := min(len(rest), logKeep-len(l.head)); n > 0 {
		l.head = append(l.head, rest[:n]...)
		rest = rest[n:]
	}
	l.addTail(rest)
	if l.spill != nil && l.spillErr == nil && l.kept < l.max {
		n, err := l.spill.Write(p[:min(int64(len(p)), l.max-l.kept)])
		l.kept += int64(n)
		if err != nil {
			l.spillErr = err
		}
		if n > 0 {
			l.wake()
		}
	}
	return len(p), nil
}

// addTail appends b to the tail ring.
func (l *Log) addTail(b []byte) {
	if len(b) >= logKeep {
		copy(l.tail[:], b[len(b)-logKeep:])
		l.tailPos, l.tailLen = 0, logKeep
		return
	}
	for len(b) > 0 {
		n := copy(l.tail[l.tailPos:], b)
		b = b[n:]
		l.tailPos = (l.tailPos + n) % logKeep
		l.tailLen = min(l.tailLen+n, logKeep)
	}
}

// wake wakes the waiters of Wait. l.mu is held.
func (l *Log) wake() {
	if l.waiting {
		close(l.changed)
		l.changed = make(chan struct{})
		l.waiting = false
	}
}

// Close marks the end of the log: Wait returns ended from then on, and
// later writes are dropped. It does not close the spill file.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.wake()
	}
}

// Kept returns how many bytes of the log the spill file holds.
func (l *Log) Kept() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kept
}

// Err returns the error that ended the spill file's writing, if any.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spillErr
}

// Wait blocks until the spill file holds more than past bytes, the log
// is closed, or ctx ends (err is then ctx's error). It returns what the
// spill holds and whether the log has ended: a reader of the spill reads
// up to kept, and stops once ended and it has read kept.
func (l *Log) Wait(ctx context.Context, past int64) (kept int64, ended bool, err error) {
	for {
		l.mu.Lock()
		kept, ended = l.kept, l.closed
		ch := l.changed
		if kept <= past && !ended {
			l.waiting = true
		}
		l.mu.Unlock()
		if kept > past || ended {
			return kept, ended, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return kept, false, ctx.Err()
		}
	}
}

// Summary returns the log as Build.Log holds it: the head, the tail (only
// when the output went past the head; what came after the head, at most
// 32 KiB, so that head and tail never overlap), and the counts. Invalid
// UTF-8 is replaced so that the text stays text in JSON.
func (l *Log) Summary() api.BuildLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := api.BuildLog{
		Head:      strings.ToValidUTF8(string(l.head), "\uFFFD"),
		Bytes:     l.bytes,
		Kept:      l.kept,
		Truncated: l.kept < l.bytes,
	}
	if l.tailLen > 0 {
		var t []byte
		if l.tailLen < logKeep {
			t = l.tail[:l.tailLen]
		} else {
			t = append(append(make([]byte, 0, logKeep), l.tail[l.tailPos:]...), l.tail[:l.tailPos]...)
		}
		s.Tail = strings.ToValidUTF8(string(t), "\uFFFD")
	}
	return s
}
