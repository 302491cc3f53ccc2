//go:build linux

package escape

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// hostAddrs returns the first global IPv4 and IPv6 address of an up,
// non-loopback interface of the host (invalid if none).
func hostAddrs(t *testing.T) (v4, v6 netip.Addr) {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			ip := p.Addr()
			if !ip.IsGlobalUnicast() && !ip.IsPrivate() {
				continue
			}
			if ip.Is4() && !v4.IsValid() {
				v4 = ip
			}
			if ip.Is6() && !ip.Is4In6() && !v6.IsValid() {
				v6 = ip
			}
		}
	}
	return v4, v6
}

// tcpListener listens on addr and accepts (and closes) connections until
// the test ends.
func tcpListener(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
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
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// hostNameservers returns the nameservers of the host's resolv.conf.
func hostNameservers() []netip.Addr {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, a)
			}
		}
	}
	return out
}

// TestNetwork: docs/THREAT-MODEL.md "network" row, with no network policy (the
// default, --net none) and in --net proxy with the widest allowlist: TCP
// to the host's loopback services and its other addresses, UDP and DNS to
// the outside, and the metadata, link-local and private ranges are all
// unreachable; the sandbox has no interface but lo. In proxy mode the one
// thing that answers is the egress proxy's port on the sandbox's own
// loopback (the proxy's own refusals are tested in tests/network).
func TestNetwork(t *testing.T) {
	testutil.RequireRoot(t)
	for _, mode := range []struct {
		name  string
		flags []string
	}{
		{"none", nil},
		{"proxy", []string{"--net", "proxy", "--allow-domain", "*", "--allow-domain", "0.0.0.0/0", "--allow-domain", "::/0"}},
	} {
		t.Run(mode.name, func(t *testing.T) { networkUnreachable(t, mode.flags) })
	}
}

func networkUnreachable(t *testing.T, flags []string) {
	v4, v6 := hostAddrs(t)

	t.Run("TCP to the host", func(t *testing.T) {
		targets := []string{tcpListener(t, "127.0.0.1:0"), tcpListener(t, "[::1]:0")}
		if v4.IsValid() {
			targets = append(targets, tcpListener(t, netip.AddrPortFrom(v4, 0).String()))
		}
		if v6.IsValid() {
			targets = append(targets, tcpListener(t, netip.AddrPortFrom(v6, 0).String()))
		}
		var atts []attempt
		for _, a := range targets {
			atts = append(atts, A("connect-tcp", a))
		}
		in := inside(t, flags, atts...)
		out := outside(t, asNobody, atts...)
		for i := range atts {
			denied(t, in[i], "ECONNREFUSED", "ENETUNREACH", "EHOSTUNREACH")
			works(t, out[i])
			t.Logf("inside: %s; outside as nobody: %s", in[i], out[i])
		}
	})

	t.Run("UDP and DNS", func(t *testing.T) {
		atts := []attempt{
			A("udp-send", "8.8.8.8:53"),
			A("udp-send", "[2001:4860:4860::8888]:53"),
			A("udp-send", "1.1.1.1:443"),
		}
		for _, ns := range hostNameservers() {
			if !ns.IsLoopback() {
				atts = append(atts, A("udp-send", netip.AddrPortFrom(ns, 53).String()))
			}
		}
		var hostUDP *net.UDPConn
		if v4.IsValid() {
			hostUDP = testutil.UDPListener(t, netip.AddrPortFrom(v4, 0).String())
			atts = append(atts, A("udp-send", hostUDP.LocalAddr().String()))
		}
		loUDP := testutil.UDPListener(t, "127.0.0.1:0")
		in := inside(t, flags, append(atts, A("udp-send", loUDP.LocalAddr().String()))...)
		for _, o := range in[:len(atts)] {
			denied(t, o, "ENETUNREACH")
		}
		// To 127.0.0.1 the datagram goes to the sandbox's own
		// loopback (sendto succeeds); the host's listener gets nothing.
		if hostUDP != nil && testutil.Queued(hostUDP) {
			t.Errorf("ESCAPE: a datagram from the sandbox reached the host's %s", hostUDP.LocalAddr())
		}
		if testutil.Queued(loUDP) {
			t.Errorf("ESCAPE: a datagram from the sandbox reached the host's loopback listener %s", loUDP.LocalAddr())
		}
		// Control: outside, a datagram to the host listener arrives, and
		// the host has a route to the outside addresses (a UDP connect
		// looks the route up without sending anything).
		if hostUDP != nil {
			works(t, outside(t, asNobody, A("udp-send", hostUDP.LocalAddr().String()))[0])
			if !testutil.Queued(hostUDP) {
				t.Errorf("control: the datagram sent outside did not arrive")
			}
		}
		works(t, outside(t, asNobody, A("udp-send", loUDP.LocalAddr().String()))[0])
		if !testutil.Queued(loUDP) {
			t.Errorf("control: the datagram sent outside to the loopback listener did not arrive")
		}
		routes := outside(t, asNobody, A("udp-connect", "8.8.8.8:53"), A("udp-connect", "[2001:4860:4860::8888]:53"))
		for _, o := range routes {
			if !o.OK {
				t.Logf("control: the host itself has no route: %s", o)
			}
		}
	})

	t.Run("metadata, link-local and private ranges", func(t *testing.T) {
		atts := []attempt{
			A("connect-tcp", "169.254.169.254:80"),
			A("connect-tcp", "[fd00:ec2::254]:80"),
			A("connect-tcp", "10.0.0.1:80"),
			A("connect-tcp", "172.16.0.1:80"),
			A("connect-tcp", "192.168.0.1:80"),
			A("connect-tcp", "100.100.100.200:80"),
			A("udp-send", "169.254.169.254:53"),
		}
		for _, o := range inside(t, flags, atts...) {
			denied(t, o, "ENETUNREACH")
		}
		// Control: a route lookup only (no packet is sent).
		for _, o := range outside(t, asNobody, A("udp-connect", "169.254.169.254:80"), A("udp-connect", "10.0.0.1:80")) {
			if !o.OK {
				t.Logf("control: the host itself has no route: %s", o)
			}
		}
	})

	t.Run("interfaces", func(t *testing.T) {
		in := inside(t, flags, A("ifaces"))[0]
		works(t, in)
		if names := in.strs("names"); !slices.Equal(names, []string{"lo"}) {
			t.Errorf("ESCAPE: interfaces inside: %v, want only lo", names)
		}
		for _, a := range in.strs("addrs") {
			if a != "127.0.0.1/8" && a != "::1/128" {
				t.Errorf("ESCAPE: address inside: %s", a)
			}
		}
		out := outside(t, asNobody, A("ifaces"))[0]
		if len(out.strs("names")) < 2 {
			t.Logf("control: the host itself has only %v", out.strs("names"))
		}
	})

	t.Run("the proxy port", func(t *testing.T) {
		in := inside(t, flags, A("connect-tcp", "127.0.0.1:3128"), A("connect-tcp", "[::1]:3128"))
		for _, o := range in {
			if flags == nil {
				denied(t, o, "ECONNREFUSED")
			} else {
				works(t, o)
			}
		}
	})
}
