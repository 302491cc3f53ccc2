package netproxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// Sizes of the large transfers: many times copyBufSize, and not a
// multiple of it.
const (
	largeDown = 24*copyBufSize + 777
	largeUp   = 9*copyBufSize + 333
)

// duplexServer accepts one connection, sends down and half-closes while
// it reads the client's bytes to their end; it reports what it read, or
// nil if the client's end never came.
func duplexServer(t *testing.T, down []byte) (int, <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(testTimeout))
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			c.Write(down)
			c.(*net.TCPConn).CloseWrite()
		}()
		b, err := io.ReadAll(c)
		if err != nil {
			b = nil
		}
		<-sent
		got <- b
	}()
	return ln.Addr().(*net.TCPAddr).Port, got
}

// TestTunnelLargeExact: through a CONNECT and a SOCKS5 tunnel, a large
// transfer each way arrives exact, in order and complete; the client's
// half-close reaches upstream while the download goes on, and the
// upstream's reaches the client; the close event counts both directions
// exactly.
func TestTunnelLargeExact(t *testing.T) {
	down, up := pattern(2, largeDown), pattern(3, largeUp)
	for _, proto := range []string{ProtoConnect, ProtoSOCKS5} {
		t.Run(proto, func(t *testing.T) {
			e := newEnv(t)
			port, upGot := duplexServer(t, down)
			var tunnel net.Conn
			var raw *net.TCPConn
			switch proto {
			case ProtoConnect:
				resp, c := e.connect("api.moat.test:" + strconv.Itoa(port))
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("CONNECT: %d", resp.StatusCode)
				}
				tunnel, raw = c, c.(*bufConn).Conn.(*net.TCPConn)
			case ProtoSOCKS5:
				_, reply, c := e.socks([]byte{socksNoAuth}, socksCmdConnect, socksAtypDomain, []byte("api.moat.test"), port)
				if reply != socksSucceeded {
					t.Fatalf("SOCKS5 reply %d", reply)
				}
				tunnel, raw = c, c.(*net.TCPConn)
			}
			go func() {
				tunnel.Write(up)
				raw.CloseWrite()
			}()
			got, err := io.ReadAll(tunnel)
			if err != nil {
				t.Fatalf("download: %v", err)
			}
			if !bytes.Equal(got, down) {
				t.Errorf("downloaded %d bytes that differ from the %d sent", len(got), len(down))
			}
			if b := <-upGot; !bytes.Equal(b, up) {
				t.Errorf("upstream received %d bytes that differ from the %d sent", len(b), len(up))
			}
			ev := e.events.wait(t, "close", func(ev Event) bool { return ev.Kind == KindClose && ev.Proto == proto })
			if ev.BytesUp != largeUp || ev.BytesDown != largeDown {
				t.Errorf("close event counts up %d down %d, want %d %d", ev.BytesUp, ev.BytesDown, largeUp, largeDown)
			}
		})
	}
}

// TestForwardLargeExact: a plain HTTP request forwarded by the proxy
// carries a large upload and a large download exact, whether the answer
// has a Content-Length or is streamed (chunked to the client), and the
// close event counts both bodies.
func TestForwardLargeExact(t *testing.T) {
	down, up := pattern(4, largeDown), pattern(5, largeUp)
	upGot := make(chan []byte, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		upGot <- b
		if r.URL.Path == "/sized" {
			w.Header().Set("Content-Length", strconv.Itoa(len(down)))
		}
		for rest := down; len(rest) > 0; {
			k := min(len(rest), 100_000)
			w.Write(rest[:k])
			w.(http.Flusher).Flush()
			rest = rest[k:]
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	for _, path := range []string{"/sized", "/streamed"} {
		t.Run(path[1:], func(t *testing.T) {
			e := newEnv(t)
			url := fmt.Sprintf("http://api.moat.test:%d%s", port, path)
			resp, err := e.client(nil).Post(url, "application/octet-stream", bytes.NewReader(up))
			if err != nil {
				t.Fatal(err)
			}
			chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
			if chunked != (path == "/streamed") {
				t.Errorf("%s: Transfer-Encoding %q", path, resp.TransferEncoding)
			}
			if got := readBody(t, resp); got != string(down) {
				t.Errorf("downloaded %d bytes that differ from the %d sent", len(got), len(down))
			}
			if b := <-upGot; !bytes.Equal(b, up) {
				t.Errorf("upstream received %d bytes that differ from the %d sent", len(b), len(up))
			}
			ev := e.events.wait(t, "close", func(ev Event) bool { return ev.Kind == KindClose && ev.Proto == ProtoHTTP })
			if ev.BytesUp != largeUp || ev.BytesDown != largeDown {
				t.Errorf("close event counts up %d down %d, want %d %d", ev.BytesUp, ev.BytesDown, largeUp, largeDown)
			}
		})
	}
}
