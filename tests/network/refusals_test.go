//go:build linux

package network

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/netproxy"
)

// TestProxyRefusals: the egress proxy refuses what its allowlist does not
// admit, with a 403 and the X-Proxy-Error code a client can read (for
// HTTPS, as the answer to CONNECT), and records each refusal in the run's
// result. Every refusal has a control in which the one thing that differs
// is allowed and the same request reaches the test server.
func TestProxyRefusals(t *testing.T) {
	fx := newFixture(t)
	base := []string{"pkg.moat.test", "git.moat.test", "127.0.0.0/8"}
	url := func(host string) string { return fx.http.url(host, "/hello") }
	surl := func(host string) string { return fx.https.url(host, "/hello") }

	t.Run("a name off the allowlist is denied and not even resolved", func(t *testing.T) {
		got, res := fx.curls(t, fx.flags(base...), []string{url("other.moat.test")}, []string{surl("other.moat.test")})
		// Nothing has asked for other.moat.test before this run.
		wantRefusal(t, "HTTP to other.moat.test", got[0], res, "other.moat.test", netproxy.CodeDenied)
		wantRefusal(t, "HTTPS to other.moat.test", got[1], res, "other.moat.test", netproxy.CodeDenied)
		if !strings.HasPrefix(got[0].Body, "moat egress proxy: ") {
			t.Errorf("refusal body %q, want moat egress proxy: <reason>", got[0].Body)
		}
		if n := fx.dns.Queries("other.moat.test"); n != 0 {
			t.Errorf("the proxy asked the DNS server about a name it refuses (%d queries)", n)
		}
		if fx.http.saw("other.moat.test") != 0 || fx.https.sawSNI("other.moat.test") != 0 {
			t.Errorf("a refused request reached the test server")
		}
		// Control: the same requests with the name allowed.
		got, res = fx.curls(t, fx.flags(append(base, "other.moat.test")...), []string{url("other.moat.test")}, []string{surl("other.moat.test")})
		wantHello(t, "HTTP to other.moat.test allowed", got[0], res)
		wantHello(t, "HTTPS to other.moat.test allowed", got[1], res)
		wantDNS(t, "control", res, "other.moat.test", netproxy.DecisionAllow, "127.0.0.1")
	})

	t.Run("a deny entry beats a wildcard allow", func(t *testing.T) {
		flags := append(fx.flags("*.moat.test", "127.0.0.0/8"), "--deny-domain", "pkg.moat.test")
		got, res := fx.curls(t, flags, []string{url("pkg.moat.test")}, []string{surl("pkg.moat.test")}, []string{url("git.moat.test")})
		wantRefusal(t, "HTTP to pkg.moat.test", got[0], res, "pkg.moat.test", netproxy.CodeDenied)
		wantRefusal(t, "HTTPS to pkg.moat.test", got[1], res, "pkg.moat.test", netproxy.CodeDenied)
		// Control: the wildcard admits another subdomain in the same run.
		wantHello(t, "git.moat.test under *.moat.test", got[2], res)
	})

	t.Run("a wildcard does not admit its apex", func(t *testing.T) {
		got, res := fx.curls(t, fx.flags("*.moat.test", "127.0.0.0/8"), []string{url("moat.test")}, []string{surl("moat.test")}, []string{url("pkg.moat.test")})
		wantRefusal(t, "HTTP to moat.test under *.moat.test", got[0], res, "moat.test", netproxy.CodeDenied)
		wantRefusal(t, "HTTPS to moat.test under *.moat.test", got[1], res, "moat.test", netproxy.CodeDenied)
		wantHello(t, "pkg.moat.test under *.moat.test", got[2], res)
		// Control: the apex named on its own.
		got, res = fx.curls(t, fx.flags("moat.test", "127.0.0.0/8"), []string{url("moat.test")})
		wantHello(t, "moat.test allowed by name", got[0], res)
	})

	t.Run("DNS rebinding to loopback is blocked", func(t *testing.T) {
		// rebind.moat.test is allowed by name, but it resolves to
		// 127.0.0.1, which no entry names.
		got, res := fx.curls(t, fx.flags("rebind.moat.test"), []string{url("rebind.moat.test")}, []string{surl("rebind.moat.test")})
		wantRefusal(t, "HTTP to rebind.moat.test", got[0], res, "rebind.moat.test", netproxy.CodeBlockedAddress)
		wantRefusal(t, "HTTPS to rebind.moat.test", got[1], res, "rebind.moat.test", netproxy.CodeBlockedAddress)
		wantDNS(t, "rebinding", res, "rebind.moat.test", netproxy.DecisionDeny, "127.0.0.1")
		if fx.http.saw("rebind.moat.test") != 0 || fx.https.sawSNI("rebind.moat.test") != 0 {
			t.Errorf("a blocked request reached the test server")
		}
		// Control: with the loopback range allowed it goes through.
		got, res = fx.curls(t, fx.flags("rebind.moat.test", "127.0.0.0/8"), []string{url("rebind.moat.test")}, []string{surl("rebind.moat.test")})
		wantHello(t, "HTTP to rebind.moat.test with 127.0.0.0/8", got[0], res)
		wantHello(t, "HTTPS to rebind.moat.test with 127.0.0.0/8", got[1], res)
	})

	t.Run("private and metadata answers and a raw metadata address", func(t *testing.T) {
		// Each host has a 1 s budget: the controls get past the
		// proxy's checks and dial an address nothing may answer.
		const mt = "1"
		calls := [][]string{
			{"-m", mt, "http://private.moat.test/"},
			{"-m", mt, "https://private.moat.test/"},
			{"-m", mt, "http://meta.moat.test/latest/meta-data/"},
			{"-m", mt, "http://169.254.169.254/latest/meta-data/"},
		}
		got, res := fx.curls(t, fx.flags(append(base, "private.moat.test", "meta.moat.test")...), calls...)
		wantRefusal(t, "private.moat.test (10.0.0.1)", got[0], res, "private.moat.test", netproxy.CodeBlockedAddress)
		wantRefusal(t, "HTTPS private.moat.test (10.0.0.1)", got[1], res, "private.moat.test", netproxy.CodeBlockedAddress)
		wantRefusal(t, "meta.moat.test (169.254.169.254)", got[2], res, "meta.moat.test", netproxy.CodeBlockedAddress)
		wantRefusal(t, "http://169.254.169.254/", got[3], res, "169.254.169.254", netproxy.CodeDenied)
		wantDNS(t, "private", res, "private.moat.test", netproxy.DecisionDeny, "10.0.0.1")
		wantDNS(t, "metadata", res, "meta.moat.test", netproxy.DecisionDeny, "169.254.169.254")

		// Control: with the addresses named by CIDR entries the proxy
		// accepts the answers and dials them (whatever the dial gives:
		// nothing listens there on a test machine).
		got, res = fx.curls(t, fx.flags(append(base, "private.moat.test", "meta.moat.test", "10.0.0.0/8", "169.254.169.254/32")...), calls...)
		wantDNS(t, "control: private allowed by CIDR", res, "private.moat.test", netproxy.DecisionAllow, "10.0.0.1")
		wantDNS(t, "control: metadata allowed by CIDR", res, "meta.moat.test", netproxy.DecisionAllow, "169.254.169.254")
		for i, host := range []string{"private.moat.test", "private.moat.test", "meta.moat.test", "169.254.169.254"} {
			if got[i].XError == netproxy.CodeBlockedAddress || got[i].XError == netproxy.CodeDenied {
				t.Errorf("control: %v with the CIDR allowed: %s", calls[i], got[i])
			}
			t.Logf("control: %v with the CIDR allowed: %s", calls[i], got[i])
			for _, e := range res.events(netproxy.KindConnect, host) {
				if e.Code == netproxy.CodeBlockedAddress || e.Code == netproxy.CodeDenied {
					t.Errorf("control: %s refused with the CIDR allowed: %+v", host, e)
				}
			}
		}
	})

	t.Run("the host's own address is blocked", func(t *testing.T) {
		if fx.host == nil {
			t.Skip("the host has no non-loopback IPv4 address")
		}
		u := fx.host.url("hostaddr.moat.test", "/hello")
		got, res := fx.curl1(t, fx.flags(append(base, "hostaddr.moat.test")...), u)
		wantRefusal(t, "hostaddr.moat.test ("+fx.hostV4.String()+")", got, res, "hostaddr.moat.test", netproxy.CodeBlockedAddress)
		if fx.host.saw("hostaddr.moat.test") != 0 {
			t.Errorf("the blocked request reached the server on %s", fx.hostV4)
		}
		// Control: the address named by a /32 entry.
		got, res = fx.curl1(t, fx.flags(append(base, "hostaddr.moat.test", fx.hostV4.String()+"/32")...), u)
		wantHello(t, "hostaddr.moat.test with its /32 allowed", got, res)
		wantDNS(t, "control", res, "hostaddr.moat.test", netproxy.DecisionAllow, fx.hostV4.String())
	})

	t.Run("a Host header that disagrees with the URL", func(t *testing.T) {
		port := strconv.Itoa(fx.http.port)
		u := fx.http.url("pkg.moat.test", "/hello?case=host-mismatch")
		o, res := fx.tool1(t, fx.flags(base...), "http", u, "other.moat.test")
		if o.Status != http.StatusForbidden || o.XError != netproxy.CodeHostMismatch || !strings.HasPrefix(o.Body, "moat egress proxy: ") {
			t.Errorf("Host: other.moat.test on a request for pkg.moat.test: %+v, want 403 host-mismatch\n%s", o, res)
		}
		wantEvent(t, "host mismatch", res, "pkg.moat.test", netproxy.DecisionDeny, netproxy.CodeHostMismatch)
		if fx.http.saw("case=host-mismatch") != 0 {
			t.Errorf("the request with the mismatched Host reached the server")
		}
		// Control: the same request with a matching Host.
		o, res = fx.tool1(t, fx.flags(base...), "http", u, "pkg.moat.test:"+port)
		if o.Status != http.StatusOK || o.Body != helloBody || fx.http.saw("pkg.moat.test:"+port+" /hello?case=host-mismatch") != 1 {
			t.Errorf("control: matching Host: %+v\n%s", o, res)
		}
	})

	for _, via := range []string{"connect", "socks"} {
		t.Run("a TLS server name that differs from the tunnel's name via "+via, func(t *testing.T) {
			target := "pkg.moat.test:" + strconv.Itoa(fx.https.port)
			before, beforePkg := fx.https.sawSNI("other.moat.test"), fx.https.sawSNI("pkg.moat.test")
			// The certificate covers *.moat.test: only the proxy can
			// make this handshake fail.
			o, res := fx.tool1(t, fx.flags(base...), "sni", target, "other.moat.test", caTarget, via)
			if o.Connect != http.StatusOK || o.Handshake != "failed" {
				t.Errorf("tunnel (%s) to %s then TLS for other.moat.test: %+v, want the tunnel opened and the handshake cut\n%s", via, target, o, res)
			}
			wantEvent(t, "SNI mismatch", res, "pkg.moat.test", netproxy.DecisionDeny, netproxy.CodeSNIMismatch)
			if fx.https.sawSNI("other.moat.test") != before {
				t.Errorf("the ClientHello for other.moat.test reached the HTTPS server")
			}
			// Control: the matching server name.
			o, res = fx.tool1(t, fx.flags(base...), "sni", target, "pkg.moat.test", caTarget, via)
			if o.Connect != http.StatusOK || o.Handshake != "ok" || o.Status != http.StatusOK || o.Body != helloBody {
				t.Errorf("control: TLS for pkg.moat.test: %+v\n%s", o, res)
			}
			if fx.https.sawSNI("pkg.moat.test") != beforePkg+1 {
				t.Errorf("control: the HTTPS server saw no ClientHello for pkg.moat.test")
			}
		})
	}
}
