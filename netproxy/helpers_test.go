package netproxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testdns"
)

const testTimeout = 10 * time.Second

// fakePolicy is a Policy for tests.
type fakePolicy struct {
	mu       sync.Mutex
	allowAll bool
	allow    map[string]bool
	denyAll  bool // the live switch
	cidrs    []netip.Prefix
	denyNets []netip.Prefix
	ask      chan bool     // when set, Decide blocks for an answer
	asked    chan string   // Decide signals here (when set)
	gaveUp   chan struct{} // Decide signals here when its ctx ends while asking
	addrs    []addrCall
}

type addrCall struct {
	a       netip.Addr
	special bool
}

func (f *fakePolicy) Decide(ctx context.Context, host string, port int) Verdict {
	f.mu.Lock()
	ask, asked, gaveUp := f.ask, f.asked, f.gaveUp
	f.mu.Unlock()
	if asked != nil {
		asked <- host
	}
	if ask != nil {
		select {
		case ok := <-ask:
			if !ok {
				return Verdict{Reason: "the user said no", Rule: "ask"}
			}
			return Verdict{Allow: true, Rule: "ask"}
		case <-ctx.Done():
			if gaveUp != nil {
				close(gaveUp)
			}
			return Verdict{Reason: "no answer"}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.denyAll {
		return Verdict{Reason: "switched off", Rule: "switch"}
	}
	if f.allowAll || f.allow[host] {
		return Verdict{Allow: true, Rule: "allow " + host, Reason: "listed"}
	}
	return Verdict{Rule: "default", Reason: host + " is not on the allow list"}
}

func (f *fakePolicy) Addr(a netip.Addr, special bool) Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs = append(f.addrs, addrCall{a, special})
	for _, p := range f.denyNets {
		if p.Contains(a) {
			return Verdict{Rule: "deny " + p.String()}
		}
	}
	if !special {
		return Verdict{Allow: true}
	}
	for _, p := range f.cidrs {
		if p.Contains(a) {
			return Verdict{Allow: true, Rule: "cidr " + p.String()}
		}
	}
	return Verdict{}
}

func (f *fakePolicy) set(fn func(f *fakePolicy)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakePolicy) addrCalls() []addrCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]addrCall(nil), f.addrs...)
}

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []Event
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) add(ev Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// wait returns the first event matching pred, waiting for it.
func (r *recorder) wait(t *testing.T, what string, pred func(Event) bool) Event {
	t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	for {
		for _, ev := range r.all() {
			if pred(ev) {
				return ev
			}
		}
		select {
		case <-r.notify:
		case <-deadline.C:
			t.Fatalf("no %s event; events: %+v", what, r.all())
		}
	}
}

// env is a proxy endpoint serving one sandbox, with DNS and a fake policy.
type env struct {
	t      *testing.T
	dns    *testdns.Server
	pol    *fakePolicy
	proxy  *Proxy
	ep     *Endpoint
	addr   string
	events *recorder
	served chan error
}

var loopback = netip.MustParsePrefix("127.0.0.0/8")

func newEnv(t *testing.T, tweak ...func(*Config)) *env {
	t.Helper()
	dns := testdns.Start(t, map[string][]netip.Addr{
		"api.moat.test":    {netip.MustParseAddr("127.0.0.1")},
		"other.moat.test":  {netip.MustParseAddr("127.0.0.1")},
		"rebind.moat.test": {netip.MustParseAddr("10.0.0.1")},
		"mixed.moat.test":  {netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("10.0.0.1")},
		"hostip.moat.test": {netip.MustParseAddr("192.0.2.10")},
	})
	ev := newRecorder()
	cfg := Config{
		DNSServer:   dns.Addr(),
		Logger:      slog.New(slog.DiscardHandler),
		DialTimeout: 2 * time.Second,
		Events:      ev.add,
		HostAddrs:   func() ([]netip.Addr, error) { return nil, nil },
	}
	for _, f := range tweak {
		f(&cfg)
	}
	pol := &fakePolicy{allowAll: true, allow: map[string]bool{}, cidrs: []netip.Prefix{loopback}}
	p := New(cfg)
	ep := p.Endpoint(pol)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dns: dns, pol: pol, proxy: p, ep: ep, addr: ln.Addr().String(), events: ev, served: make(chan error, 1)}
	go func() { e.served <- ep.Serve("sb-1", ln) }()
	t.Cleanup(func() {
		ep.Close()
		select {
		case err := <-e.served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(testTimeout):
			t.Error("Serve did not return after Close")
		}
	})
	return e
}

