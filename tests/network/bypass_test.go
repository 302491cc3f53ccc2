//go:build linux

package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestProxyBypass: in --net proxy mode with the widest allowlist the proxy
// is still the only way out. A client that ignores the proxy variables
// cannot resolve a name (no resolver), cannot reach the host's loopback
// (the sandbox's 127.0.0.1 is its own), the host's other addresses, the
// host's IPv6 loopback or the metadata address, and no datagram reaches
// the host (not even the DNS server the proxy itself uses). Each attempt
// is run on the host too, as nobody without a proxy, where it works (for
// the metadata address, where the host has a route).
func TestProxyBypass(t *testing.T) {
	fx := newFixture(t)
	flags := fx.flags("*", "127.0.0.0/8")
	port := strconv.Itoa(fx.http.port)
	v6port := strconv.Itoa(fx.v6.port)

	// attempts are shell commands; each prints "NAME EXIT".
	type attempt struct{ name, cmd, path string }
	atts := []attempt{
		{"curl-name", "curl -sS --noproxy '*' -m 5 http://pkg.moat.test:%s/hello?bypass=curl-name", port},
		{"curl-name-pinned", "curl -sS --noproxy '*' -m 5 --resolve pkg.moat.test:%[1]s:127.0.0.1 http://pkg.moat.test:%[1]s/hello?bypass=curl-name-pinned", port},
		{"curl-loopback", "curl -sS --noproxy '*' -m 5 http://127.0.0.1:%s/hello?bypass=curl-loopback", port},
		{"curl-ipv6-loopback", "curl -sS --noproxy '*' -m 5 -g http://[::1]:%s/hello?bypass=curl-ipv6-loopback", v6port},
		{"bash-loopback", "bash -c 'exec 3<>/dev/tcp/127.0.0.1/%s'", port},
		{"bash-ipv6-loopback", "bash -c 'exec 3<>/dev/tcp/::1/%s'", v6port},
	}
	if fx.host != nil {
		hp := strconv.Itoa(fx.host.port)
		atts = append(atts,
			attempt{"curl-host-address", "curl -sS --noproxy '*' -m 5 http://" + fx.hostV4.String() + ":%s/hello?bypass=curl-host-address", hp},
			attempt{"bash-host-address", "bash -c 'exec 3<>/dev/tcp/" + fx.hostV4.String() + "/%s'", hp})
	}
	var script strings.Builder
	for _, a := range atts {
		fmt.Fprintf(&script, "%s >/dev/null 2>&1; echo %s $?\n", fmt.Sprintf(a.cmd, a.path), a.name)
	}
	exits := func(out string) map[string]int {
		m := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if name, code, ok := strings.Cut(line, " "); ok {
				m[name], _ = strconv.Atoi(code)
			}
		}
		return m
	}

	t.Run("TCP without the proxy", func(t *testing.T) {
		in := exits(fx.sh(t, flags, script.String()).Stdout)
		// No request from inside reached a host server.
		servers := []*server{fx.http, fx.v6}
		if fx.host != nil {
			servers = append(servers, fx.host)
		}
		for _, s := range servers {
			if n := s.saw("bypass="); n != 0 {
				t.Errorf("ESCAPE: %d requests from inside reached the server on %s", n, s.Listener.Addr())
			}
		}
		out := exits(outside(t, script.String()))
		for _, a := range atts {
			if code, ok := in[a.name]; !ok || code == 0 {
				t.Errorf("ESCAPE: %s succeeded inside the sandbox (exit %d, ran %v)", a.name, code, ok)
			}
			if a.name == "curl-name" {
				// The host has no resolver for the test names either;
				// curl-name-pinned is the same request, name pinned.
				continue
			}
			if code, ok := out[a.name]; !ok || code != 0 {
				t.Errorf("control: %s failed on the host (exit %d): the attempt proves nothing", a.name, code)
			}
		}
		if in["curl-name"] != 6 {
			t.Errorf("curl-name inside: exit %d, want 6 (could not resolve)", in["curl-name"])
		}
		t.Logf("exit codes inside: %v; on the host: %v", in, out)
	})

	t.Run("name resolution", func(t *testing.T) {
		o, res := fx.tool1(t, flags, "resolve", "pkg.moat.test")
		if o.OK {
			t.Errorf("ESCAPE: getaddrinfo(pkg.moat.test) inside answered %v\n%s", o.Addrs, res)
		}
		// The DNS server the proxy asks is on the host's loopback; a
		// query to its address from inside goes to the sandbox's own.
		q, res := fx.tool1(t, flags, "dns", fx.dns.Addr(), "bypass.moat.test")
		if q.OK {
			t.Errorf("ESCAPE: a DNS query to %s inside got an answer\n%s", fx.dns.Addr(), res)
		}
		if n := fx.dns.Queries("bypass.moat.test"); n != 0 {
			t.Errorf("ESCAPE: the test DNS server got %d queries from inside", n)
		}
		// Control: outside, the test DNS server answers the same name,
		// and the same query reaches it.
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, fx.dns.Addr())
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		addrs, err := r.LookupNetIP(ctx, "ip4", "pkg.moat.test")
		if err != nil || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("control: the test DNS server answered %v, %v", addrs, err)
		}
		out := parseTool(t, outside(t, "python3 "+shq(fx.tool)+" dns "+fx.dns.Addr()+" bypass.moat.test"))
		if !out.OK || fx.dns.Queries("bypass.moat.test") != 1 {
			t.Errorf("control: the query from the host: %+v, the server counted %d", out, fx.dns.Queries("bypass.moat.test"))
		}
	})

	t.Run("UDP", func(t *testing.T) {
		lo := testutil.UDPListener(t, "127.0.0.1:0")
		targets := []*net.UDPConn{lo}
		if fx.hostV4.IsValid() {
			targets = append(targets, testutil.UDPListener(t, netip.AddrPortFrom(fx.hostV4, 0).String()))
		}
		args := ""
		for _, c := range targets {
			args += " " + c.LocalAddr().String()
		}
		o, res := fx.tool1(t, flags, append([]string{"udp"}, strings.Fields(args)...)...)
		if len(o.Results) != len(targets) {
			t.Fatalf("udp: %+v\n%s", o, res)
		}
		for i, c := range targets {
			// To 127.0.0.1 sendto succeeds (the sandbox's own
			// loopback); to the host's address it fails.
			t.Logf("inside: sendto %s: ok %v %s", c.LocalAddr(), o.Results[i].OK, o.Results[i].Err)
			if testutil.Queued(c) {
				t.Errorf("ESCAPE: a datagram from the sandbox reached the host's %s", c.LocalAddr())
			}
		}
		// Control: from the host the same datagrams arrive.
		out := parseTool(t, outside(t, "python3 "+shq(fx.tool)+" udp"+args))
		for i, c := range targets {
			if !out.Results[i].OK || !testutil.Queued(c) {
				t.Errorf("control: the datagram sent on the host to %s did not arrive (%+v)", c.LocalAddr(), out.Results[i])
			}
		}
	})

	t.Run("metadata address", func(t *testing.T) {
		res := fx.sh(t, flags, "curl -sS --noproxy '*' -m 5 http://169.254.169.254/latest/meta-data/ >/dev/null 2>&1; echo $?")
		if strings.TrimSpace(res.Stdout) == "0" {
			t.Errorf("ESCAPE: the metadata address answered inside the sandbox")
		}
		// Control: a route lookup on the host (no packet is sent).
		c, err := net.Dial("udp", "169.254.169.254:80")
		if err != nil {
			t.Logf("control: the host itself has no route to 169.254.169.254: %v", err)
		} else {
			c.Close()
		}
	})
}
