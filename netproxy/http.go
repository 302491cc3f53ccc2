package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	maxHeaderBytes    = 64 << 10
	readHeaderTimeout = 30 * time.Second
	idleTimeout       = 2 * time.Minute
)

var errHeadTooLarge = errors.New("request header too large")

// serveHTTP runs the HTTP/1.x loop of one client connection: forward-proxy
// requests (kept alive) and CONNECT.
func (e *Endpoint) serveHTTP(sandbox string, c *sniffConn) {
	br := bufio.NewReaderSize(c, maxHeaderBytes)
	bw := bufio.NewWriterSize(c.Conn, 4<<10)
	first := true
	for {
		if !first {
			c.SetReadDeadline(time.Now().Add(idleTimeout))
			if _, err := br.Peek(1); err != nil {
				return
			}
		}
		first = false
		c.SetReadDeadline(time.Now().Add(readHeaderTimeout))
		hosts, err := readHead(br)
		if err != nil {
			if errors.Is(err, errHeadTooLarge) {
				t := &target{sandbox: sandbox, proto: ProtoHTTP}
				e.refuse(bw, t, badRequest("request header larger than %d bytes", maxHeaderBytes), true)
			}
			return
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			t := &target{sandbox: sandbox, proto: ProtoHTTP}
			e.refuse(bw, t, badRequest("malformed request: %v", err), true)
			return
		}
		c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			e.serveConnect(sandbox, c, br, bw, req)
			return
		}
		if !e.forward(sandbox, c, br, bw, req, hosts) {
			return
		}
	}
}

// readHead waits for a complete request head in br without consuming it and
// returns the values of its Host header (which net/http drops for an
// absolute-form request).
func readHead(br *bufio.Reader) ([]string, error) {
	n := 1
	for {
		if _, err := br.Peek(n); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, errHeadTooLarge
			}
			return nil, err
		}
		buf, _ := br.Peek(br.Buffered())
		if end := headEnd(buf); end >= 0 {
			tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(buf[:end])))
			if _, err := tp.ReadLine(); err != nil {
				return nil, err
			}
			h, err := tp.ReadMIMEHeader()
			if err != nil && !errors.Is(err, io.EOF) {
				// ReadRequest reports the error.
				return nil, nil
			}
			return h["Host"], nil
		}
		n = len(buf) + 1
	}
}