// client returns an HTTP client using the proxy.
func (e *env) client(tlsCfg *tls.Config) *http.Client {
	u, _ := url.Parse("http://" + e.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: tlsCfg}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: testTimeout}
}

func (e *env) dial() net.Conn {
	e.t.Helper()
	c, err := net.DialTimeout("tcp", e.addr, testTimeout)
	if err != nil {
		e.t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(testTimeout))
	e.t.Cleanup(func() { c.Close() })
	return c
}

// bufConn reads through a bufio.Reader that may hold tunnel bytes.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connect opens a CONNECT tunnel to hostport and returns the response and,
// on 200, the tunnel.
func (e *env) connect(hostport string) (*http.Response, net.Conn) {
	e.t.Helper()
	c := e.dial()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		e.t.Fatalf("CONNECT %s: %v", hostport, err)
	}
	return resp, &bufConn{Conn: c, r: br}
}

// raw sends a raw request and reads the response.
func (e *env) raw(request string) *http.Response {
	e.t.Helper()
	c := e.dial()
	io.WriteString(c, request)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatalf("raw request: %v", err)
	}
	return resp
}

// socks runs a SOCKS5 handshake; it returns the method reply and, if a
// method was accepted, the request's reply code and the connection.
func (e *env) socks(methods []byte, cmd, atyp byte, addr []byte, port int) (method, reply byte, c net.Conn) {
	e.t.Helper()
	c = e.dial()
	c.Write(append([]byte{5, byte(len(methods))}, methods...))
	var mr [2]byte
	if _, err := io.ReadFull(c, mr[:]); err != nil {
		e.t.Fatalf("socks method reply: %v", err)
	}
	if mr[1] == 0xFF {
		return mr[1], 0, c
	}
	req := []byte{5, cmd, 0, atyp}
	if atyp == socksAtypDomain {
		req = append(req, byte(len(addr)))
	}
	req = append(req, addr...)
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	c.Write(req)
	var rep [10]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		e.t.Fatalf("socks reply: %v", err)
	}
	return mr[1], rep[1], c
}

// upstream is an HTTP server on 127.0.0.1.
func upstream(t *testing.T) (*httptest.Server, int) {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Upstream-Host", r.Host)
		w.Header().Set("X-Saw-Proxy-Auth", strconv.FormatBool(r.Header.Get("Proxy-Authorization") != ""))
		fmt.Fprintf(w, "hello %s %s", r.URL.Path, body)
	}))
	t.Cleanup(ts.Close)
	return ts, ts.Listener.Addr().(*net.TCPAddr).Port
}

// echoServer accepts TCP connections, writes banner, then echoes.
func echoServer(t *testing.T, banner string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, banner)
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// recordingServer accepts one connection and reports how many bytes it
// received before the connection ended.
func recordingServer(t *testing.T) (int, <-chan int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(testTimeout))
		b, _ := io.ReadAll(c)
		got <- len(b)
	}()
	return ln.Addr().(*net.TCPAddr).Port, got
}

// tlsUpstream is an HTTPS server with a certificate for api.moat.test and
// 127.0.0.1; it returns the server and a client config trusting it.
func tlsUpstream(t *testing.T) (*httptest.Server, int, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "api.moat.test"},
		DNSNames:              []string{"api.moat.test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "secure %s", r.TLS.ServerName)
	}))
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return ts, ts.Listener.Addr().(*net.TCPAddr).Port, &tls.Config{RootCAs: pool}
}

// checkRefusal checks an HTTP refusal: status, X-Proxy-Error, content type
// and body.
func checkRefusal(t *testing.T, resp *http.Response, status int, code string) {
	t.Helper()
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status || resp.Header.Get("X-Proxy-Error") != code {
		t.Fatalf("got %d %q (%q), want %d %q", resp.StatusCode, resp.Header.Get("X-Proxy-Error"), body, status, code)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain" {
		t.Errorf("Content-Type = %q", ct)
	}
	if !strings.HasPrefix(string(body), "moat egress proxy: ") || !strings.HasSuffix(string(body), "\n") {
		t.Errorf("body = %q", body)
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func isDeny(code string) func(Event) bool {
	return func(ev Event) bool { return ev.Kind == KindConnect && ev.Decision == DecisionDeny && ev.Code == code }
}
