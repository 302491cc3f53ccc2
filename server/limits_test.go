package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestFDExhaustion: a create while the daemon is out of file descriptors
// (its RLIMIT_NOFILE lowered to the descriptors it holds) is 503
// resource_exhausted naming open files, not a 500 (issue 17, item 9);
// once descriptors are free again, creates work.
func TestFDExhaustion(t *testing.T) {
	h := newHarness(t, nil)
	// The request goes over a kept-alive connection opened now: with no
	// descriptor free, the server could not accept a new one.
	if r := h.do("GET", "/v1/sandboxes", tokenA, nil); r.status != 200 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}
	defer restore()
	// The limit at the lowest free descriptor, then a few above it: a
	// create runs out at each of its stages in turn (policy files,
	// control socket, pipes, the init's start, the cgroup, the root's
	// layers), or has enough.
	refused := 0
	for extra := range 24 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		lowest := f.Fd()
		f.Close()
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: uint64(lowest) + uint64(extra), Max: old.Max}); err != nil {
			t.Fatal(err)
		}
		r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{})
		restore()
		if r.status == http.StatusCreated {
			var sb api.Sandbox
			r.decode(t, &sb)
			if d := h.do("DELETE", "/v1/sandboxes/"+sb.ID, tokenA, nil); d.status != 200 {
				t.Fatalf("delete: %d %s", d.status, d.body)
			}
			continue
		}
		refused++
		e := r.apiErr(t)
		if r.status != http.StatusServiceUnavailable || e.Code != api.CodeTooMany || e.Resource != api.ResourceOpenFiles ||
			!strings.Contains(e.Message, "open files") {
			t.Errorf("create with %d descriptors free: %d %s; want 503 resource_exhausted, resource open_files", extra, r.status, r.body)
		}
	}
	if refused == 0 {
		t.Fatal("no create ran out of descriptors")
	}
	// Nothing is left half made, and the daemon recovers.
	h.create(tokenA, api.CreateSandbox{})
	h.svc.mu.Lock()
	n, pending := len(h.svc.sandboxes), h.svc.pendingTotal
	h.svc.mu.Unlock()
	if n != 1 || pending != 0 {
		t.Fatalf("after the refused create: %d sandboxes, %d pending; want 1 and 0", n, pending)
	}
}

