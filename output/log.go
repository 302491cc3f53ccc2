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
}

// Log keeps the recent output of one process, as numbered chunks, for
// readers that attach, detach and come back later (resuming after the
// last sequence number they saw). It holds at most maxBytes of data: the
// oldest chunks go first, and a reader that asks for them learns they are
// gone. It is safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	chunks  []Chunk
	bytes   int
	max     int
	next    uint64
	closed  bool
	changed chan struct{} // closed and replaced on every change
}

// NewLog returns a Log that retains at most maxBytes (at least one chunk
// is always kept, whatever its size).
func NewLog(maxBytes int) *Log {
	return &Log{max: maxBytes, next: 1, changed: make(chan struct{})}
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
	data := append([]byte(nil), p...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.chunks = append(l.chunks, Chunk{Seq: l.next, Stream: stream, Data: data})
	l.next++
	l.bytes += len(data)
	drop := 0
	for l.bytes > l.max && drop < len(l.chunks)-1 {
		l.bytes -= len(l.chunks[drop].Data)
		drop++
	}
	if drop > 0 {
		l.chunks = append(l.chunks[:0], l.chunks[drop:]...)
	}
	l.notify()
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

// Read returns the retained chunks numbered after `after`, waiting until
// there is at least one, the log is closed, or ctx ends. done is true when
// the log is closed and nothing more will come after the returned chunks.
// lost is true when chunks after `after` were already dropped to keep the
// log within its size: the returned chunks then start later than after+1.
func (l *Log) Read(ctx context.Context, after uint64) (chunks []Chunk, done, lost bool, err error) {
	for {
		l.mu.Lock()
		var out []Chunk
		for _, c := range l.chunks {
			if c.Seq > after {
				out = append(out, c)
			}
		}
		lost = len(l.chunks) > 0 && l.chunks[0].Seq > after+1 || len(l.chunks) == 0 && l.next > after+1
		closed, changed := l.closed, l.changed
		l.mu.Unlock()
		if len(out) > 0 || closed {
			return out, closed, lost, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, false, lost, ctx.Err()
		}
	}
}
