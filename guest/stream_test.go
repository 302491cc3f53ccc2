package guest

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// streamPair connects two Conns over a byte stream, as a microVM's vsock
// would.
func streamPair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	a, b := net.Pipe()
	ca, cb := NewStreamConn(a), NewStreamConn(b)
	t.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb
}

// serve runs c's receive loop (which delivers stream frames) until the
// connection ends, and passes on its control messages.
func serve(c *Conn) <-chan *Message {
	msgs := make(chan *Message, 64)
	go func() {
		defer close(msgs)
		for {
			m, fds, err := c.Recv()
			if err != nil {
				return
			}
			closeAll(fds)
			msgs <- m
		}
	}()
	return msgs
}

// forEachTransport runs fn over each transport a Conn has on this
// platform.
func forEachTransport(t *testing.T, fn func(t *testing.T, a, b *Conn)) {
	for name, pair := range transports() {
		t.Run(name, func(t *testing.T) {
			a, b := pair(t)
			fn(t, a, b)
		})
	}
}

// waitMsg returns the next control message, failing after a minute.
func waitMsg(t *testing.T, msgs <-chan *Message) *Message {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatal("connection ended")
		}
		return m
	case <-time.After(time.Minute):
		t.Fatal("no message")
	}
	return nil
}

// TestStreamTransfer: streams in both directions at once, and several
// per direction, arrive whole, in order, and end with io.EOF.
func TestStreamTransfer(t *testing.T) {
	forEachTransport(t, func(t *testing.T, a, b *Conn) {
		serve(a)
		serve(b)
		const size = 3 << 20
		type flow struct {
			w    *StreamWriter
			r    *StreamReader
			data []byte
		}
		var flows []flow
		for i, dir := range []struct{ from, to *Conn }{{a, b}, {b, a}, {a, b}} {
			w, err := dir.from.Streams().Writer(uint64(i+1), StreamStdout)
			if err != nil {
				t.Fatal(err)
			}
			r, err := dir.to.Streams().Reader(uint64(i+1), StreamStdout)
			if err != nil {
				t.Fatal(err)
			}
			data := make([]byte, size)
			rand.Read(data)
			flows = append(flows, flow{w, r, data})
		}
		errs := make(chan error, len(flows))
		for _, f := range flows {
			go func() {
				_, err := f.w.Write(f.data)
				if err == nil {
					err = f.w.Close()
				}
				errs <- err
			}()
		}
		for i, f := range flows {
			got, err := io.ReadAll(f.r)
			if err != nil || !bytes.Equal(got, f.data) {
				t.Fatalf("flow %d: %d bytes of %d, %v", i, len(got), size, err)
			}
		}
		for range flows {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if r, w := a.Streams().Open(); r+w != 1 { // the reader of flow 2, still open
			t.Fatalf("%d readers, %d writers left open", r, w)
		}
	})
}

// TestStreamStalledReader: a stream whose reader stops reading holds up
// its own writer once the window is spent, and nothing else: another
// stream and control messages go on, and the stalled stream's receiver
// holds no more than the window.
func TestStreamStalledReader(t *testing.T) {
	forEachTransport(t, func(t *testing.T, a, b *Conn) {
		serve(a)
		msgs := serve(b)
		stalledW, _ := a.Streams().Writer(1, StreamStdout)
		stalledR, _ := b.Streams().Reader(1, StreamStdout)
		// The whole window goes at once; a control message after it
		// arrives after all of it.
		if _, err := stalledW.Write(make([]byte, StreamWindow)); err != nil {
			t.Fatal(err)
		}
		if err := a.Send(&Message{Type: MsgSignal, ID: 1}); err != nil {
			t.Fatal(err)
		}
		waitMsg(t, msgs)
		blocked := make(chan error, 1)
		go func() {
			_, err := stalledW.Write([]byte("one more"))
			blocked <- err
		}()

		otherW, _ := a.Streams().Writer(2, StreamStdout)
		otherR, _ := b.Streams().Reader(2, StreamStdout)
		go func() {
			_, _ = otherW.Write(make([]byte, 4*StreamWindow))
			otherW.Close()
		}()
		if n, err := io.Copy(io.Discard, otherR); err != nil || n != 4*StreamWindow {
			t.Fatalf("the other stream: %d bytes, %v", n, err)
		}
		if err := a.Send(&Message{Type: MsgSignal, ID: 2}); err != nil {
			t.Fatal(err)
		}
		if m := waitMsg(t, msgs); m.ID != 2 {
			t.Fatalf("control message %+v", m)
		}
		select {
		case err := <-blocked:
			t.Fatalf("a write past the window returned (%v) while the reader was stalled", err)
		default:
		}
		stalledR.mu.Lock()
		held := stalledR.received
		stalledR.mu.Unlock()
		if held != StreamWindow {
			t.Fatalf("the stalled stream's receiver holds %d bytes, want the window (%d)", held, StreamWindow)
		}
		// Reading makes room: the write goes through.
		if _, err := io.ReadFull(stalledR, make([]byte, StreamWindow)); err != nil {
			t.Fatal(err)
		}
		if err := <-blocked; err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 8)
		if _, err := io.ReadFull(stalledR, got); err != nil || string(got) != "one more" {
			t.Fatalf("after the stall: %q %v", got, err)
		}
	})
}

