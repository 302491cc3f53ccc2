//go:build linux

package network

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/netproxy"
)

// TestProxyClients: ordinary clients reach allowed names through the
// egress proxy with nothing but the environment moat sets (HTTP_PROXY,
// HTTPS_PROXY, pip's and npm's settings) and the test CA: curl over HTTP,
// HTTPS (CONNECT) and SOCKS5 with remote DNS, a large download arriving
// intact, wget, Python's urllib, git over git's dumb HTTP protocol, pip and
// npm. Each run's result records the proxy's resolution of the name (the
// test DNS server's answer) and its allowed connections. This is the
// control of every refusal in TestProxyRefusals: the same proxy, with the
// destination allowed, works.
func TestProxyClients(t *testing.T) {
	fx := newFixture(t)
	flags := fx.flags("pkg.moat.test", "git.moat.test", "127.0.0.0/8")
	pkgHTTP := fx.http.url("pkg.moat.test", "")
	pkgHTTPS := fx.https.url("pkg.moat.test", "")
	httpAddr := "127.0.0.1:" + strconv.Itoa(fx.http.port)
	httpsAddr := "127.0.0.1:" + strconv.Itoa(fx.https.port)

	// through asserts that res records the proxy resolving host to
	// 127.0.0.1 and allowing a connection over proto to addr.
	through := func(t *testing.T, res *netResult, host, proto, addr string) {
		t.Helper()
		wantDNS(t, "dns event", res, host, netproxy.DecisionAllow, "127.0.0.1")
		for _, e := range res.events(netproxy.KindConnect, host) {
			if e.Decision == netproxy.DecisionAllow && e.Proto == proto && e.Addr == addr {
				if res.Network.Allowed == 0 || res.Network.Denied != 0 {
					t.Errorf("counts: allowed %d denied %d", res.Network.Allowed, res.Network.Denied)
				}
				return
			}
		}
		t.Errorf("no allowed %s connect event for %s to %s:\n%s", proto, host, addr, res)
	}
	wantOut := func(t *testing.T, res *netResult, want string) {
		t.Helper()
		if res.Stdout != want {
			t.Errorf("stdout %q, want %q\n%s", res.Stdout, want, res)
		}
	}

	t.Run("curl HTTP via HTTP_PROXY", func(t *testing.T) {
		res := fx.sh(t, flags, "curl -sS --fail "+shq(pkgHTTP+"/hello"))
		wantOut(t, res, helloBody)
		through(t, res, "pkg.moat.test", netproxy.ProtoHTTP, httpAddr)
		if fx.http.saw("pkg.moat.test:"+strconv.Itoa(fx.http.port)+" /hello") == 0 {
			t.Errorf("the HTTP server did not see the request with its Host")
		}
	})
	t.Run("curl HTTPS via HTTPS_PROXY", func(t *testing.T) {
		res := fx.sh(t, flags, "curl -sS --fail "+shq(pkgHTTPS+"/hello"))
		wantOut(t, res, helloBody)
		through(t, res, "pkg.moat.test", netproxy.ProtoConnect, httpsAddr)
		if fx.https.sawSNI("pkg.moat.test") == 0 {
			t.Errorf("the HTTPS server saw no ClientHello for pkg.moat.test")
		}
	})
	t.Run("curl HTTPS via SOCKS5 with remote DNS", func(t *testing.T) {
		res := fx.sh(t, flags, "curl -sS --fail --proxy socks5h://127.0.0.1:3128 "+shq(pkgHTTPS+"/hello"))
		wantOut(t, res, helloBody)
		through(t, res, "pkg.moat.test", netproxy.ProtoSOCKS5, httpsAddr)
	})
	t.Run("curl via the proxy's IPv6 address", func(t *testing.T) {
		res := fx.sh(t, flags, "curl -sS --fail --proxy 'http://[::1]:3128' "+shq(pkgHTTPS+"/hello"))
		wantOut(t, res, helloBody)
		through(t, res, "pkg.moat.test", netproxy.ProtoConnect, httpsAddr)
	})
	t.Run("a large download arrives intact", func(t *testing.T) {
		res := fx.sh(t, flags, "curl -sS --fail "+shq(pkgHTTPS+"/large")+" | sha256sum")
		if got, _, _ := strings.Cut(res.Stdout, " "); got != fx.largeSHA {
			t.Errorf("sha256 inside %q, want %s\n%s", res.Stdout, fx.largeSHA, res)
		}
		closed := false
		for _, e := range res.events(netproxy.KindClose, "pkg.moat.test") {
			closed = closed || e.BytesDown >= largeSize
		}
		if !closed {
			t.Errorf("no close event counting the %d bytes down:\n%s", largeSize, res)
		}
	})
	t.Run("wget HTTP and HTTPS", func(t *testing.T) {
		res := fx.sh(t, flags, "wget -q -O - "+shq(pkgHTTP+"/hello")+" && wget -q -O - --ca-certificate="+caTarget+" "+shq(pkgHTTPS+"/hello"))
		wantOut(t, res, helloBody+helloBody)
		through(t, res, "pkg.moat.test", netproxy.ProtoHTTP, httpAddr)
		through(t, res, "pkg.moat.test", netproxy.ProtoConnect, httpsAddr)
	})
	t.Run("python urllib HTTP and HTTPS", func(t *testing.T) {
		for _, u := range []struct{ url, proto, addr string }{
			{pkgHTTP + "/hello", netproxy.ProtoHTTP, httpAddr},
			{pkgHTTPS + "/hello", netproxy.ProtoConnect, httpsAddr},
		} {
			o, res := fx.tool1(t, flags, "urllib", u.url)
			if !o.OK || o.Status != http.StatusOK || o.Body != helloBody {
				t.Errorf("urllib %s: %+v\n%s", u.url, o, res)
			}
			through(t, res, "pkg.moat.test", u.proto, u.addr)
		}
	})
	t.Run("git clone over HTTP and HTTPS", func(t *testing.T) {
		res := fx.sh(t, flags, "git clone -q "+shq(fx.http.url("git.moat.test", "/git/repo.git"))+" /tmp/a && cat /tmp/a/README.md && "+
			"git clone -q "+shq(fx.https.url("git.moat.test", "/git/repo.git"))+" /tmp/b && cat /tmp/b/README.md")
		wantOut(t, res, gitContent+gitContent)
		through(t, res, "git.moat.test", netproxy.ProtoHTTP, httpAddr)
		through(t, res, "git.moat.test", netproxy.ProtoConnect, httpsAddr)
	})
	t.Run("pip download", func(t *testing.T) {
		res := fx.moatRun(t, append(flags, "-e", "PIP_DISABLE_PIP_VERSION_CHECK=1", "-e", "PIP_NO_INPUT=1"), "/bin/sh", "-c",
			"/usr/bin/pip3 download --no-deps -d /tmp/dl --index-url "+shq(pkgHTTPS+"/simple/")+" moatpkg && sha256sum /tmp/dl/*")
		if res.ExitCode != 0 {
			t.Fatalf("pip download failed:\n%s", res)
		}
		if !strings.Contains(res.Stdout, fx.wheelSHA+"  /tmp/dl/moatpkg-1.0-py3-none-any.whl") {
			t.Errorf("the wheel did not arrive intact:\n%s", res)
		}
		through(t, res, "pkg.moat.test", netproxy.ProtoConnect, httpsAddr)
		if fx.https.saw(" /files/moatpkg-1.0-py3-none-any.whl") == 0 {
			t.Errorf("the server never served the wheel")
		}
	})
	t.Run("npm view", func(t *testing.T) {
		res := fx.moatRun(t, append(flags, "-e", "npm_config_update_notifier=false", "-e", "npm_config_audit=false", "-e", "npm_config_fund=false"),
			"/usr/bin/npm", "view", "moatpkg", "version", "--registry", pkgHTTPS+"/")
		if res.ExitCode != 0 {
			t.Fatalf("npm view failed:\n%s", res)
		}
		wantOut(t, res, "1.0.0\n")
		through(t, res, "pkg.moat.test", netproxy.ProtoConnect, httpsAddr)
	})
}
