package netproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Policy decides for one sandbox. It is consulted on every connection and
// every HTTP request, so a policy change applies to running sandboxes at
// once. Implementations must be safe for concurrent use.
type Policy interface {
	// Decide judges a destination. host is normalized: lower case, no
	// trailing dot, an IP literal in canonical form (IPv4-mapped IPv6
	// unmapped); port is the destination port. It may block (an "ask"
	// waiting for a human's approval) until ctx is done; the proxy holds the
	// client's connection meanwhile.
	Decide(ctx context.Context, host string, port int) Verdict
	// Addr judges one address the proxy is about to dial (a resolved answer
	// or an IP literal). special says the proxy's own table counts it as
	// internal (see [Special]; the host's own addresses count too): such an
	// address must be refused unless the policy names it explicitly (a CIDR
	// allow). An ordinary address may still be refused (a deny CIDR).
	Addr(a netip.Addr, special bool) Verdict
}

// Verdict is a policy's answer.
type Verdict struct {
	// Allow is true when the destination or address may be reached.
	Allow bool
	// Code is the X-Proxy-Error code when refused; "" means "denied" (or
	// "blocked-address" for Policy.Addr).
	Code string
	// Reason is one line a person or an agent can read.
	Reason string
	// Rule names the deciding rule, for the audit ("" if none).
	Rule string
}

// Refusal codes: the values of the X-Proxy-Error header and of Event.Code.
const (
	CodeDenied             = "denied"
	CodeBlockedAddress     = "blocked-address"
	CodeHostMismatch       = "host-mismatch"
	CodeSNIMismatch        = "sni-mismatch"
	CodeBadClientHello     = "bad-client-hello"
	CodeDNSFailure         = "dns-failure"
	CodeConnectFailed      = "connect-failed"
	CodeBadRequest         = "bad-request"
	CodeTooManyConnections = "too-many-connections"
)

// Config configures a Proxy. Zero values take defaults.
type Config struct {
	// DNSServer is the "host:port" of the DNS server the proxy asks; ""
	// means the host's resolver (Go's pure-Go resolver: /etc/hosts,
	// /etc/resolv.conf).
	DNSServer string
	// DialTimeout bounds each upstream dial; default 10s.
	DialTimeout time.Duration
	// MaxConns bounds the live client connections per endpoint; default 1024.
	MaxConns int
	// Logger receives the proxy's logs; default slog.Default().
	Logger *slog.Logger
	// Events, if not nil, is called synchronously for every event.
	Events func(Event)
	// Redact, if not nil, is applied to the text of every event (before
	// it is logged or passed to Events) and to the body of every refusal
	// the proxy answers, so that a secret in a host name is never written
	// out, not even in the lower case the proxy gives host names.
	Redact func(string) string
	// HostAddrs returns the host's own addresses, which count as special;
	// default net.InterfaceAddrs. The answer is cached for 1 s.
	HostAddrs func() ([]netip.Addr, error)
}

const (
	defaultDialTimeout = 10 * time.Second
	defaultMaxConns    = 1024
	sniffTimeout       = 30 * time.Second
)

// Proxy holds what the endpoints of all sandboxes share: configuration, the
// resolver and the cache of the host's addresses. It holds no connection.
type Proxy struct {
	cfg      Config
	log      *slog.Logger
	resolver *net.Resolver
	bufs     bufPool // copy buffers of every endpoint's relays and forwarded bodies

	hostMu  sync.Mutex
	hostAt  time.Time
	hostSet map[netip.Addr]struct{}
}

// New returns a Proxy configured by cfg.
func New(cfg Config) *Proxy {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = defaultMaxConns
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HostAddrs == nil {
		cfg.HostAddrs = interfaceAddrs
	}
	return &Proxy{cfg: cfg, log: cfg.Logger, resolver: newResolver(cfg.DNSServer)}
}

// Endpoint is the proxy of one sandbox: it serves that sandbox's listener
// and decides with that sandbox's policy. Its upstream connections (and
// their pool) are its own.
type Endpoint struct {
	p         *Proxy
	pol       Policy
	ctx       context.Context
	cancel    context.CancelFunc
	transport *http.Transport

	mu      sync.Mutex
	closed  bool
	lns     map[net.Listener]struct{}
	conns   map[io.Closer]struct{}
	clients int
}

// Endpoint returns the proxy of one sandbox, deciding with pol.
func (p *Proxy) Endpoint(pol Policy) *Endpoint {
	ctx, cancel := context.WithCancel(context.Background())
	e := &Endpoint{
		p:      p,
		pol:    pol,
		ctx:    ctx,
		cancel: cancel,
		lns:    make(map[net.Listener]struct{}),
		conns:  make(map[io.Closer]struct{}),
	}
	e.transport = &http.Transport{
		Proxy:              nil, // never read proxy variables from the environment
		DialContext:        e.dialHTTP,
		ForceAttemptHTTP2:  false,
		DisableCompression: true,
		// Large buffers: a download is read from upstream in big
		// pieces, not the default 4 KiB (bench/netproxy).
		ReadBufferSize:        256 << 10,
		WriteBufferSize:       64 << 10,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0,
	}
	return e
}