// TestSlowBody: a request body that stops arriving is cut off within the
// body deadline (here 500 ms; before: the 5-minute request limit), with
// 408 timeout; an upload that keeps arriving at the minimum rate lasts
// past the deadline and succeeds; a followed output (no body) outlasts it
// (issue 17, item 10).
func TestSlowBody(t *testing.T) {
	const deadline = 500 * time.Millisecond
	h := newFakeHarness(t, func(c *Config) {
		c.BodyTimeout, c.BodyChunk = deadline, 64<<10
		c.RequestTimeout = time.Minute
	})
	id := h.create(tokenA, api.CreateSandbox{})

	// A body that stops after its first bytes: the pipe stays open.
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("PUT", h.srv.URL+"/v1/sandboxes/"+id+"/files?path=slow", pr)
	req.Header.Set("Authorization", "Bearer "+tokenA)
	wrote := make(chan struct{})
	go func() {
		_, _ = pw.Write([]byte("partial"))
		close(wrote)
	}()
	start := time.Now()
	resp, err := h.srv.Client().Do(req)
	took := time.Since(start)
	<-wrote
	if err != nil {
		t.Errorf("stalled body: %v; want an answer, 408 timeout", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("stalled body: %d %s; want 408 timeout", resp.StatusCode, body)
		}
	}
	if took > 10*deadline {
		t.Errorf("stalled body held the request %s; the body deadline is %s", took, deadline)
	}
	if r := h.do("GET", "/v1/sandboxes/"+id+"/files/stat?path=slow", tokenA, nil); r.status != 404 {
		t.Errorf("the cut-off upload left a file: %d %s", r.status, r.body)
	}

	// An upload paced at one chunk per 200 ms: 1.6 s in all, past the
	// deadline, never slower than the minimum rate.
	const chunks = 8
	pr2, pw2 := io.Pipe()
	go func() {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for range chunks {
			if _, err := pw2.Write(chunk); err != nil {
				return
			}
			time.Sleep(200 * time.Millisecond) // the pacing of the writer
		}
		pw2.Close()
	}()
	req2, _ := http.NewRequest("PUT", h.srv.URL+"/v1/sandboxes/"+id+"/files?path=paced", pr2)
	req2.Header.Set("Authorization", "Bearer "+tokenA)
	resp2, err := h.srv.Client().Do(req2)
	if err != nil {
		t.Fatalf("paced upload: %v", err)
	}
	body2, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	var fi sandbox.FileInfo
	if r := h.do("GET", "/v1/sandboxes/"+id+"/files/stat?path=paced", tokenA, nil); resp2.StatusCode != 200 || r.status != 200 {
		t.Fatalf("paced upload: %d %s; stat %d %s", resp2.StatusCode, body2, r.status, r.body)
	} else if r.decode(t, &fi); fi.Size != chunks*64<<10 {
		t.Fatalf("paced upload wrote %d bytes, want %d", fi.Size, chunks*64<<10)
	}

	// A followed output has no body: no deadline ends it.
	r := h.do("POST", "/v1/sandboxes/"+id+"/processes", tokenA, api.Exec{Args: []string{"sh", "-c", "sleep 1.5; echo done"}})
	var p api.Process
	r.decode(t, &p)
	r = h.do("GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/output?follow=true", id, p.ID), tokenA, nil)
	evs := events(t, r.body)
	if r.status != 200 || len(evs) == 0 || evs[len(evs)-1].Type != api.EventExit {
		t.Errorf("a followed output past the body deadline: %d %s", r.status, r.body)
	}
}

// TestConnCap: a client address holds at most the cap of open
// connections; the next one is refused with 503 resource_exhausted
// (connections) while another address is served, and a closed connection
// frees its place (issue 17, item 10).
func TestConnCap(t *testing.T) {
	h := newFakeHarness(t, nil)
	const max = 3
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan string, 16)
	refused := make(chan string, 16)
	lim := LimitConns(ln, max)
	lim.OnClose = func(src string) { closed <- src }
	lim.OnRefuse = func(src string) { refused <- src }
	srv := &http.Server{Handler: h.srv.Config.Handler, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lim)
	defer srv.Close()
	addr := ln.Addr().String()

	// dial opens a connection from src and asks for /healthz on it; it
	// returns the connection (kept open) and the status line.
	dial := func(src string) (net.Conn, string) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: moat\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return c, "error: " + err.Error()
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return c, resp.Status
	}
	var held []net.Conn
	for i := range max {
		c, st := dial("127.0.0.1")
		if st != "200 OK" {
			t.Fatalf("connection %d of %d: %s", i+1, max, st)
		}
		held = append(held, c)
	}
	c, st := dial("127.0.0.1")
	c.Close()
	if src := <-refused; src != "127.0.0.1" {
		t.Fatalf("refused %s", src)
	}
	if !strings.HasPrefix(st, "503") && !strings.HasPrefix(st, "error") {
		t.Fatalf("connection %d from one address: %s; want it refused", max+1, st)
	}
	c2, st := dial("127.0.0.2")
	if st != "200 OK" {
		t.Fatalf("another address while the first is at its cap: %s", st)
	}
	c2.Close()
	<-closed // c2's
	held[0].Close()
	<-closed
	c3, st := dial("127.0.0.1")
	if st != "200 OK" {
		t.Fatalf("after a connection closed: %s", st)
	}
	c3.Close()
	for _, c := range held[1:] {
		c.Close()
	}
}
