package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/agent"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// An agent's fetch_url, made by the daemon through its sandbox's egress
// proxy.
//
// The daemon does not dial the URL itself: it connects to the egress
// proxy endpoint of the agent's sandbox (the netproxy.Endpoint that serves
// the sandbox's own listener) over an in-memory connection, exactly as a
// process of the sandbox connects to its listener, and asks it for the URL
// as that process would (a forward-proxy request for http://, a CONNECT
// tunnel for https://, with TLS verified by the daemon end to end). So the
// fetch passes every check the sandbox's traffic passes: the sandbox's
// allowlist and policy at that moment (an ask rule holds it for an
// approver), the proxy's resolution and address checks (no metadata,
// private, loopback or host address unless the managed policy names it),
// one decision per redirect hop (each is a new request through the
// proxy), and the proxy's net.* audit events and metrics, under the
// sandbox's id. A sandbox without the proxy (network mode none) has no
// way out, and neither has its agent's fetch_url.

// Bounds of a fetch.
const (
	// fetchTimeout bounds one fetch_url, redirects included.
	fetchTimeout = time.Minute
	// fetchMaxRedirects bounds the redirects a fetch follows.
	fetchMaxRedirects = 5
	// fetchDefaultMax is the body kept when the caller names no bound.
	fetchDefaultMax = 1 << 20
	// fetchMaxURL bounds the URL's length.
	fetchMaxURL = 8 << 10
)

// errNoNetwork: the agent's sandbox has no egress proxy.
var errNoNetwork = errors.New("this agent has no network: its sandbox's network mode is none (the agents document's sandbox.network sets mode proxy and allow_domains)")

// fetch gets rawURL for caller c through the egress proxy of sandbox id
// (the caller's), keeping at most max bytes of the body (max ≤ 0: the
// default; never more than the daemon's file cap). A refusal (by the
// policy, the proxy's checks, a redirect to another scheme) is an error
// saying why; an upstream's error status is a result.
func (s *Service) fetch(ctx context.Context, c Caller, id, rawURL string, max int64) (*agent.FetchResult, error) {
	u, err := checkFetchURL(rawURL)
	if err != nil {
		return nil, err
	}
	if max <= 0 {
		max = fetchDefaultMax
	}
	max = min(max, s.cfg.MaxFileBytes)
	m, done, err := s.use(c, id)
	if err != nil {
		return nil, err
	}
	defer done()
	m.rootMu.Lock()
	b, mode := m.netb, m.netMode
	m.rootMu.Unlock()
	if mode != sandbox.NetProxy || b == nil || b.ep == nil {
		return nil, errNoNetwork
	}

	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	ln := newPipeListener()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = b.ep.Serve(id, ln) // ends when ln closes (or the sandbox does)
	}()
	defer func() { ln.Close(); <-served }()

	// refused is set by the transport's dialing goroutine, which may
	// outlive hc.Do when ctx ends first.
	var refused atomic.Pointer[error]
	tr := &http.Transport{
		// Every request goes to the sandbox's proxy: the address below is
		// a name only, the connection is ln's.
		Proxy:       http.ProxyURL(&url.URL{Scheme: "http", Host: "egress-proxy.moat:3128"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return ln.dial(ctx) },
		// A refused tunnel: the proxy's code and reason, as the error.
		OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err := proxyRefusal(resp)
			refused.Store(&err)
			return err
		},
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		DisableKeepAlives:      true,
		ForceAttemptHTTP2:      false,
		ResponseHeaderTimeout:  fetchTimeout,
		MaxResponseHeaderBytes: 64 << 10,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) > fetchMaxRedirects {
			return fmt.Errorf("more than %d redirects", fetchMaxRedirects)
		}
		if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
			return fmt.Errorf("a redirect to a %s: URL (only http and https are fetched)", req.URL.Scheme)
		}
		return nil
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "url: %v", err)
	}
	req.Header.Set("User-Agent", "moat-agent-fetch/1")
	resp, err := hc.Do(req)
	if err != nil {
		if r := refused.Load(); r != nil {
			return nil, *r
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is the caller's own
		}
		return nil, fmt.Errorf("fetch %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Proxy-Error") != "" && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		return nil, proxyRefusal(resp)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: reading the body: %w", u.Redacted(), err)
	}
	out := &agent.FetchResult{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: body}
	if int64(len(body)) > max {
		out.Body, out.Truncated = body[:max], true
	}
	return out, nil
}

// checkFetchURL parses a URL an agent may fetch: absolute http or https,
// with a host, without credentials.
func checkFetchURL(raw string) (*url.URL, error) {
	if len(raw) > fetchMaxURL {
		return nil, api.Errorf(api.CodeInvalidArgument, "url: longer than %d bytes", fetchMaxURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "url: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, api.Errorf(api.CodeInvalidArgument, "url: only http and https URLs are fetched, not %q", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return nil, api.Errorf(api.CodeInvalidArgument, "url: no host")
	case u.User != nil:
		return nil, api.Errorf(api.CodeInvalidArgument, "url: credentials in a URL are not sent")
	}
	return u, nil
}

// ErrFetchRefused is wrapped by the error of a fetch the egress proxy
// refused.
var ErrFetchRefused = errors.New("refused by the egress proxy")

// proxyRefusal is the error of a refusal the proxy answered (resp): its
// code (X-Proxy-Error) and its one-line reason.
func proxyRefusal(resp *http.Response) error {
	code := resp.Header.Get("X-Proxy-Error")
	reason := ""
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		reason = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "moat egress proxy:"))
	}
	if code == "" {
		code = "refused"
	}
	if reason == "" {
		reason = resp.Status
	}
	return fmt.Errorf("%w (%s): %s", ErrFetchRefused, code, reason)
}

// pipeListener is a net.Listener of in-memory connections, which dial
// makes: the daemon's own way into an egress proxy endpoint.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept returns the next connection dial made, or net.ErrClosed once
// closed.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; the connections made stay open.
func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a placeholder: the listener has no address.
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial connects to the listener: its end of a new pipe.
func (l *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	mine, theirs := net.Pipe()
	select {
	case l.conns <- theirs:
		return mine, nil
	case <-l.done:
	case <-ctx.Done():
	}
	mine.Close()
	theirs.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, net.ErrClosed
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "daemon" }
