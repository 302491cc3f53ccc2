package netproxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestHTTPForwardAllowDeny(t *testing.T) {
	e := newEnv(t)
	_, port := upstream(t)
	e.pol.set(func(f *fakePolicy) { f.allowAll = false; f.allow["api.moat.test"] = true })
	c := e.client(nil)

	req, _ := http.NewRequest("POST", fmt.Sprintf("http://api.moat.test:%d/x", port), strings.NewReader("body"))
	req.Header.Set("Proxy-Authorization", "Basic secret")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); resp.StatusCode != 200 || got != "hello /x body" {
		t.Fatalf("allowed: %d %q", resp.StatusCode, got)
	}
	if resp.Header.Get("X-Saw-Proxy-Auth") != "false" {
		t.Error("Proxy-Authorization reached the upstream")
	}
	if h := resp.Header.Get("X-Upstream-Host"); h != fmt.Sprintf("api.moat.test:%d", port) {
		t.Errorf("upstream saw Host %q", h)
	}

	resp, err = c.Get(fmt.Sprintf("http://other.moat.test:%d/x", port))
	if err != nil {
		t.Fatal(err)
	}
	checkRefusal(t, resp, 403, CodeDenied)
	ev := e.events.wait(t, "deny", isDeny(CodeDenied))
	if ev.Host != "other.moat.test" || ev.Proto != ProtoHTTP || ev.Rule != "default" {
		t.Errorf("deny event: %+v", ev)
	}
}

func TestKeepAliveRedecided(t *testing.T) {
	e := newEnv(t)
	_, port := upstream(t)
	c := e.client(nil)
	u := fmt.Sprintf("http://api.moat.test:%d/", port)
	var reused []bool
	get := func() *http.Response {
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", u, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := get(); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	} else {
		readBody(t, resp)
	}
	e.pol.set(func(f *fakePolicy) { f.denyAll = true })
	checkRefusal(t, get(), 403, CodeDenied)
	e.pol.set(func(f *fakePolicy) { f.denyAll = false })
	if resp := get(); resp.StatusCode != 200 {
		t.Fatalf("third: %d", resp.StatusCode)
	} else {
		readBody(t, resp)
	}
	if len(reused) != 3 || !reused[1] || !reused[2] {
		t.Errorf("connection reuse = %v, want one keep-alive connection", reused)
	}
}

