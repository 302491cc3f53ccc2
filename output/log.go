package output

import (
	"context"
	"io"
	"sync"
)

// Chunk is one piece of a process's output.
type Chunk struct {
	// Seq numbers chunks of one process from 1, across its streams.
	Seq uint64 `json:"seq"`
	// Stream is "stdout" or "stderr".
	Stream string `json:"stream"`
	Data   []byte `json:"data"`
	// Off is the offset of the chunk's first byte in the process's
	// output (both streams together).
	Off int64 `json:"-"`
}

// Log keeps the recent output of one process, as numbered chunks, for
// readers that attach, detach and come back later (resuming after the
// last sequence number they saw). It holds at most maxBytes of data: the
// oldest chunks go first, and a reader that asks for them learns they are
// gone. It is safe for concurrent use.
//
// A Log may be charged to an Account of a Budget (SetBudget): when the
// budget refuses a new chunk, the log drops its own oldest chunks to make
// room, and when it holds nothing more it drops the new chunk itself; a
// reader learns of both as lost output.
type Log struct {
	mu       sync.Mutex
	chunks   []Chunk
	bytes    int
	max      int
	next     uint64
	total    int64 // bytes appended, kept or not
	closed   bool
	released bool
	acct     *Account
	changed  chan struct{} // closed and replaced on every change
}

// NewLog returns a Log that retains at most maxBytes (at least one chunk
// is always kept, whatever its size).
func NewLog(maxBytes int) *Log {
	return &Log{max: maxBytes, next: 1, changed: make(chan struct{})}
}

// SetBudget charges the log's chunks to acct; call it before the first
// write.
func (l *Log) SetBudget(acct *Account) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acct = acct
}

// Writer returns an io.Writer that appends to the log as stream.
func (l *Log) Writer(stream string) io.Writer {
	return logWriter{l: l, stream: stream}
}

type logWriter struct {
	l      *Log
	stream string
}

func (w logWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		w.l.append(w.stream, p)
	}
	return len(p), nil
}

func (l *Log) append(stream string, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.released {
		return
	}
	seq, off := l.next, l.total
	l.next++
	l.total += int64(len(p))
	defer l.notify()
	// Room first, within the log's own size and the budget: the oldest
	// chunks go. The budget is charged what a chunk's copy takes in
	// memory (its size class, up to 1/8 more than its bytes).
	drop := 0
	for l.bytes+len(p) > l.max && drop < len(l.chunks) {
		l.bytes -= len(l.chunks[drop].Data)
		l.acct.Shrink(cap(l.chunks[drop].Data))
		drop++
	}
	data := append([]byte(nil), p...)
	for !l.acct.Grow(cap(data)) {
		if drop == len(l.chunks) {
			// Nothing left to drop: this chunk is lost.
			l.dropFront(drop)
			return
		}
		l.bytes -= len(l.chunks[drop].Data)
		l.acct.Shrink(cap(l.chunks[drop].Data))
		drop++
	}
	l.dropFront(drop)
	l.chunks = append(l.chunks, Chunk{Seq: seq, Stream: stream, Data: data, Off: off})
	l.bytes += len(data)
}

// dropFront forgets the first n chunks (their bytes already given back),
// clearing the slots they leave so their data can be freed. l.mu is held.
func (l *Log) dropFront(n int) {
	if n == 0 {
		return
	}
	k := copy(l.chunks, l.chunks[n:])
	clear(l.chunks[k:])
	l.chunks = l.chunks[:k]
	if cap(l.chunks) > 64 && k < cap(l.chunks)/4 {
		l.chunks = append([]Chunk(nil), l.chunks...)
	}
}

// Release drops every chunk and gives its bytes back to the budget; the
// log is closed and later output is only counted. Readers learn that the
// output was lost.
func (l *Log) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropFront(len(l.chunks))
	l.chunks, l.bytes, l.released = nil, 0, true
	l.acct.Close()
	if !l.closed {
		l.closed = true
	}
	l.notify()
}

// LostBefore is the number of bytes of output, from the start, that came
// before the first chunk the log holds now (all of it if it holds none):
// what a reader starting from the beginning has lost.
func (l *Log) LostBefore() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.chunks) > 0 {
		return l.chunks[0].Off
	}
	return l.total
}

// notify wakes every waiting reader. Callers hold l.mu.
func (l *Log) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Size is the number of bytes the log holds now.
func (l *Log) Size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// LastSeq is the sequence number of the last chunk appended (0 before
// the first).
func (l *Log) LastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Close marks the end of the output; readers get what remains, then done.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.notify()
	}
}

// MaxReadBytes bounds the data of the chunks one Read returns (it returns
// at least one chunk): a reader holds the chunks it was given until it
// has sent them, and the ones the log drops meanwhile are no longer
// charged to its budget.
const MaxReadBytes = 64 << 10

// Read returns the retained chunks numbered after `after`, at most
// MaxReadBytes of them (at least one), waiting until there is at least
// one, the log is closed, or ctx ends. done is true when the log is
// closed and nothing more will come after the returned chunks. lost is
// true when chunks after `after` were already dropped to keep the log
// within its size: the returned chunks then start later than after+1.
func (l *Log) Read(ctx context.Context, after uint64) (chunks []Chunk, done, lost bool, err error) {
	for {
		l.mu.Lock()
		var out []Chunk
		size, more := 0, false
		for _, c := range l.chunks {
			if c.Seq <= after {
				continue
			}
			if len(out) > 0 && size+len(c.Data) > MaxReadBytes {
				more = true
				break
			}
			out = append(out, c)
			size += len(c.Data)
		}
		lost = len(l.chunks) > 0 && l.chunks[0].Seq > after+1 || len(l.chunks) == 0 && l.next > after+1
		closed, changed := l.closed, l.changed
		l.mu.Unlock()
		if len(out) > 0 || closed {
			return out, closed && !more, lost, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, false, lost, ctx.Err()
		}
	}
}
