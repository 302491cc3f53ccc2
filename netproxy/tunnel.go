package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

const (
	maxClientHello      = 16<<10 + 5 // one full TLS record
	clientHelloTimeout  = 10 * time.Second
	recordTypeHandshake = 0x16
)

// alertAccessDenied is a TLS record carrying a fatal access_denied alert.
var alertAccessDenied = []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31}

// serveConnect serves an HTTP CONNECT request: decide, resolve, dial,
// answer 200 and relay.
func (e *Endpoint) serveConnect(sandbox string, c *sniffConn, br *bufio.Reader, bw *bufio.Writer, req *http.Request) {
	t := &target{sandbox: sandbox, proto: ProtoConnect}
	host, ip, port, err := splitHostPort(req.URL.Host, 0)
	if err != nil || req.URL.Host == "" {
		e.refuse(bw, t, badRequest("CONNECT needs host:port: %v", err), true)
		return
	}
	t.host, t.ip, t.port = host, ip, port

	up, r, gone := e.open(c, br, t)
	if gone {
		return
	}
	if r != nil {
		e.refuse(bw, t, r, true)
		return
	}
	defer e.untrack(up)
	addr := up.RemoteAddr().String()
	e.emitAllow(t, addr)
	start := time.Now()
	bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if bw.Flush() != nil {
		up.Close()
		return
	}
	pending, _ := br.Peek(br.Buffered())
	e.relay(t, c.Conn, bytes.Clone(pending), up, addr, start)
}

// open decides t and dials it for a tunnel (CONNECT, SOCKS5), cancelling
// the decision if the client goes away meanwhile (gone: nothing more to
// do). On success up is tracked by the endpoint; the caller untracks it.
func (e *Endpoint) open(client net.Conn, br *bufio.Reader, t *target) (up net.Conn, r *refusal, gone bool) {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	stop := watchClient(client, br, cancel)
	r = e.decide(ctx, t)
	if r == nil {
		up, r = e.connect(ctx, t)
	}
	stop()
	if ctx.Err() != nil {
		if up != nil {
			up.Close()
		}
		return nil, nil, true
	}
	if r != nil {
		return nil, r, false
	}
	if !e.track(up) {
		up.Close()
		return nil, nil, true
	}
	return up, nil, false
}

// relay copies bytes both ways between client and up until both directions
// end. Server-to-client bytes flow at once; client-to-server bytes are held
// until the client's first bytes are inspected: a TLS ClientHello whose SNI
// differs from t's name is refused with a TLS alert. pending holds client
// bytes already read.
func (e *Endpoint) relay(t *target, client net.Conn, pending []byte, up net.Conn, addr string, start time.Time) {
	defer client.Close()
	defer up.Close()

	var down int64
	downDone := make(chan struct{})
	go func() {
		defer close(downDone)
		n, err := e.p.bufs.copyConn(client, up)
		down = n
		if err != nil {
			client.Close()
			up.Close()
			return
		}
		closeWrite(client)
	}()

	head, r := e.inspect(t, client, pending)
	if r != nil {
		r.Addr = addr
		e.emitRefusal(t, r)
		if r.Code == CodeSNIMismatch {
			client.SetWriteDeadline(time.Now().Add(5 * time.Second))
			client.Write(alertAccessDenied)
		}
		up.Close()
		client.Close()
		<-downDone
		return
	}

	var upBytes int64
	_, err := up.Write(head)
	if err == nil {
		upBytes = int64(len(head))
		var n int64
		n, err = e.p.bufs.copyConn(up, client)
		upBytes += n
	}
	if err != nil {
		up.Close()
		client.Close()
	} else {
		closeWrite(up)
	}
	<-downDone
	e.emitClose(t, addr, upBytes, down, start)
}

// inspect reads the client's first bytes. If they start a TLS handshake it
// reads and parses the ClientHello and checks its SNI against t. It returns
// every byte read, to be replayed upstream.
func (e *Endpoint) inspect(t *target, client net.Conn, pending []byte) ([]byte, *refusal) {
	if len(pending) == 0 {
		var b [1]byte
		n, err := client.Read(b[:])
		if n == 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				// The relay's copy reports the error.
				return nil, nil
			}
			return nil, nil
		}
		pending = b[:n]
	}
	if pending[0] != recordTypeHandshake {
		return pending, nil
	}
	client.SetReadDeadline(time.Now().Add(clientHelloTimeout))
	defer client.SetReadDeadline(time.Time{})
	rest := bytes.NewReader(pending)
	hc := &helloConn{r: io.MultiReader(rest, client)}
	var hello *tls.ClientHelloInfo
	cfg := &tls.Config{GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
		hello = chi
		return nil, errHelloCaptured
	}}
	ctx, cancel := context.WithTimeout(e.ctx, clientHelloTimeout)
	err := tls.Server(hc, cfg).HandshakeContext(ctx)
	cancel()
	head := append(hc.buf.Bytes(), pending[len(pending)-rest.Len():]...)
	if hello == nil {
		return nil, &refusal{Code: CodeBadClientHello, Reason: fmt.Sprintf("unreadable TLS ClientHello: %v", err), Err: err}
	}
	sni, _, _ := normalizeHost(hello.ServerName)
	if hello.ServerName != "" && (t.ip.IsValid() || sni != t.host) {
		return nil, &refusal{Code: CodeSNIMismatch, Status: http.StatusForbidden,
			Reason: fmt.Sprintf("TLS server name %q does not match the tunnel's host %s", hello.ServerName, t.host)}
	}
	return head, nil
}

var (
	errHelloCaptured = errors.New("netproxy: ClientHello captured")
	errHelloTooLarge = errors.New("netproxy: ClientHello too large")
)

// helloConn is the net.Conn a tls.Server reads the ClientHello from: it
// records what it reads (up to maxClientHello) and discards writes.
type helloConn struct {
	r   io.Reader
	buf bytes.Buffer
}

func (c *helloConn) Read(p []byte) (int, error) {
	room := maxClientHello - c.buf.Len()
	if room <= 0 {
		return 0, errHelloTooLarge
	}
	if len(p) > room {
		p = p[:room]
	}
	n, err := c.r.Read(p)
	c.buf.Write(p[:n])
	return n, err
}

func (c *helloConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }

// closeWrite half-closes c, or closes it if it cannot.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
