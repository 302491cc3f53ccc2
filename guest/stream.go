package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Errors of a stream's own end.
var (
	// ErrStreamClosed is returned by the reads and writes of a stream
	// half after its own Close.
	ErrStreamClosed = errors.New("stream closed")
	// ErrStreamReset is returned by a write once the peer has stopped
	// reading the stream (FrameReset): the data would be dropped.
	ErrStreamReset = errors.New("stream reset by its reader")
	// ErrStreamExists is returned when a stream half is opened twice.
	ErrStreamExists = errors.New("stream already open")
)

// creditStep is how many consumed bytes a reader gathers before granting
// them back: one full frame, so that the sender never idles with a window
// this much below StreamWindow and credit frames stay few.
const creditStep = MaxFrameData

// Mux carries the byte streams of a connection's processes and file
// operations over its frames, each stream with its own credit-based flow
// control: a sender never has more than StreamWindow bytes of a stream
// unconsumed at its receiver, and the receiver keeps at most that much.
// Frames are handed to the mux by the connection's one reading goroutine
// (Deliver), which therefore never blocks on a slow reader: a stalled
// stream holds up its own writer only, never control messages or other
// streams.
//
// A stream half exists only once this side has opened it (Reader,
// Writer); frames for any other stream are dropped, so a peer cannot make
// a mux allocate for streams it invents. Both ends open the halves of a
// process or file operation before anything is sent on them: the host
// before its request, the agent while handling the request, before it
// reads the next packet.
type Mux struct {
	send func(*Frame) error
	// bufs recycles the buffers of received data (MaxFrameData bytes
	// each): a stream's bytes are copied out of the transport's buffer
	// into one, and it comes back once read.
	bufs sync.Pool

	mu      sync.Mutex
	readers map[streamKey]*StreamReader
	writers map[streamKey]*StreamWriter
	err     error // the connection's end; no stream opens after it
}

type streamKey struct {
	id     uint64
	stream Stream
}

// NewMux returns a mux that sends its frames with send, which must be
// safe for concurrent use.
func NewMux(send func(*Frame) error) *Mux {
	m := &Mux{send: send, readers: map[streamKey]*StreamReader{}, writers: map[streamKey]*StreamWriter{}}
	m.bufs.New = func() any { return new([MaxFrameData]byte) }
	return m
}

// Reader opens the receiving half of stream s of id. The sender may send
// StreamWindow bytes at once.
func (m *Mux) Reader(id uint64, s Stream) (*StreamReader, error) {
	k := streamKey{id, s}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	if m.readers[k] != nil {
		return nil, fmt.Errorf("%v of %d: %w", s, id, ErrStreamExists)
	}
	r := &StreamReader{m: m, key: k, granted: StreamWindow}
	r.cond.L = &r.mu
	m.readers[k] = r
	return r, nil
}

// Writer opens the sending half of stream s of id, with StreamWindow
// bytes of credit.
func (m *Mux) Writer(id uint64, s Stream) (*StreamWriter, error) {
	k := streamKey{id, s}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	if m.writers[k] != nil {
		return nil, fmt.Errorf("%v of %d: %w", s, id, ErrStreamExists)
	}
	w := &StreamWriter{m: m, key: k, credit: StreamWindow}
	w.cond.L = &w.mu
	m.writers[k] = w
	return w, nil
}

// Deliver takes one frame the peer sent, other than FrameControl. It never
// blocks. An error wraps ErrProtocol: the peer broke the protocol, and the
// caller should end the connection.
func (m *Mux) Deliver(f Frame) error {
	k := streamKey{f.ID, f.Stream}
	m.mu.Lock()
	var (
		r *StreamReader
		w *StreamWriter
	)
	switch f.Kind {
	case FrameData, FrameEnd:
		r = m.readers[k]
	case FrameCredit, FrameReset:
		w = m.writers[k]
	default:
		m.mu.Unlock()
		return fmt.Errorf("%w: %v frame on a stream", ErrProtocol, f.Kind)
	}
	m.mu.Unlock()
	switch f.Kind {
	case FrameData:
		if r != nil {
			return r.data(f.Payload)
		}
	case FrameEnd:
		if r != nil {
			return r.end()
		}
	case FrameCredit:
		if len(f.Payload) != 4 {
			return fmt.Errorf("%w: credit of %d bytes", ErrProtocol, len(f.Payload))
		}
		if w != nil {
			return w.grant(binary.BigEndian.Uint32(f.Payload))
		}
	case FrameReset:
		if w != nil {
			w.resetByPeer()
		}
	}
	return nil
}

