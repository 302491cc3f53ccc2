package netproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// waitGoroutines waits until the number of goroutines is at most n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d > %d\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // polling for exit, not synchronisation
	}
}

func TestAskHoldsConnection(t *testing.T) {
	e := newEnv(t)
	_, port := upstream(t)
	ask, asked := make(chan bool), make(chan string, 1)
	e.pol.set(func(f *fakePolicy) { f.ask, f.asked = ask, asked })
	before := runtime.NumGoroutine()

	c := e.dial()
	fmt.Fprintf(c, "GET http://api.moat.test:%d/held HTTP/1.1\r\nHost: api.moat.test:%d\r\nConnection: close\r\n\r\n", port, port)
	if host := <-asked; host != "api.moat.test" {
		t.Fatalf("asked about %q", host)
	}
	// The proxy holds the connection: nothing to read yet.
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n != 0 || !isTimeoutErr(err) {
		t.Fatalf("read while asking: %d %v", n, err)
	}
	c.SetReadDeadline(time.Now().Add(testTimeout))
	ask <- true
	body, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(body), "HTTP/1.1 200") || !strings.HasSuffix(string(body), "hello /held ") {
		t.Fatalf("after allow: %q %v", body, err)
	}
	c.Close()
	e.ep.transport.CloseIdleConnections()
	waitGoroutines(t, before)
}

func TestAskCancelledWhenClientLeaves(t *testing.T) {
	for _, proto := range []string{"http", "connect"} {
		t.Run(proto, func(t *testing.T) {
			e := newEnv(t)
			ask, asked, gaveUp := make(chan bool), make(chan string, 1), make(chan struct{})
			e.pol.set(func(f *fakePolicy) { f.ask, f.asked, f.gaveUp = ask, asked, gaveUp })
			c := e.dial()
			if proto == "http" {
				io.WriteString(c, "GET http://api.moat.test/ HTTP/1.1\r\nHost: api.moat.test\r\n\r\n")
			} else {
				io.WriteString(c, "CONNECT api.moat.test:443 HTTP/1.1\r\nHost: api.moat.test:443\r\n\r\n")
			}
			<-asked
			c.Close()
			select {
			case <-gaveUp:
			case <-time.After(testTimeout):
				t.Fatal("Decide's context not cancelled when the client left")
			}
		})
	}
}

func TestAskCancelledOnClose(t *testing.T) {
	e := newEnv(t)
	ask, asked, gaveUp := make(chan bool), make(chan string, 1), make(chan struct{})
	e.pol.set(func(f *fakePolicy) { f.ask, f.asked, f.gaveUp = ask, asked, gaveUp })
	_, _, c := func() (byte, byte, net.Conn) {
		c := e.dial()
		c.Write([]byte{5, 1, 0})
		io.ReadFull(c, make([]byte, 2))
		c.Write(append([]byte{5, 1, 0, 3, byte(len("api.moat.test"))}, append([]byte("api.moat.test"), 0, 80)...))
		return 0, 0, c
	}()
	<-asked
	e.ep.Close()
	select {
	case <-gaveUp:
	case <-time.After(testTimeout):
		t.Fatal("Decide's context not cancelled on Close")
	}
	if n, err := c.Read(make([]byte, 10)); n != 0 || err == nil {
		t.Fatalf("client connection open after Close: %d %v", n, err)
	}
}