// Serve answers the connections of ln until Close; sandboxID names the
// sandbox in events. It returns nil after Close. If Close ran before Serve,
// Serve closes ln and returns at once.
func (e *Endpoint) Serve(sandboxID string, ln net.Listener) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		ln.Close()
		return nil
	}
	e.lns[ln] = struct{}{}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.lns, ln)
		e.mu.Unlock()
		ln.Close()
	}()

	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if e.ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("netproxy: accept: %w", err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			e.p.log.Warn("netproxy: accept failed; retrying", "sandbox", sandboxID, "err", err, "delay", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-e.ctx.Done():
				t.Stop()
				return nil
			}
			continue
		}
		backoff = 0
		switch e.admit(c) {
		case admitOK:
			go e.handle(sandboxID, c)
		case admitClosed:
			c.Close()
			return nil
		case admitFull:
			c.Close()
			e.emit(Event{Sandbox: sandboxID, Kind: KindConnect, Decision: DecisionDeny,
				Code: CodeTooManyConnections, Reason: fmt.Sprintf("more than %d live connections", e.p.cfg.MaxConns)})
		}
	}
}

// Close stops serving and closes every open connection of the endpoint
// (client and upstream sides) and its idle upstream connections. It is safe
// to call more than once and concurrently with Serve.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	e.closed = true
	e.cancel()
	closers := make([]io.Closer, 0, len(e.lns)+len(e.conns))
	for ln := range e.lns {
		closers = append(closers, ln)
	}
	for c := range e.conns {
		closers = append(closers, c)
	}
	e.mu.Unlock()
	for _, c := range closers {
		c.Close()
	}
	e.transport.CloseIdleConnections()
	return nil
}

// CloseConnections closes every open connection of the endpoint (client
// and upstream sides) and its idle upstream connections, and keeps
// serving: a client connects again and is judged by the policy of that
// moment. A narrowed policy ends the tunnels it would no longer open this
// way. It returns how many client connections were open.
func (e *Endpoint) CloseConnections() int {
	e.mu.Lock()
	closers := make([]io.Closer, 0, len(e.conns))
	for c := range e.conns {
		closers = append(closers, c)
	}
	n := e.clients
	e.mu.Unlock()
	for _, c := range closers {
		c.Close()
	}
	e.transport.CloseIdleConnections()
	return n
}

type admitResult int

const (
	admitOK admitResult = iota
	admitClosed
	admitFull
)

// admit counts and tracks a new client connection.
func (e *Endpoint) admit(c net.Conn) admitResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return admitClosed
	case e.clients >= e.p.cfg.MaxConns:
		return admitFull
	}
	e.clients++
	e.conns[c] = struct{}{}
	return admitOK
}

// track records an upstream connection so that Close closes it. It reports
// false (and the caller must close c) when the endpoint is closed.
func (e *Endpoint) track(c io.Closer) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.conns[c] = struct{}{}
	return true
}

func (e *Endpoint) untrack(c io.Closer) {
	e.mu.Lock()
	delete(e.conns, c)
	e.mu.Unlock()
}

// handle sniffs the first byte of a client connection and dispatches it.
func (e *Endpoint) handle(sandbox string, c net.Conn) {
	defer func() {
		c.Close()
		e.mu.Lock()
		delete(e.conns, c)
		e.clients--
		e.mu.Unlock()
	}()
	var b [1]byte
	c.SetReadDeadline(time.Now().Add(sniffTimeout))
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	sc := &sniffConn{Conn: c, first: b[:]}
	switch b[0] {
	case socksVersion5:
		e.serveSOCKS(sandbox, sc)
	case socksVersion4:
		e.p.log.Debug("netproxy: SOCKS4 is not supported; closing", "sandbox", sandbox)
	default:
		e.serveHTTP(sandbox, sc)
	}
}

// sniffConn replays the sniffed first byte before reading from the
// connection.
type sniffConn struct {
	net.Conn
	first []byte
}

func (c *sniffConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// trackedConn is an upstream connection of the HTTP transport, tracked by
// its endpoint until closed.
type trackedConn struct {
	net.Conn
	e    *Endpoint
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.e.untrack(c) })
	return c.Conn.Close()
}

// watchClient cancels cancel if the client goes away (EOF or error) while
// nothing else reads from it. stop ends the watch; it must be called before
// the connection is read again.
func watchClient(conn net.Conn, br interface{ Peek(int) ([]byte, error) }, cancel context.CancelFunc) (stop func()) {
	done := make(chan struct{})
	var mu sync.Mutex
	stopping := false
	go func() {
		defer close(done)
		if _, err := br.Peek(1); err != nil {
			mu.Lock()
			s := stopping
			mu.Unlock()
			if !s {
				cancel()
			}
		}
	}()
	return func() {
		mu.Lock()
		stopping = true
		mu.Unlock()
		conn.SetReadDeadline(aLongTimeAgo)
		<-done
		conn.SetReadDeadline(time.Time{})
	}
}

var aLongTimeAgo = time.Unix(1, 0)
