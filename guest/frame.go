package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The frame format is specified in the package documentation (proto.go).

// FrameKind says what a frame carries.
type FrameKind uint8

// Frame kinds. Zero is never valid, so a packet of zeroes is refused.
const (
	// FrameControl carries one JSON Message.
	FrameControl FrameKind = 1
	// FrameData carries bytes of a stream, from its sender.
	FrameData FrameKind = 2
	// FrameEnd ends a stream, from its sender: no data follows.
	FrameEnd FrameKind = 3
	// FrameCredit grants a stream's sender more bytes, from its receiver.
	FrameCredit FrameKind = 4
	// FrameReset tells a stream's sender that its receiver has stopped
	// reading: further data would be dropped (a pipe's EPIPE).
	FrameReset FrameKind = 5
)

// String names the kind as the package documentation does.
func (k FrameKind) String() string {
	switch k {
	case FrameControl:
		return "control"
	case FrameData:
		return "data"
	case FrameEnd:
		return "end"
	case FrameCredit:
		return "credit"
	case FrameReset:
		return "reset"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// Stream names one byte stream of a process or file operation. The
// direction is the sender's: the host sends StreamStdin and the input of
// StreamPTY, the agent StreamStdout, StreamStderr and the output of
// StreamPTY; StreamFile flows the way its operation moves content.
type Stream uint8

// Streams of a process (Exec.Streams) and of a file operation
// (FileOp.Streams).
const (
	StreamStdin  Stream = 0
	StreamStdout Stream = 1
	StreamStderr Stream = 2
	StreamPTY    Stream = 3
	StreamFile   Stream = 4
)

// String names the stream as the package documentation does.
func (s Stream) String() string {
	switch s {
	case StreamStdin:
		return "stdin"
	case StreamStdout:
		return "stdout"
	case StreamStderr:
		return "stderr"
	case StreamPTY:
		return "pty"
	case StreamFile:
		return "file"
	}
	return fmt.Sprintf("stream %d", uint8(s))
}

// Frame sizes and the flow-control window.
const (
	// FrameHeader is the size of a frame's header.
	FrameHeader = 16
	// MaxFrameData is the most data one FrameData carries.
	MaxFrameData = 64 << 10
	// StreamWindow is the credit a stream's sender starts with, and the
	// most a receiver ever buffers for one stream: the receiver grants
	// more only as its reader consumes.
	StreamWindow = 256 << 10
)

// ErrProtocol is wrapped by every error about a frame or stream the
// peer should never have sent: a malformed header, data beyond the
// granted window, data after a stream's end. The connection cannot be
// trusted after one.
var ErrProtocol = errors.New("protocol violation")

// Frame is one decoded frame. Payload aliases the buffer it was decoded
// from.
type Frame struct {
	Kind    FrameKind
	Stream  Stream
	ID      uint64
	Payload []byte
}

// payloadBounds returns the smallest and the largest payload a frame of
// kind k carries; ok is false for an unknown kind.
func payloadBounds(k FrameKind) (lo, hi int, ok bool) {
	switch k {
	case FrameControl:
		return 1, MaxMessage, true
	case FrameData:
		return 1, MaxFrameData, true
	case FrameCredit:
		return 4, 4, true
	case FrameEnd, FrameReset:
		return 0, 0, true
	}
	return 0, 0, false
}

// header is a decoded, checked frame header.
type header struct {
	kind   FrameKind
	stream Stream
	length int
	id     uint64
}

// parseHeader checks a frame header (b holds at least FrameHeader bytes).
func parseHeader(b []byte) (header, error) {
	h := header{
		kind:   FrameKind(b[0]),
		stream: Stream(b[1]),
		id:     binary.BigEndian.Uint64(b[8:16]),
	}
	n := binary.BigEndian.Uint32(b[4:8])
	lo, hi, ok := payloadBounds(h.kind)
	switch {
	case !ok:
		return h, fmt.Errorf("%w: frame of unknown %v", ErrProtocol, h.kind)
	case b[2] != 0 || b[3] != 0:
		return h, fmt.Errorf("%w: %v frame with reserved bits set", ErrProtocol, h.kind)
	case uint64(n) < uint64(lo) || uint64(n) > uint64(hi):
		return h, fmt.Errorf("%w: %v frame of %d bytes (%d to %d)", ErrProtocol, h.kind, n, lo, hi)
	case h.kind == FrameControl && (h.stream != 0 || h.id != 0):
		return h, fmt.Errorf("%w: control frame with a stream", ErrProtocol)
	case h.kind != FrameControl && h.stream > StreamFile:
		return h, fmt.Errorf("%w: %v frame of unknown %v", ErrProtocol, h.kind, h.stream)
	}
	h.length = int(n)
	return h, nil
}

// ParseFrame decodes one whole frame (a packet of a message transport).
// The frame's Payload aliases b.
func ParseFrame(b []byte) (Frame, error) {
	if len(b) < FrameHeader {
		return Frame{}, fmt.Errorf("%w: packet of %d bytes, shorter than a frame header", ErrProtocol, len(b))
	}
	h, err := parseHeader(b)
	if err != nil {
		return Frame{}, err
	}
	if len(b)-FrameHeader != h.length {
		return Frame{}, fmt.Errorf("%w: %v frame says %d bytes, the packet holds %d", ErrProtocol, h.kind, h.length, len(b)-FrameHeader)
	}
	return Frame{Kind: h.kind, Stream: h.stream, ID: h.id, Payload: b[FrameHeader:]}, nil
}

// AppendFrame appends f, encoded, to dst.
//
// Preconditions: f's payload fits its kind (see the table above).
func AppendFrame(dst []byte, f *Frame) []byte {
	return append(appendHeader(dst, f.Kind, f.Stream, f.ID, len(f.Payload)), f.Payload...)
}

// appendHeader appends the header of a frame of n payload bytes.
func appendHeader(dst []byte, k FrameKind, s Stream, id uint64, n int) []byte {
	var h [FrameHeader]byte
	h[0] = byte(k)
	h[1] = byte(s)
	binary.BigEndian.PutUint32(h[4:8], uint32(n))
	binary.BigEndian.PutUint64(h[8:16], id)
	return append(dst, h[:]...)
}

// checkFrame reports a frame that AppendFrame must not encode.
func checkFrame(f *Frame) error {
	lo, hi, ok := payloadBounds(f.Kind)
	if !ok || len(f.Payload) < lo || len(f.Payload) > hi {
		return fmt.Errorf("encode %v frame of %d bytes: %w", f.Kind, len(f.Payload), ErrTooLarge)
	}
	return nil
}

// FrameReader decodes the frames of a byte transport.
type FrameReader struct {
	r   io.Reader
	buf []byte
}

// NewFrameReader reads frames from r.
func NewFrameReader(r io.Reader) *FrameReader { return &FrameReader{r: r} }

// Next reads one frame and returns it whole, header included, in a
// buffer valid until the next call. A header is checked before its
// payload is read, so a hostile length never makes it allocate more than
// FrameHeader+MaxMessage bytes. It returns io.EOF at a clean end between
// frames and io.ErrUnexpectedEOF inside one.
func (fr *FrameReader) Next() ([]byte, error) {
	if cap(fr.buf) < FrameHeader {
		fr.buf = make([]byte, FrameHeader, FrameHeader+MaxFrameData)
	}
	b := fr.buf[:FrameHeader]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		return nil, err
	}
	h, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	if need := FrameHeader + h.length; need > cap(fr.buf) {
		nb := make([]byte, need)
		copy(nb, b)
		fr.buf = nb
	}
	b = fr.buf[:FrameHeader+h.length]
	if _, err := io.ReadFull(fr.r, b[FrameHeader:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if cap(fr.buf) > FrameHeader+MaxFrameData {
		// A large control message does not pin its buffer.
		fr.buf = nil
	}
	return b, nil
}