// TestStreamReset: a reader that closes stops its writer with
// ErrStreamReset (a pipe's EPIPE), even one waiting for credit.
func TestStreamReset(t *testing.T) {
	forEachTransport(t, func(t *testing.T, a, b *Conn) {
		serve(a)
		serve(b)
		w, _ := a.Streams().Writer(5, StreamFile)
		r, _ := b.Streams().Reader(5, StreamFile)
		done := make(chan error, 1)
		go func() {
			_, err := w.Write(make([]byte, 2*StreamWindow))
			done <- err
		}()
		if _, err := io.ReadFull(r, make([]byte, 10)); err != nil {
			t.Fatal(err)
		}
		r.Close()
		if err := <-done; !errors.Is(err, ErrStreamReset) {
			t.Fatalf("write after the reader closed: %v, want ErrStreamReset", err)
		}
		if _, err := r.Read(make([]byte, 1)); !errors.Is(err, ErrStreamClosed) {
			t.Fatalf("read after Close: %v", err)
		}
		w.Close()
	})
}

// TestStreamCloseInterruptsWrite: closing a writer that waits for credit
// ends its Write, and the reader gets what was sent, then io.EOF.
func TestStreamCloseInterruptsWrite(t *testing.T) {
	forEachTransport(t, func(t *testing.T, a, b *Conn) {
		serve(a)
		serve(b)
		w, _ := a.Streams().Writer(3, StreamStdin)
		r, _ := b.Streams().Reader(3, StreamStdin)
		done := make(chan error, 1)
		go func() {
			_, err := w.Write(make([]byte, StreamWindow+1))
			done <- err
		}()
		// The window arrives; the last byte waits for credit.
		if _, err := io.ReadFull(r, make([]byte, StreamWindow)); err != nil {
			t.Fatal(err)
		}
		// Reading the window granted credit back, so the write may have
		// finished: either way Close ends it and the stream.
		w.Close()
		if err := <-done; err != nil && !errors.Is(err, ErrStreamClosed) {
			t.Fatalf("write interrupted by Close: %v", err)
		}
		rest, err := io.ReadAll(r)
		if err != nil || len(rest) > 1 {
			t.Fatalf("after Close: %d bytes, %v; want at most the last byte, then io.EOF", len(rest), err)
		}
		if _, err := w.Write([]byte("x")); !errors.Is(err, ErrStreamClosed) {
			t.Fatalf("write after Close: %v", err)
		}
	})
}

// TestStreamConnectionLoss: when the connection ends, a reader returns
// what it holds, then the connection's error (not io.EOF: the stream did
// not end); writers fail at once; nothing opens afterwards.
func TestStreamConnectionLoss(t *testing.T) {
	forEachTransport(t, func(t *testing.T, a, b *Conn) {
		serve(a)
		msgs := serve(b)
		aw, _ := a.Streams().Writer(1, StreamStdout)
		br, _ := b.Streams().Reader(1, StreamStdout)
		bw, _ := b.Streams().Writer(1, StreamStdin)
		if _, err := aw.Write([]byte("last words")); err != nil {
			t.Fatal(err)
		}
		a.Close()
		for range msgs {
		}
		got, err := io.ReadAll(br)
		if string(got) != "last words" || err == nil {
			t.Fatalf("reader after the connection ended: %q, %v", got, err)
		}
		if _, err := bw.Write(make([]byte, StreamWindow+1)); err == nil {
			t.Fatal("a write on a lost connection succeeded")
		}
		if _, err := b.Streams().Reader(2, StreamStdout); err == nil {
			t.Fatal("a stream opened on a lost connection")
		}
	})
}

// maxChunks is the most buffers a stream's receiver may hold.
const maxChunks = StreamWindow/MaxFrameData + 2

