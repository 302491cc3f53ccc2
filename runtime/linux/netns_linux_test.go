package linux

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/sandbox"
)

// greeter is an Egress that answers every connection with one line naming
// the sandbox, or, closed before Serve, stands for a proxy that failed.
type greeter struct {
	mu     sync.Mutex
	ln     net.Listener
	closed bool
	served chan string
}

func (g *greeter) Serve(id string, ln net.Listener) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		ln.Close()
		return nil
	}
	g.ln = ln
	g.mu.Unlock()
	g.served <- id
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil
		}
		c.Write([]byte("egress " + id + "\n"))
		c.Close()
	}
}

func (g *greeter) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.ln != nil {
		return g.ln.Close()
	}
	return nil
}

// connectScript connects to the proxy port inside the sandbox and prints
// the first line it gets, or the error.
const connectScript = `
import socket, sys
for host in ("127.0.0.1", "::1"):
    try:
        s = socket.create_connection((host, 3128), timeout=10)
        print(host, s.makefile().readline().strip())
    except OSError as e:
        print(host, "error", e.errno)
`

// TestProxyListener: in network mode proxy the host's Egress serves a
// listener inside the sandbox's network namespace, on its loopback, before
// any process runs; the sandbox's processes reach it at 127.0.0.1:3128 and
// [::1]:3128, and get the proxy environment. Control: in mode none
// nothing listens there.
func TestProxyListener(t *testing.T) {
	r := newTestRuntime(t)
	g := &greeter{served: make(chan string, 1)}
	spec := &sandbox.Spec{Network: sandbox.Network{Mode: sandbox.NetProxy, Egress: g}}
	res, err := r.Run(context.Background(), spec, &sandbox.Process{Args: []string{"python3", "-c", connectScript + "\nimport os; print(os.environ.get('HTTPS_PROXY'), os.environ.get('no_proxy'))"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	id := <-g.served
	sc := bufio.NewScanner(strings.NewReader(res.Stdout))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	want := []string{"127.0.0.1 egress " + id, "::1 egress " + id, "http://127.0.0.1:3128 localhost,127.0.0.1,::1"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("inside:\n%s\nwant:\n%s", res.Stdout, strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(res.Enforcement.Network, "proxy") {
		t.Errorf("enforcement network %q", res.Enforcement.Network)
	}
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if !closed {
		t.Error("the runtime did not close the egress at shutdown")
	}

	// Control: no proxy in mode none, and no proxy variables.
	res, err = r.Run(context.Background(), &sandbox.Spec{}, &sandbox.Process{Args: []string{"python3", "-c", connectScript + "\nimport os; print(os.environ.get('HTTPS_PROXY'))"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	if res.Stdout != "127.0.0.1 error 111\n::1 error 111\nNone\n" {
		t.Errorf("mode none:\n%s", res.Stdout)
	}
}

// TestProxyAbsentMeansNoNetwork: a proxy that has failed (its listener
// closed) leaves the sandbox with no network at all, never an open one.
func TestProxyAbsentMeansNoNetwork(t *testing.T) {
	r := newTestRuntime(t)
	g := &greeter{served: make(chan string, 1)}
	g.Close()
	spec := &sandbox.Spec{Network: sandbox.Network{Mode: sandbox.NetProxy, Egress: g}}
	res, err := r.Run(context.Background(), spec, &sandbox.Process{Args: []string{"python3", "-c", connectScript + `
import socket
for addr in (("1.1.1.1", 80), ("8.8.8.8", 53)):
    try:
        socket.create_connection(addr, timeout=5)
        print(addr[0], "connected")
    except OSError as e:
        print(addr[0], "error", e.errno)
`}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	want := "127.0.0.1 error 111\n::1 error 111\n1.1.1.1 error 101\n8.8.8.8 error 101\n"
	if res.Stdout != want {
		t.Errorf("inside with the proxy gone:\n%s\nwant (ECONNREFUSED, ENETUNREACH):\n%s", res.Stdout, want)
	}
}

// TestProxySpecChecks: mode proxy without an Egress and unknown modes are
// invalid specs.
func TestProxySpecChecks(t *testing.T) {
	r := newTestRuntime(t)
	for _, n := range []sandbox.Network{{Mode: sandbox.NetProxy}, {Mode: "bridge"}} {
		if _, err := r.Create(context.Background(), &sandbox.Spec{Network: n}); err == nil || !strings.Contains(err.Error(), "invalid sandbox spec") {
			t.Errorf("%+v: %v", n, err)
		}
	}
}