// headEnd returns the length of the head in buf (through the empty line),
// or -1.
func headEnd(buf []byte) int {
	for i := 0; i < len(buf); i++ {
		if buf[i] != '\n' {
			continue
		}
		if i+1 < len(buf) && buf[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(buf) && buf[i+1] == '\r' && buf[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

// refuse answers a refusal to an HTTP client and records it.
func (e *Endpoint) refuse(bw *bufio.Writer, t *target, r *refusal, closeConn bool) {
	e.emitRefusal(t, r)
	if redact := e.p.cfg.Redact; redact != nil {
		rr := *r
		rr.Reason = redact(rr.Reason)
		r = &rr
	}
	writeRefusal(bw, r, closeConn)
}

func writeRefusal(bw *bufio.Writer, r *refusal, closeConn bool) {
	body := "moat egress proxy: " + r.Reason + "\n"
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\n", r.Status, http.StatusText(r.Status))
	fmt.Fprintf(bw, "X-Proxy-Error: %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n", r.Code, len(body))
	if closeConn {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	bw.WriteString(body)
	bw.Flush()
}

// hopHeaders are removed from forwarded requests and responses.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

type ctxKey struct{}

// forward serves one plain HTTP request; it reports whether the client
// connection may serve another.
func (e *Endpoint) forward(sandbox string, c *sniffConn, br *bufio.Reader, bw *bufio.Writer, req *http.Request, hosts []string) bool {
	start := time.Now()
	t := &target{sandbox: sandbox, proto: ProtoHTTP}
	body := &countingBody{rc: req.Body}
	keep := req.ProtoAtLeast(1, 1) && !req.Close
	// A request body the proxy did not read to its end makes the connection
	// unusable for another request.
	reusable := func() bool { return keep && (req.Body == http.NoBody || body.sawEOF()) }

	if req.URL.Scheme == "" || req.URL.Host == "" {
		e.refuse(bw, t, badRequest("not a proxy request: use an absolute URL (http://host/path) or CONNECT"), !reusable())
		return reusable()
	}
	if !strings.EqualFold(req.URL.Scheme, "http") {
		e.refuse(bw, t, badRequest("%s:// URLs must be tunnelled with CONNECT", req.URL.Scheme), !reusable())
		return reusable()
	}
	host, ip, port, err := splitHostPort(req.URL.Host, 80)
	if err != nil {
		e.refuse(bw, t, badRequest("bad URL host: %v", err), !reusable())
		return reusable()
	}
	t.host, t.ip, t.port = host, ip, port
	if len(hosts) > 0 && !sameHostPort(hosts[0], req.URL.Host, 80) {
		r := &refusal{Code: CodeHostMismatch, Status: http.StatusForbidden,
			Reason: fmt.Sprintf("the Host header does not match the URL's host %s", t)}
		e.refuse(bw, t, r, !reusable())
		return reusable()
	}

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	stop := watchClient(c, br, cancel)
	r := e.decide(ctx, t)
	stop()
	if ctx.Err() != nil {
		return false
	}
	if r != nil {
		e.refuse(bw, t, r, !reusable())
		return reusable()
	}

	// Forward.
	var (
		mu      sync.Mutex
		addr    string
		blocked *refusal
	)
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		ra := info.Conn.RemoteAddr().String()
		var bad *refusal
		if info.Reused {
			// The policy may have changed since the connection was dialled.
			if ap, err := netip.ParseAddrPort(ra); err == nil {
				bad = e.checkAddr(t, ap.Addr().Unmap())
			}
			if bad != nil {
				info.Conn.Close()
			}
		}
		mu.Lock()
		addr, blocked = ra, bad
		mu.Unlock()
	}}
	ctx = context.WithValue(httptrace.WithClientTrace(ctx, trace), ctxKey{}, t)
	out := req.WithContext(ctx)
	out.RequestURI = ""
	out.Host = req.URL.Host
	out.Close = false
	out.Header = req.Header.Clone()
	removeHopHeaders(out.Header)
	if req.Body != http.NoBody {
		out.Body = body
	}
	if strings.EqualFold(out.Header.Get("Expect"), "100-continue") {
		out.Header.Del("Expect")
		bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if bw.Flush() != nil {
			return false
		}
	}

	resp, err := e.transport.RoundTrip(out)
	if err != nil {
		if e.ctx.Err() != nil {
			return false
		}
		mu.Lock()
		r := blocked
		mu.Unlock()
		if r == nil && !errors.As(err, &r) {
			r = &refusal{Code: CodeConnectFailed, Status: http.StatusBadGateway,
				Reason: fmt.Sprintf("request to %s failed: %s", t, shortErr(err)), Err: err}
		}
		e.refuse(bw, t, r, true)
		return false
	}
	mu.Lock()
	dialled := addr
	mu.Unlock()
	e.emitAllow(t, dialled)
	down, ok := writeResponse(bw, resp, req.Method, keep, &e.p.bufs)
	resp.Body.Close()
	e.emitClose(t, dialled, body.count(), down, start)
	return ok && reusable()
}

// writeResponse writes resp to the client, copying its body with a buffer
// of bufs, and returns the body bytes written and whether the connection
// may be kept alive.
func writeResponse(bw *bufio.Writer, resp *http.Response, method string, keep bool, bufs *bufPool) (int64, bool) {
	h := resp.Header
	removeHopHeaders(h)
	bodyless := method == http.MethodHead || resp.StatusCode/100 == 1 ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	chunked := false
	switch {
	case bodyless:
	case resp.ContentLength >= 0:
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	case keep:
		chunked = true
		h.Set("Transfer-Encoding", "chunked")
		if len(resp.Trailer) > 0 {
			names := make([]string, 0, len(resp.Trailer))
			for k := range resp.Trailer {
				names = append(names, k)
			}
			h.Set("Trailer", strings.Join(names, ", "))
		}
	default:
		keep = false
	}
	if !keep {
		h.Set("Connection", "close")
	}
	status := resp.Status
	if len(status) < 4 || status[3] != ' ' {
		status = fmt.Sprintf("%03d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	fmt.Fprintf(bw, "HTTP/1.1 %s\r\n", status)
	h.Write(bw)
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		return 0, false
	}
	if bodyless {
		return 0, keep
	}
	buf := bufs.get()
	n, err := copyBody(bw, resp.Body, chunked, *buf)
	bufs.put(buf)
	if err != nil {
		return n, false
	}
	if chunked {
		bw.WriteString("0\r\n")
		resp.Trailer.Write(bw)
		bw.WriteString("\r\n")
		if bw.Flush() != nil {
			return n, false
		}
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, false
	}
	return n, keep
}

// copyBody copies a response body to the client through buf, flushing
// after every read so that streamed responses flow.
func copyBody(bw *bufio.Writer, body io.Reader, chunked bool, buf []byte) (int64, error) {
	var n int64
	for {
		m, rerr := body.Read(buf)
		if m > 0 {
			if chunked {
				fmt.Fprintf(bw, "%x\r\n", m)
			}
			bw.Write(buf[:m])
			if chunked {
				bw.WriteString("\r\n")
			}
			if err := bw.Flush(); err != nil {
				return n, err
			}
			n += int64(m)
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// countingBody counts the request body bytes the transport reads; it is
// safe for the transport's concurrent use.
type countingBody struct {
	rc  io.ReadCloser
	mu  sync.Mutex
	n   int64
	eof bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	b.n += int64(n)
	if err == io.EOF {
		b.eof = true
	}
	b.mu.Unlock()
	return n, err
}

// Close does not close the client's request body: the proxy's loop owns it.
func (b *countingBody) Close() error { return nil }

func (b *countingBody) count() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

func (b *countingBody) sawEOF() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// dialHTTP is the transport's DialContext: resolve, check and dial.
func (e *Endpoint) dialHTTP(ctx context.Context, network, addr string) (net.Conn, error) {
	rt, _ := ctx.Value(ctxKey{}).(*target)
	if rt == nil {
		return nil, errors.New("netproxy: dial without a request")
	}
	t := *rt
	host, ip, port, err := splitHostPort(addr, 0)
	if err != nil {
		return nil, badRequest("bad address %q: %v", addr, err)
	}
	t.host, t.ip, t.port = host, ip, port
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(e.ctx, cancel)
	defer stop()
	c, r := e.connect(ctx, &t)
	if r != nil {
		return nil, r
	}
	tc := &trackedConn{Conn: c, e: e}
	if !e.track(tc) {
		c.Close()
		return nil, &refusal{Code: CodeConnectFailed, Status: http.StatusBadGateway, Reason: "proxy closed"}
	}
	return tc, nil
}
