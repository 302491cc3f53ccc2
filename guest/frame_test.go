package guest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

// frameBytes encodes a frame.
func frameBytes(k FrameKind, s Stream, id uint64, payload []byte) []byte {
	return AppendFrame(nil, &Frame{Kind: k, Stream: s, ID: id, Payload: payload})
}

// rawHeader builds a header field by field, valid or not.
func rawHeader(kind, stream byte, reserved uint16, length uint32, id uint64) []byte {
	b := make([]byte, FrameHeader)
	b[0], b[1] = kind, stream
	binary.BigEndian.PutUint16(b[2:4], reserved)
	binary.BigEndian.PutUint32(b[4:8], length)
	binary.BigEndian.PutUint64(b[8:16], id)
	return b
}

// TestFrameRoundTrip: every kind of frame decodes to what was encoded,
// as one packet and from a byte stream of frames.
func TestFrameRoundTrip(t *testing.T) {
	credit := binary.BigEndian.AppendUint32(nil, 4096)
	frames := []Frame{
		{Kind: FrameControl, Payload: []byte(`{"type":"exec","id":7}`)},
		{Kind: FrameData, Stream: StreamStdout, ID: 7, Payload: bytes.Repeat([]byte("x"), MaxFrameData)},
		{Kind: FrameData, Stream: StreamFile, ID: 1<<64 - 1, Payload: []byte{0}},
		{Kind: FrameCredit, Stream: StreamStdin, ID: 7, Payload: credit},
		{Kind: FrameEnd, Stream: StreamPTY, ID: 8},
		{Kind: FrameReset, Stream: StreamStderr, ID: 9},
	}
	var stream []byte
	for _, f := range frames {
		b := AppendFrame(nil, &f)
		if len(b) != FrameHeader+len(f.Payload) {
			t.Fatalf("%v: %d bytes encoded", f.Kind, len(b))
		}
		got, err := ParseFrame(b)
		if err != nil || got.Kind != f.Kind || got.Stream != f.Stream || got.ID != f.ID || !bytes.Equal(got.Payload, f.Payload) {
			t.Fatalf("%v: decoded %+v, %v", f.Kind, got, err)
		}
		stream = append(stream, b...)
	}
	fr := NewFrameReader(bytes.NewReader(stream))
	for _, f := range frames {
		b, err := fr.Next()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseFrame(b)
		if err != nil || got.Kind != f.Kind || got.ID != f.ID || !bytes.Equal(got.Payload, f.Payload) {
			t.Fatalf("%v from a stream: %+v, %v", f.Kind, got, err)
		}
	}
	if _, err := fr.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

// TestParseFrameRejects: every malformed header or packet is a protocol
// error, checked before any payload is used.
func TestParseFrameRejects(t *testing.T) {
	data := func(n int) []byte { return make([]byte, n) }
	for name, b := range map[string][]byte{
		"empty":                  nil,
		"short header":           data(FrameHeader - 1),
		"kind zero":              append(rawHeader(0, 0, 0, 1, 0), 'x'),
		"unknown kind":           rawHeader(6, 0, 0, 0, 1),
		"raw JSON":               []byte(`{"type":"exec","id":1,"exec":{"args":["sh"]}}`),
		"reserved bits":          append(rawHeader(byte(FrameData), 1, 1, 1, 1), 'x'),
		"unknown stream":         append(rawHeader(byte(FrameData), byte(StreamFile)+1, 0, 1, 1), 'x'),
		"empty data":             rawHeader(byte(FrameData), 1, 0, 0, 1),
		"data over the maximum":  append(rawHeader(byte(FrameData), 1, 0, MaxFrameData+1, 1), data(MaxFrameData+1)...),
		"control with a stream":  append(rawHeader(byte(FrameControl), 1, 0, 2, 0), '{', '}'),
		"control with an id":     append(rawHeader(byte(FrameControl), 0, 0, 2, 3), '{', '}'),
		"empty control":          rawHeader(byte(FrameControl), 0, 0, 0, 0),
		"short credit":           append(rawHeader(byte(FrameCredit), 1, 0, 3, 1), 0, 0, 1),
		"end with a payload":     append(rawHeader(byte(FrameEnd), 1, 0, 1, 1), 'x'),
		"reset with a payload":   append(rawHeader(byte(FrameReset), 1, 0, 1, 1), 'x'),
		"length over the packet": append(rawHeader(byte(FrameData), 1, 0, 5, 1), 'x'),
		"packet over the length": append(rawHeader(byte(FrameData), 1, 0, 1, 1), 'x', 'y'),
		"huge length":            append(rawHeader(byte(FrameData), 1, 0, 1<<32-1, 1), 'x'),
	} {
		if f, err := ParseFrame(b); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %+v, %v; want ErrProtocol", name, f, err)
		}
	}
}