func TestHostMismatch(t *testing.T) {
	e := newEnv(t)
	_, port := upstream(t)
	resp := e.raw(fmt.Sprintf("GET http://api.moat.test:%d/ HTTP/1.1\r\nHost: evil.moat.test\r\n\r\n", port))
	checkRefusal(t, resp, 403, CodeHostMismatch)
	e.events.wait(t, "host-mismatch", isDeny(CodeHostMismatch))

	// Control: the same host, in another case with a trailing dot, works.
	resp = e.raw(fmt.Sprintf("GET http://api.moat.test:%d/ HTTP/1.1\r\nHost: API.moat.test.:%d\r\n\r\n", port, port))
	if got := readBody(t, resp); resp.StatusCode != 200 || got != "hello / " {
		t.Fatalf("control: %d %q", resp.StatusCode, got)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	checkRefusal(t, e.raw("GET / HTTP/1.1\r\nHost: api.moat.test\r\n\r\n"), 400, CodeBadRequest)
	checkRefusal(t, e.raw("GET https://api.moat.test/ HTTP/1.1\r\nHost: api.moat.test\r\n\r\n"), 400, CodeBadRequest)
	checkRefusal(t, e.raw("CONNECT api.moat.test HTTP/1.1\r\nHost: api.moat.test\r\n\r\n"), 400, CodeBadRequest)
	checkRefusal(t, e.raw("GARBAGE\r\n\r\n"), 400, CodeBadRequest)
}

func TestDNSFailure(t *testing.T) {
	e := newEnv(t)
	resp, err := e.client(nil).Get("http://nowhere.moat.test/")
	if err != nil {
		t.Fatal(err)
	}
	checkRefusal(t, resp, 502, CodeDNSFailure)
	e.events.wait(t, "dns deny", func(ev Event) bool {
		return ev.Kind == KindDNS && ev.Decision == DecisionDeny && ev.Code == CodeDNSFailure && ev.Host == "nowhere.moat.test"
	})
	e.events.wait(t, "connect deny", isDeny(CodeDNSFailure))
}

func TestConnectFailed(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	resp, err := e.client(nil).Get(fmt.Sprintf("http://api.moat.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	checkRefusal(t, resp, 502, CodeConnectFailed)
	e.events.wait(t, "connect-failed", isDeny(CodeConnectFailed))
}

func TestRebinding(t *testing.T) {
	e := newEnv(t)
	_, port := upstream(t)
	e.dns.Set("local.moat.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")})
	u := fmt.Sprintf("http://local.moat.test:%d/", port)
	c := e.client(nil)

	// A name answering a loopback address is refused without a CIDR allow.
	e.pol.set(func(f *fakePolicy) { f.cidrs = nil })
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	checkRefusal(t, resp, 403, CodeBlockedAddress)
	e.events.wait(t, "dns deny", func(ev Event) bool {
		return ev.Kind == KindDNS && ev.Decision == DecisionDeny && ev.Code == CodeBlockedAddress &&
			len(ev.Answers) == 1 && ev.Answers[0] == "127.0.0.1"
	})
	// Control: the same name works once the policy admits 127.0.0.0/8.
	e.pol.set(func(f *fakePolicy) { f.cidrs = []netip.Prefix{loopback} })
	resp, err = c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("control: %d", resp.StatusCode)
	}
	readBody(t, resp)

	// A name answering a private address is refused, and Policy.Addr is
	// told the address is special.
	resp, err = c.Get(fmt.Sprintf("http://rebind.moat.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	checkRefusal(t, resp, 403, CodeBlockedAddress)
	found := false
	for _, call := range e.pol.addrCalls() {
		if call.a == netip.MustParseAddr("10.0.0.1") {
			found = true
			if !call.special {
				t.Error("10.0.0.1 not reported special to Policy.Addr")
			}
		}
	}
	if !found {
		t.Error("Policy.Addr not consulted for 10.0.0.1")
	}

	// One refused answer refuses the whole name.
	resp, err = c.Get("http://mixed.moat.test/")
	if err != nil {
		t.Fatal(err)
	}
	checkRefusal(t, resp, 403, CodeBlockedAddress)
	ev := e.events.wait(t, "mixed dns", func(ev Event) bool { return ev.Kind == KindDNS && ev.Host == "mixed.moat.test" })
	if len(ev.Answers) != 2 || ev.Decision != DecisionDeny {
		t.Errorf("mixed dns event: %+v", ev)
	}
}

func TestAddressLiterals(t *testing.T) {
	e := newEnv(t)
	_, port := upstream(t)
	c := e.client(nil)
	// Metadata literal.
	resp, err := c.Get("http://169.254.169.254/latest/meta-data/")
	if err != nil {
		t.Fatal(err)
	}
	checkRefusal(t, resp, 403, CodeBlockedAddress)
	resp, _ = e.connect("169.254.169.254:80")
	checkRefusal(t, resp, 403, CodeBlockedAddress)

	// IPv4-mapped loopback, refused without a CIDR allow...
	e.pol.set(func(f *fakePolicy) { f.cidrs = nil })
	mapped := fmt.Sprintf("[::ffff:127.0.0.1]:%d", port)
	resp, _ = e.connect(mapped)
	checkRefusal(t, resp, 403, CodeBlockedAddress)
	ev := e.events.wait(t, "mapped", func(ev Event) bool { return ev.Kind == KindConnect && ev.Port == port })
	if ev.Host != "127.0.0.1" {
		t.Errorf("host not unmapped: %q", ev.Host)
	}
	resp = e.raw(fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", mapped, mapped))
	checkRefusal(t, resp, 403, CodeBlockedAddress)
	// ...and works with one.
	e.pol.set(func(f *fakePolicy) { f.cidrs = []netip.Prefix{loopback} })
	resp = e.raw(fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", mapped, mapped))
	if resp.StatusCode != 200 {
		t.Fatalf("control: %d", resp.StatusCode)
	}
}

func TestHostAddressRefused(t *testing.T) {
	hostAddr := netip.MustParseAddr("192.0.2.10")
	e := newEnv(t, func(c *Config) {
		c.HostAddrs = func() ([]netip.Addr, error) { return []netip.Addr{hostAddr}, nil }
		c.DialTimeout = 200 * time.Millisecond
	})
	resp, _ := e.connect("hostip.moat.test:22")
	checkRefusal(t, resp, 403, CodeBlockedAddress)
	resp, _ = e.connect("192.0.2.10:22")
	checkRefusal(t, resp, 403, CodeBlockedAddress)
	for _, call := range e.pol.addrCalls() {
		if call.a == hostAddr && !call.special {
			t.Error("host address not reported special")
		}
	}
	// Control: the policy may still admit it explicitly (a CIDR allow), and
	// then the proxy dials it.
	e.pol.set(func(f *fakePolicy) { f.cidrs = append(f.cidrs, netip.MustParsePrefix("192.0.2.10/32")) })
	resp, _ = e.connect("192.0.2.10:22")
	if resp.Header.Get("X-Proxy-Error") == CodeBlockedAddress {
		t.Fatalf("admitted host address still blocked: %d", resp.StatusCode)
	}
}

func TestOneDNSQueryPerConnection(t *testing.T) {
	e := newEnv(t)
	port := echoServer(t, "")
	for i := 1; i <= 3; i++ {
		resp, conn := e.connect(fmt.Sprintf("api.moat.test:%d", port))
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		conn.Close()
		// One LookupNetIP("ip") is one A and one AAAA query.
		if n := e.dns.Queries("api.moat.test"); n != 2*i {
			t.Fatalf("after %d connections: %d queries, want %d", i, n, 2*i)
		}
	}
}
