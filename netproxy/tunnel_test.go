package netproxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
)

func TestConnectAllowDeny(t *testing.T) {
	e := newEnv(t)
	port := echoServer(t, "")
	e.pol.set(func(f *fakePolicy) { f.allowAll = false; f.allow["api.moat.test"] = true })

	resp, conn := e.connect(fmt.Sprintf("api.moat.test:%d", port))
	if resp.StatusCode != 200 {
		t.Fatalf("allowed CONNECT: %d", resp.StatusCode)
	}
	io.WriteString(conn, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q %v", buf, err)
	}

	resp, _ = e.connect(fmt.Sprintf("other.moat.test:%d", port))
	checkRefusal(t, resp, 403, CodeDenied)
	ev := e.events.wait(t, "deny", isDeny(CodeDenied))
	if ev.Proto != ProtoConnect || ev.Host != "other.moat.test" {
		t.Errorf("event: %+v", ev)
	}
}

func TestTLSThroughConnect(t *testing.T) {
	e := newEnv(t)
	_, port, tlsCfg := tlsUpstream(t)
	resp, err := e.client(tlsCfg).Get(fmt.Sprintf("https://api.moat.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); got != "secure api.moat.test" {
		t.Fatalf("body %q", got)
	}
}

func TestSNIMismatch(t *testing.T) {
	e := newEnv(t)
	port, got := recordingServer(t)
	resp, conn := e.connect(fmt.Sprintf("api.moat.test:%d", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	err := tls.Client(conn, &tls.Config{ServerName: "evil.moat.test", InsecureSkipVerify: true}).Handshake()
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("handshake error = %v, want an access_denied alert", err)
	}
	if n := <-got; n != 0 {
		t.Errorf("upstream received %d bytes, want none", n)
	}
	ev := e.events.wait(t, "sni-mismatch", isDeny(CodeSNIMismatch))
	if ev.Host != "api.moat.test" || ev.Proto != ProtoConnect {
		t.Errorf("event: %+v", ev)
	}
}

func TestBadClientHello(t *testing.T) {
	e := newEnv(t)
	port, got := recordingServer(t)
	resp, conn := e.connect(fmt.Sprintf("api.moat.test:%d", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	// A handshake record that is not a ClientHello.
	conn.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00})
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("read: %v", err)
	}
	if n := <-got; n != 0 {
		t.Errorf("upstream received %d bytes", n)
	}
	e.events.wait(t, "bad-client-hello", isDeny(CodeBadClientHello))
}

func TestIPLiteralConnectWithSNI(t *testing.T) {
	e := newEnv(t)
	_, port, tlsCfg := tlsUpstream(t)
	hp := fmt.Sprintf("127.0.0.1:%d", port)

	resp, conn := e.connect(hp)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	cfg := tlsCfg.Clone()
	cfg.ServerName = "api.moat.test"
	if err := tls.Client(conn, cfg).Handshake(); err == nil {
		t.Fatal("SNI on an IP-literal tunnel: handshake succeeded")
	}
	e.events.wait(t, "sni-mismatch", isDeny(CodeSNIMismatch))

	// Control: without SNI the tunnel works.
	resp, conn = e.connect(hp)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	cfg = tlsCfg.Clone()
	cfg.ServerName = "127.0.0.1" // verified against the IP SAN; Go sends no SNI for an IP
	tc := tls.Client(conn, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatalf("no-SNI handshake: %v", err)
	}
	tc.Close()
}

func TestServerSpeaksFirst(t *testing.T) {
	e := newEnv(t)
	port := echoServer(t, "SSH-2.0-moat-test\r\n")
	resp, conn := e.connect(fmt.Sprintf("api.moat.test:%d", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	banner := make([]byte, len("SSH-2.0-moat-test\r\n"))
	if _, err := io.ReadFull(conn, banner); err != nil {
		t.Fatalf("banner before the client spoke: %v", err)
	}
	io.WriteString(conn, "SSH-2.0-client\r\n")
	echo := make([]byte, len("SSH-2.0-client\r\n"))
	if _, err := io.ReadFull(conn, echo); err != nil || string(echo) != "SSH-2.0-client\r\n" {
		t.Fatalf("echo %q %v", echo, err)
	}
}

// helloSNI sends a ClientHello for sni over c and expects the proxy's
// access_denied alert.
func helloSNI(t *testing.T, c net.Conn, sni string) {
	t.Helper()
	err := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("handshake error = %v, want an access_denied alert", err)
	}
}
