package netproxy

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// pattern returns n deterministic pseudo-random bytes.
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	var s [32]byte
	s[0] = byte(seed)
	rand.NewChaCha8(s).Read(b)
	return b
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	for _, x := range []net.Conn{c, s} {
		x.SetDeadline(time.Now().Add(testTimeout))
	}
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

type copyResult struct {
	n   int64
	err error
}

// TestCopyConnExact: copyConn moves every byte of a transfer many times
// its buffer, in order, from a TCP source through the poller-driven read
// (copyRaw handles it) and from a source without a descriptor (net.Pipe:
// the buffered fallback), and ends at the source's end with a nil error.
func TestCopyConnExact(t *testing.T) {
	want := pattern(1, 20*copyBufSize+12345)
	for _, tc := range []struct {
		name string
		src  func(t *testing.T) (feed io.WriteCloser, src net.Conn)
		raw  bool
	}{
		{"tcp", func(t *testing.T) (io.WriteCloser, net.Conn) {
			a, b := tcpPair(t)
			return closeWriter{a}, b
		}, true},
		{"pipe", func(t *testing.T) (io.WriteCloser, net.Conn) {
			a, b := net.Pipe()
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feed, src := tc.src(t)
			if _, handled, _ := new(bufPool).copyRaw(io.Discard, &noFD{src}); handled {
				t.Fatal("copyRaw handled a source without a descriptor")
			}
			dst, sink := tcpPair(t)
			go func() {
				feed.Write(want)
				feed.Close()
			}()
			var pool bufPool
			done := make(chan copyResult, 1)
			go func() {
				var r copyResult
				if tc.raw {
					var handled bool
					r.n, handled, r.err = pool.copyRaw(dst, src)
					if !handled {
						r.err = errors.New("copyRaw did not handle a TCP source")
					}
				} else {
					r.n, r.err = pool.copyConn(dst, src)
				}
				dst.CloseWrite()
				done <- r
			}()
			got, err := io.ReadAll(sink)
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.n != int64(len(want)) {
				t.Fatalf("copy = %d, %v; want %d, nil", r.n, r.err, len(want))
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("received %d bytes that differ from the %d sent", len(got), len(want))
			}
		})
	}
}

// TestCopyConnEnds: a copy waiting on an idle TCP source returns an
// error, not a clean end, when the source's read deadline passes or the
// source is closed (Endpoint.Close ends relays this way).
func TestCopyConnEnds(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		_, src := tcpPair(t)
		dst, _ := tcpPair(t)
		src.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := new(bufPool).copyConn(dst, src)
		if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("copy = %d, %v; want 0, a deadline error", n, err)
		}
	})
	t.Run("close", func(t *testing.T) {
		_, src := tcpPair(t)
		dst, _ := tcpPair(t)
		done := make(chan copyResult, 1)
		go func() {
			n, err := new(bufPool).copyConn(dst, src)
			done <- copyResult{n, err}
		}()
		src.Close()
		if r := <-done; r.n != 0 || !errors.Is(r.err, net.ErrClosed) {
			t.Fatalf("copy = %d, %v; want 0, net.ErrClosed", r.n, r.err)
		}
	})
}

// closeWriter half-closes a TCP connection on Close.
type closeWriter struct{ *net.TCPConn }

func (c closeWriter) Close() error { return c.CloseWrite() }

// noFD hides a connection's descriptor.
type noFD struct{ net.Conn }