// TestMuxSmallFrames: a peer that sends its window one byte per frame
// makes the receiver hold the window's bytes, not a buffer per frame;
// they are read back in order.
func TestMuxSmallFrames(t *testing.T) {
	m := NewMux(func(*Frame) error { return nil })
	r, _ := m.Reader(1, StreamStdout)
	for i := range StreamWindow {
		if err := m.Deliver(Frame{Kind: FrameData, Stream: StreamStdout, ID: 1, Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			// A partial read in between: the tail keeps filling.
			if _, err := r.Read(make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(r.bufs) > maxChunks {
		t.Fatalf("%d bytes in 1-byte frames are held in %d buffers", StreamWindow, len(r.bufs))
	}
	if err := m.Deliver(Frame{Kind: FrameEnd, Stream: StreamStdout, ID: 1}); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	read := StreamWindow / 1000 // one byte each, in order
	if err != nil || len(rest) != StreamWindow-read {
		t.Fatalf("read back %d bytes, %v", len(rest), err)
	}
	for i, b := range rest {
		if want := byte(i + read); b != want {
			t.Fatalf("byte %d is %d, want %d", read+i, b, want)
		}
	}
}

// TestMuxViolations: a peer that breaks flow control or stream order is
// caught, whatever it sends; frames of streams not open are dropped.
func TestMuxViolations(t *testing.T) {
	var sent []Frame
	m := NewMux(func(f *Frame) error { sent = append(sent, *f); return nil })
	data := func(id uint64, n int) Frame {
		return Frame{Kind: FrameData, Stream: StreamStdout, ID: id, Payload: make([]byte, n)}
	}
	credit := func(n uint32) Frame {
		return Frame{Kind: FrameCredit, Stream: StreamStdin, ID: 1, Payload: binary.BigEndian.AppendUint32(nil, n)}
	}
	r, _ := m.Reader(1, StreamStdout)
	if _, err := m.Reader(1, StreamStdout); !errors.Is(err, ErrStreamExists) {
		t.Fatalf("second reader: %v", err)
	}
	for range StreamWindow / MaxFrameData {
		if err := m.Deliver(data(1, MaxFrameData)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Deliver(data(1, 1)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a byte past the window: %v", err)
	}
	// Consuming grants credit back, which lets more in.
	if _, err := io.ReadFull(r, make([]byte, MaxFrameData)); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || sent[0].Kind != FrameCredit || binary.BigEndian.Uint32(sent[0].Payload) != MaxFrameData {
		t.Fatalf("frames sent after reading: %+v", sent)
	}
	if err := m.Deliver(data(1, MaxFrameData)); err != nil {
		t.Fatalf("data within the granted window: %v", err)
	}
	end := Frame{Kind: FrameEnd, Stream: StreamStdout, ID: 1}
	if err := m.Deliver(end); err != nil {
		t.Fatal(err)
	}
	if err := m.Deliver(end); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a second end: %v", err)
	}
	if err := m.Deliver(data(1, 1)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("data after the end: %v", err)
	}

	w, _ := m.Writer(1, StreamStdin)
	if err := m.Deliver(credit(1)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("credit beyond the window: %v", err)
	}
	if _, err := w.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if err := m.Deliver(credit(100)); err != nil {
		t.Fatalf("credit for what was sent: %v", err)
	}
	if err := m.Deliver(credit(0)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("zero credit: %v", err)
	}
	if err := m.Deliver(Frame{Kind: FrameControl}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("control frame to the mux: %v", err)
	}
	// Streams nobody opened: dropped, whatever they claim.
	for _, f := range []Frame{data(9, MaxFrameData), {Kind: FrameEnd, ID: 9}, {Kind: FrameReset, ID: 9}, credit(1 << 30)} {
		f.ID = 9
		if err := m.Deliver(f); err != nil {
			t.Fatalf("%v frame of a stream not open: %v", f.Kind, err)
		}
	}
	m.Fail(ErrClosed)
	if _, err := m.Writer(2, StreamStdin); !errors.Is(err, ErrClosed) {
		t.Fatalf("open after Fail: %v", err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after Fail: %v", err)
	}
}

// TestStreamConnControl: over a byte stream, control messages arrive in
// order between stream frames; descriptors are refused (ErrNoFDs), and
// the peer's end is io.EOF.
func TestStreamConnControl(t *testing.T) {
	a, b := streamPair(t)
	serve(a)
	got := make(chan *Message, 4)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, _, err := b.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			got <- m
		}
	}()
	r, _ := b.Streams().Reader(4, StreamStdout)
	w, _ := a.Streams().Writer(4, StreamStdout)
	if err := a.Send(&Message{Type: MsgExec, ID: 4, Exec: &Exec{Args: []string{"sh"}, Streams: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("out")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := a.Send(&Message{Type: MsgExit, ID: 4, Exit: &Exit{Code: 3}}); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m.Type != MsgExec || !m.Exec.Streams {
		t.Fatalf("first message %+v", m)
	}
	if m := <-got; m.Type != MsgExit || m.Exit.Code != 3 {
		t.Fatalf("second message %+v", m)
	}
	// The exit came after the stream's frames: they are all there.
	if out, err := io.ReadAll(r); err != nil || string(out) != "out" {
		t.Fatalf("stream: %q %v", out, err)
	}
	if err := a.Send(&Message{Type: MsgSignal}, 0); !errors.Is(err, ErrNoFDs) {
		t.Fatalf("a descriptor on a byte stream: %v, want ErrNoFDs", err)
	}
	a.Close()
	if err := <-recvErr; !errors.Is(err, io.EOF) {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
}