// Fail ends every open stream with err (the connection is gone): readers
// return it once they have returned what they hold, writers at once. No
// stream opens afterwards.
func (m *Mux) Fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	readers, writers := m.readers, m.writers
	m.readers, m.writers = map[streamKey]*StreamReader{}, map[streamKey]*StreamWriter{}
	m.mu.Unlock()
	for _, r := range readers {
		r.fail(err)
	}
	for _, w := range writers {
		w.fail(err)
	}
}

// Open reports the stream halves open, for tests and diagnostics.
func (m *Mux) Open() (readers, writers int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.readers), len(m.writers)
}

func (m *Mux) dropReader(r *StreamReader) {
	m.mu.Lock()
	if m.readers[r.key] == r {
		delete(m.readers, r.key)
	}
	m.mu.Unlock()
}

func (m *Mux) dropWriter(w *StreamWriter) {
	m.mu.Lock()
	if m.writers[w.key] == w {
		delete(m.writers, w.key)
	}
	m.mu.Unlock()
}

func (m *Mux) sendCtl(kind FrameKind, k streamKey, payload []byte) error {
	return m.send(&Frame{Kind: kind, Stream: k.stream, ID: k.id, Payload: payload})
}

// StreamReader is the receiving half of a stream: an io.ReadCloser of
// what the peer sends, which returns io.EOF after the peer's FrameEnd.
// It holds at most StreamWindow bytes. It is safe for one reader and
// concurrent Close.
type StreamReader struct {
	m   *Mux
	key streamKey

	mu       sync.Mutex
	cond     sync.Cond
	bufs     []chunk // received and not yet read, in order
	granted  int64   // bytes the sender may have sent in all
	received int64
	unacked  int   // read but not yet granted back
	eof      bool  // the sender ended the stream
	err      error // the connection ended
	closed   bool
}

// chunk is the unread part of one FrameData payload, in a buffer of
// the mux's pool.
type chunk struct {
	buf       *[MaxFrameData]byte
	off, size int
}

func (c chunk) bytes() []byte { return c.buf[c.off:c.size] }

// data queues one FrameData payload (a copy).
func (r *StreamReader) data(p []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil
	case r.eof:
		return fmt.Errorf("%w: data after the end of %v of %d", ErrProtocol, r.key.stream, r.key.id)
	case r.received+int64(len(p)) > r.granted:
		return fmt.Errorf("%w: %v of %d: %d bytes beyond the window granted", ErrProtocol, r.key.stream, r.key.id, r.received+int64(len(p))-r.granted)
	}
	r.received += int64(len(p))
	// Payloads are packed into full buffers, however small the frames:
	// a stream holds at most StreamWindow/MaxFrameData+2 of them.
	if n := len(r.bufs); n > 0 {
		last := &r.bufs[n-1]
		c := copy(last.buf[last.size:], p)
		last.size += c
		p = p[c:]
	}
	for len(p) > 0 {
		buf := r.m.bufs.Get().(*[MaxFrameData]byte)
		c := copy(buf[:], p)
		r.bufs = append(r.bufs, chunk{buf: buf, size: c})
		p = p[c:]
	}
	r.cond.Broadcast()
	return nil
}

func (r *StreamReader) end() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.eof && !r.closed {
		return fmt.Errorf("%w: %v of %d ended twice", ErrProtocol, r.key.stream, r.key.id)
	}
	r.eof = true
	r.cond.Broadcast()
	return nil
}

func (r *StreamReader) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.cond.Broadcast()
	r.mu.Unlock()
}