func TestCloseClosesTunnels(t *testing.T) {
	e := newEnv(t)
	port := echoServer(t, "")
	resp, conn := e.connect(fmt.Sprintf("api.moat.test:%d", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	_, rep, sc := e.socks([]byte{0}, socksCmdConnect, socksAtypDomain, []byte("api.moat.test"), port)
	if rep != socksSucceeded {
		t.Fatalf("socks reply %d", rep)
	}
	done := make(chan error, 2)
	for _, c := range []net.Conn{conn, sc} {
		go func() {
			_, err := c.Read(make([]byte, 1))
			done <- err
		}()
	}
	e.ep.Close()
	for range 2 {
		if err := <-done; err == nil || isTimeoutErr(err) {
			t.Fatalf("blocked read returned %v, want EOF or reset", err)
		}
	}
	select {
	case err := <-e.served:
		e.served <- err
	case <-time.After(testTimeout):
		t.Fatal("Serve did not return")
	}
}

func TestServeAfterClose(t *testing.T) {
	e := newEnv(t)
	e.ep.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ep.Serve("sb-2", ln); err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("listener not closed: %v", err)
	}
	e.ep.Close() // twice is fine
}

func TestMaxConns(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxConns = 1 })
	port := echoServer(t, "")
	resp, conn := e.connect(fmt.Sprintf("api.moat.test:%d", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	second := e.dial()
	if n, err := second.Read(make([]byte, 1)); n != 0 || err == nil || isTimeoutErr(err) {
		t.Fatalf("second connection: %d %v, want closed", n, err)
	}
	e.events.wait(t, "too-many-connections", isDeny(CodeTooManyConnections))
	// Control: the first connection still works.
	io.WriteString(conn, "ping")
	b := make([]byte, 4)
	if _, err := io.ReadFull(conn, b); err != nil || string(b) != "ping" {
		t.Fatalf("first connection: %q %v", b, err)
	}
}

func TestEvents(t *testing.T) {
	e := newEnv(t)
	port := echoServer(t, "")
	resp, conn := e.connect(fmt.Sprintf("API.moat.test.:%d", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	io.WriteString(conn, "hello")
	io.ReadFull(conn, make([]byte, 5))
	conn.(*bufConn).Conn.(*net.TCPConn).CloseWrite()
	io.ReadAll(conn)

	dns := e.events.wait(t, "dns", func(ev Event) bool { return ev.Kind == KindDNS })
	if dns.Host != "api.moat.test" || dns.Decision != DecisionAllow || len(dns.Answers) != 1 || dns.Answers[0] != "127.0.0.1" || dns.Sandbox != "sb-1" {
		t.Errorf("dns event: %+v", dns)
	}
	allow := e.events.wait(t, "connect", func(ev Event) bool { return ev.Kind == KindConnect })
	want := fmt.Sprintf("127.0.0.1:%d", port)
	if allow.Decision != DecisionAllow || allow.Addr != want || allow.Rule != "allow api.moat.test" || allow.Port != port || allow.Proto != ProtoConnect {
		t.Errorf("connect event: %+v", allow)
	}
	cl := e.events.wait(t, "close", func(ev Event) bool { return ev.Kind == KindClose })
	if cl.BytesUp != 5 || cl.BytesDown != 5 || cl.Addr != want || cl.Duration <= 0 {
		t.Errorf("close event: %+v", cl)
	}
	if ev := e.events.all(); ev[0].Kind != KindDNS || ev[1].Kind != KindConnect || ev[0].Time.IsZero() {
		t.Errorf("order: %+v", ev)
	}
	b, _ := json.Marshal(cl)
	for _, k := range []string{`"kind":"close"`, `"bytes_up":5`, `"bytes_down":5`, `"sandbox":"sb-1"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON %s lacks %s", b, k)
		}
	}
	if strings.Contains(string(b), "answers") {
		t.Errorf("JSON %s: empty answers not omitted", b)
	}

	// HTTP: bytes are the bodies.
	_, hport := upstream(t)
	r, err := e.client(nil).Post(fmt.Sprintf("http://api.moat.test:%d/p", hport), "text/plain", strings.NewReader("12345678"))
	if err != nil {
		t.Fatal(err)
	}
	got := readBody(t, r)
	hc := e.events.wait(t, "http close", func(ev Event) bool { return ev.Kind == KindClose && ev.Proto == ProtoHTTP })
	if hc.BytesUp != 8 || hc.BytesDown != int64(len(got)) || hc.Addr != fmt.Sprintf("127.0.0.1:%d", hport) {
		t.Errorf("http close event: %+v (body %q)", hc, got)
	}
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
