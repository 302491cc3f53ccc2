package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrClosed is what the streams of a connection return once it has been
// closed on this side.
var ErrClosed = errors.New("guest connection closed")

// ErrNoFDs is returned for a message with descriptors on a transport
// that cannot carry them (a byte stream).
var ErrNoFDs = errors.New("this transport carries no file descriptors")

// transport moves whole frames, in order, reliably.
type transport interface {
	// writePacket sends one frame, header and payload, with fds
	// (copied: the caller keeps them). It is safe for concurrent use and
	// never interleaves two frames.
	writePacket(hdr, payload []byte, fds []int) error
	// readPacket returns the next frame whole, in a buffer valid until
	// the next call, with the descriptors that came with it (the caller
	// owns them). io.EOF means the peer has closed.
	readPacket() ([]byte, []int, error)
	close() error
}

// Conn is one end of the host↔agent connection: JSON control messages
// and the streams of its Mux, as frames over one transport. Send and the
// streams are safe for concurrent use; Recv is called by one goroutine,
// which also delivers the streams' frames.
type Conn struct {
	t   transport
	mux *Mux
}

func newConn(t transport) *Conn {
	c := &Conn{t: t}
	c.mux = NewMux(c.sendFrame)
	return c
}

// NewStreamConn returns a connection over a reliable byte stream (a
// vsock or TCP stream, a virtio-serial port, a pipe pair): frames follow
// each other, delimited by their headers. It carries no descriptors, so
// every stream travels in frames. Close closes rw.
func NewStreamConn(rw io.ReadWriteCloser) *Conn {
	return newConn(&byteStream{rw: rw, fr: NewFrameReader(rw)})
}

// Streams returns the connection's stream mux.
func (c *Conn) Streams() *Mux { return c.mux }

// Close closes the connection; its streams fail with ErrClosed.
func (c *Conn) Close() error {
	err := c.t.close()
	c.mux.Fail(ErrClosed)
	return err
}

// Send writes one message with the given descriptors. The caller keeps
// ownership of fds.
func (c *Conn) Send(m *Message, fds ...int) error {
	return c.SendValue(string(m.Type), m, fds...)
}

// SendValue writes v, JSON-encoded, as one control frame with the given
// descriptors; name says what it is in errors. The caller keeps ownership
// of fds. The runtime's spawner speaks its own messages this way.
func (c *Conn) SendValue(name string, v any, fds ...int) error {
	b, err := encode(name, v)
	if err != nil {
		return err
	}
	if len(fds) > MaxFDs {
		return fmt.Errorf("%s: %d descriptors, at most %d", name, len(fds), MaxFDs)
	}
	hdr := appendHeader(make([]byte, 0, FrameHeader), FrameControl, 0, 0, len(b))
	if err := c.t.writePacket(hdr, b, fds); err != nil {
		return fmt.Errorf("send %s: %w", name, err)
	}
	return nil
}

// sendFrame sends a stream's frame (the mux's sender).
func (c *Conn) sendFrame(f *Frame) error {
	if err := checkFrame(f); err != nil {
		return err
	}
	hdr := appendHeader(make([]byte, 0, FrameHeader), f.Kind, f.Stream, f.ID, len(f.Payload))
	if err := c.t.writePacket(hdr, f.Payload, nil); err != nil {
		return fmt.Errorf("send %v frame: %w", f.Kind, err)
	}
	return nil
}

// Recv reads one message and the descriptors that came with it, which the
// caller then owns (they are close-on-exec). Stream frames that come
// before it are delivered to the mux on the way. It returns io.EOF when
// the peer has closed. Its errors are final: the connection's streams
// fail with them, and the caller stops reading.
func (c *Conn) Recv() (*Message, []int, error) {
	m := new(Message)
	fds, err := c.RecvValue(m)
	if err != nil {
		return nil, nil, err
	}
	return m, fds, nil
}

// RecvValue reads one control message into v (JSON) as Recv does, and
// returns the descriptors that came with it.
func (c *Conn) RecvValue(v any) ([]int, error) {
	fds, err := c.recvValue(v)
	if err != nil {
		c.mux.Fail(fmt.Errorf("guest connection: %w", err))
	}
	return fds, err
}

func (c *Conn) recvValue(v any) ([]int, error) {
	for {
		b, fds, err := c.t.readPacket()
		if err != nil {
			return nil, err
		}
		f, err := ParseFrame(b)
		if err != nil {
			closeAll(fds)
			return nil, err
		}
		if f.Kind == FrameControl {
			if err := json.Unmarshal(f.Payload, v); err != nil {
				closeAll(fds)
				return nil, fmt.Errorf("decode message: %w", err)
			}
			return fds, nil
		}
		if len(fds) > 0 {
			closeAll(fds)
			return nil, fmt.Errorf("%w: descriptors with a %v frame", ErrProtocol, f.Kind)
		}
		if err := c.mux.Deliver(f); err != nil {
			return nil, err
		}
	}
}

func encode(name string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", name, err)
	}
	if len(b) > MaxMessage {
		return nil, fmt.Errorf("%s: %w (%d bytes)", name, ErrTooLarge, len(b))
	}
	return b, nil
}

// byteStream is the transport of NewStreamConn.
type byteStream struct {
	rw  io.ReadWriteCloser
	fr  *FrameReader
	wmu sync.Mutex
}

func (s *byteStream) writePacket(hdr, payload []byte, fds []int) error {
	if len(fds) > 0 {
		return ErrNoFDs
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.rw.Write(hdr); err != nil {
		return err
	}
	if len(payload) == 0 {
		return nil
	}
	_, err := s.rw.Write(payload)
	return err
}

func (s *byteStream) readPacket() ([]byte, []int, error) {
	b, err := s.fr.Next()
	return b, nil, err
}

func (s *byteStream) close() error { return s.rw.Close() }