// Read reads what the peer sent, waiting for it; it returns io.EOF once
// the peer has ended the stream, and the connection's error once that has
// ended before. Consumed bytes are granted back to the sender.
func (r *StreamReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.mu.Lock()
	for len(r.bufs) == 0 && !r.eof && r.err == nil && !r.closed {
		r.cond.Wait()
	}
	switch {
	case r.closed:
		r.mu.Unlock()
		return 0, ErrStreamClosed
	case len(r.bufs) == 0 && r.eof:
		r.mu.Unlock()
		return 0, io.EOF
	case len(r.bufs) == 0:
		err := r.err
		r.mu.Unlock()
		return 0, err
	}
	n := 0
	for n < len(p) && len(r.bufs) > 0 {
		c := copy(p[n:], r.bufs[0].bytes())
		n += c
		r.bufs[0].off += c
		if r.bufs[0].off == r.bufs[0].size {
			r.m.bufs.Put(r.bufs[0].buf)
			r.bufs[0] = chunk{}
			r.bufs = r.bufs[1:]
		}
	}
	r.unacked += n
	grant := 0
	if r.unacked >= creditStep && !r.eof && r.err == nil {
		grant, r.unacked = r.unacked, 0
		r.granted += int64(grant)
	}
	r.mu.Unlock()
	if grant > 0 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(grant))
		// A failed send means the connection is going; Fail tells.
		_ = r.m.sendCtl(FrameCredit, r.key, b[:])
	}
	return n, nil
}

// Close stops reading: what is held is dropped, and unless the stream
// has ended the sender is told to stop (FrameReset). It is idempotent.
func (r *StreamReader) Close() error {
	r.m.dropReader(r)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	reset := !r.eof && r.err == nil
	for _, c := range r.bufs {
		r.m.bufs.Put(c.buf)
	}
	r.bufs = nil
	r.cond.Broadcast()
	r.mu.Unlock()
	if reset {
		_ = r.m.sendCtl(FrameReset, r.key, nil)
	}
	return nil
}

// StreamWriter is the sending half of a stream: an io.WriteCloser whose
// writes wait for credit and whose Close ends the stream (FrameEnd). It is
// safe for concurrent use; Close may interrupt a waiting Write.
type StreamWriter struct {
	m   *Mux
	key streamKey

	sendMu sync.Mutex // held while a frame of this stream is sent

	mu     sync.Mutex
	cond   sync.Cond
	credit int64
	closed bool
	reset  bool
	err    error
}

// grant adds credit from the receiver.
func (w *StreamWriter) grant(n uint32) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A receiver grants back only what it has consumed, so the credit
	// never exceeds the window.
	if n == 0 || w.credit+int64(n) > StreamWindow {
		return fmt.Errorf("%w: %v of %d: credit of %d beyond the window", ErrProtocol, w.key.stream, w.key.id, n)
	}
	w.credit += int64(n)
	w.cond.Broadcast()
	return nil
}

func (w *StreamWriter) resetByPeer() {
	w.mu.Lock()
	w.reset = true
	w.cond.Broadcast()
	w.mu.Unlock()
}

func (w *StreamWriter) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.cond.Broadcast()
	w.mu.Unlock()
}

// stopped returns why writing must stop, or nil. w.mu is held.
func (w *StreamWriter) stopped() error {
	switch {
	case w.closed:
		return ErrStreamClosed
	case w.reset:
		return ErrStreamReset
	}
	return w.err
}

// Write sends p in frames of at most MaxFrameData bytes, each once the
// receiver has granted room for it. It fails with ErrStreamReset once the
// receiver has stopped reading, ErrStreamClosed after Close, or the
// connection's error.
func (w *StreamWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		w.sendMu.Lock()
		w.mu.Lock()
		for w.credit == 0 && w.stopped() == nil {
			w.cond.Wait()
		}
		if err := w.stopped(); err != nil {
			w.mu.Unlock()
			w.sendMu.Unlock()
			return written, err
		}
		n := int(min(int64(len(p)), w.credit, MaxFrameData))
		w.credit -= int64(n)
		w.mu.Unlock()
		err := w.m.send(&Frame{Kind: FrameData, Stream: w.key.stream, ID: w.key.id, Payload: p[:n]})
		w.sendMu.Unlock()
		if err != nil {
			w.fail(err)
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// Close ends the stream: once a frame being sent has gone, the receiver
// is sent FrameEnd (unless it has reset the stream or the connection has
// ended). A Write waiting for credit returns ErrStreamClosed. It is
// idempotent.
func (w *StreamWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.cond.Broadcast()
	w.mu.Unlock()
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	w.m.dropWriter(w)
	w.mu.Lock()
	end := !w.reset && w.err == nil
	w.mu.Unlock()
	if !end {
		return nil
	}
	return w.m.sendCtl(FrameEnd, w.key, nil)
}