// countingReader counts what is read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestFrameReaderBounds: a byte stream's reader judges a header before
// it reads the payload: a hostile length is refused after 16 bytes, and
// nothing is allocated for it; a frame cut short is ErrUnexpectedEOF.
func TestFrameReaderBounds(t *testing.T) {
	for name, h := range map[string][]byte{
		"data of 4 GiB":    rawHeader(byte(FrameData), 1, 0, 1<<32-1, 1),
		"control of 1 GiB": rawHeader(byte(FrameControl), 0, 0, 1<<30, 0),
	} {
		cr := &countingReader{r: io.MultiReader(bytes.NewReader(h), bytes.NewReader(make([]byte, 1<<20)))}
		fr := NewFrameReader(cr)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := fr.Next()
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
		// The reader's own buffer (one data frame) and the error.
		if alloc := after.TotalAlloc - before.TotalAlloc; cr.n != FrameHeader || alloc > 2*(FrameHeader+MaxFrameData) {
			t.Errorf("%s: read %d bytes, allocated %d before refusing", name, cr.n, alloc)
		}
	}
	b := frameBytes(FrameData, StreamStdout, 1, []byte("hello"))
	fr := NewFrameReader(bytes.NewReader(b[:len(b)-1]))
	if _, err := fr.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("frame cut short: %v, want io.ErrUnexpectedEOF", err)
	}
}

// FuzzFrames: whatever bytes a peer sends, decoding and delivering them
// never panics, every frame accepted re-encodes to the same bytes, a
// byte stream's reader never holds more than one control message, and no
// stream ever buffers more than its window or is granted more credit.
func FuzzFrames(f *testing.F) {
	f.Add(frameBytes(FrameControl, 0, 0, []byte(`{"type":"ready"}`)))
	f.Add(frameBytes(FrameData, StreamStdout, 1, []byte("hello")))
	f.Add(append(frameBytes(FrameData, StreamStdin, 2, make([]byte, 100)), frameBytes(FrameEnd, StreamStdin, 2, nil)...))
	f.Add(frameBytes(FrameCredit, StreamStdin, 1, binary.BigEndian.AppendUint32(nil, 1)))
	f.Add(frameBytes(FrameReset, StreamFile, 1, nil))
	f.Add(rawHeader(byte(FrameData), 1, 0, 1<<32-1, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		if fr, err := ParseFrame(data); err == nil {
			if got := AppendFrame(nil, &fr); !bytes.Equal(got, data) {
				t.Fatalf("accepted %x, re-encoded %x", data, got)
			}
		}
		m := NewMux(func(*Frame) error { return nil })
		var readers []*StreamReader
		var writers []*StreamWriter
		for id := range uint64(3) {
			for s := StreamStdin; s <= StreamFile; s++ {
				r, _ := m.Reader(id, s)
				w, _ := m.Writer(id, s)
				readers = append(readers, r)
				writers = append(writers, w)
			}
		}
		fr := NewFrameReader(bytes.NewReader(data))
		for {
			b, err := fr.Next()
			if err != nil {
				break
			}
			if len(b) > FrameHeader+MaxMessage || cap(fr.buf) > FrameHeader+MaxMessage {
				t.Fatalf("a frame of %d bytes, a buffer of %d", len(b), cap(fr.buf))
			}
			fm, err := ParseFrame(b)
			if err != nil {
				t.Fatalf("the stream reader returned a frame ParseFrame refuses: %v", err)
			}
			if fm.Kind == FrameControl {
				continue
			}
			if err := m.Deliver(fm); err != nil {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("Deliver: %v, not a protocol error", err)
				}
				break
			}
		}
		for _, r := range readers {
			held := 0
			for _, c := range r.bufs {
				held += len(c.bytes())
			}
			if held > StreamWindow || r.received > r.granted || len(r.bufs) > maxChunks {
				t.Fatalf("%v of %d holds %d bytes in %d buffers (received %d, granted %d)", r.key.stream, r.key.id, held, len(r.bufs), r.received, r.granted)
			}
		}
		for _, w := range writers {
			if w.credit > StreamWindow {
				t.Fatalf("%v of %d has %d bytes of credit", w.key.stream, w.key.id, w.credit)
			}
		}
	})
}
