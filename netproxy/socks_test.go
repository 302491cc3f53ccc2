package netproxy

import (
	"io"
	"net"
	"net/netip"
	"testing"
)

func TestSOCKS5(t *testing.T) {
	e := newEnv(t)
	port := echoServer(t, "")
	e.pol.set(func(f *fakePolicy) { f.allowAll = false; f.allow["api.moat.test"] = true; f.allow["127.0.0.1"] = true })
	loop4 := netip.MustParseAddr("127.0.0.1").As4()

	echo := func(c net.Conn) {
		t.Helper()
		io.WriteString(c, "ping")
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
			t.Fatalf("echo %q %v", b, err)
		}
	}
	t.Run("domain", func(t *testing.T) {
		m, rep, c := e.socks([]byte{0x00}, socksCmdConnect, socksAtypDomain, []byte("API.moat.test"), port)
		if m != 0 || rep != socksSucceeded {
			t.Fatalf("method %d reply %d", m, rep)
		}
		echo(c)
		ev := e.events.wait(t, "allow", func(ev Event) bool {
			return ev.Kind == KindConnect && ev.Proto == ProtoSOCKS5 && ev.Decision == DecisionAllow && ev.Host == "api.moat.test"
		})
		if ev.Addr == "" {
			t.Errorf("event without Addr: %+v", ev)
		}
	})
	t.Run("ipv4", func(t *testing.T) {
		_, rep, c := e.socks([]byte{0x02, 0x00}, socksCmdConnect, socksAtypIPv4, loop4[:], port)
		if rep != socksSucceeded {
			t.Fatalf("reply %d", rep)
		}
		echo(c)
	})
	t.Run("denied", func(t *testing.T) {
		_, rep, _ := e.socks([]byte{0x00}, socksCmdConnect, socksAtypDomain, []byte("other.moat.test"), port)
		if rep != socksNotAllowed {
			t.Fatalf("reply %d, want 2", rep)
		}
		e.events.wait(t, "deny", func(ev Event) bool {
			return isDeny(CodeDenied)(ev) && ev.Proto == ProtoSOCKS5 && ev.Host == "other.moat.test"
		})
	})
	t.Run("blocked-address", func(t *testing.T) {
		e.pol.set(func(f *fakePolicy) { f.allow["rebind.moat.test"] = true })
		_, rep, _ := e.socks([]byte{0x00}, socksCmdConnect, socksAtypDomain, []byte("rebind.moat.test"), port)
		if rep != socksNotAllowed {
			t.Fatalf("reply %d, want 2", rep)
		}
	})
	t.Run("dns-failure", func(t *testing.T) {
		e.pol.set(func(f *fakePolicy) { f.allow["nowhere.moat.test"] = true })
		_, rep, _ := e.socks([]byte{0x00}, socksCmdConnect, socksAtypDomain, []byte("nowhere.moat.test"), port)
		if rep != socksHostUnreachable {
			t.Fatalf("reply %d, want 4", rep)
		}
	})
	t.Run("refused", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		closed := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		_, rep, _ := e.socks([]byte{0x00}, socksCmdConnect, socksAtypIPv4, loop4[:], closed)
		if rep != socksConnRefused {
			t.Fatalf("reply %d, want 5", rep)
		}
	})
	t.Run("udp-associate", func(t *testing.T) {
		_, rep, _ := e.socks([]byte{0x00}, 0x03, socksAtypIPv4, loop4[:], port)
		if rep != socksCmdNotSupported {
			t.Fatalf("reply %d, want 7", rep)
		}
	})
	t.Run("bind", func(t *testing.T) {
		_, rep, _ := e.socks([]byte{0x00}, 0x02, socksAtypIPv4, loop4[:], port)
		if rep != socksCmdNotSupported {
			t.Fatalf("reply %d, want 7", rep)
		}
	})
	t.Run("no-acceptable-method", func(t *testing.T) {
		m, _, c := e.socks([]byte{0x02}, 0, 0, nil, 0)
		if m != socksNoAcceptable {
			t.Fatalf("method %d, want 0xFF", m)
		}
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("connection not closed: %d %v", n, err)
		}
	})
	t.Run("sni-mismatch", func(t *testing.T) {
		_, rep, c := e.socks([]byte{0x00}, socksCmdConnect, socksAtypDomain, []byte("api.moat.test"), port)
		if rep != socksSucceeded {
			t.Fatalf("reply %d", rep)
		}
		helloSNI(t, c, "evil.moat.test")
		e.events.wait(t, "sni-mismatch", func(ev Event) bool { return isDeny(CodeSNIMismatch)(ev) && ev.Proto == ProtoSOCKS5 })
	})
}

func TestSOCKS4Closed(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	c.Write([]byte{0x04, 0x01, 0x00, 0x50, 127, 0, 0, 1, 0})
	if n, err := c.Read(make([]byte, 8)); n != 0 || err == nil {
		t.Fatalf("SOCKS4: read %d %v, want the connection closed", n, err)
	}
}
