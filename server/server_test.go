package server

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestSandboxLifecycle drives one sandbox through the HTTP API: exec,
// streamed exec, files, a background process fed through stdin, delete.
func TestSandboxLifecycle(t *testing.T) {
	h := newFakeHarness(t, nil)
	id := h.create(tokenA, api.CreateSandbox{Labels: map[string]string{"task": "t1"}})
	base := "/v1/sandboxes/" + id

	r := h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"sh", "-c", "echo out; echo err >&2; id -u; exit 3"}})
	var res sandbox.Result
	r.decode(t, &res)
	if r.status != 200 || res.ExitCode != 3 || res.Stdout != "out\n1000\n" || res.Stderr != "err\n" {
		t.Fatalf("exec: %d %+v", r.status, res)
	}
	// State persists between calls; stdin is delivered.
	r = h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"sh", "-c", "cat > state; cat state"}, Stdin: "kept"})
	r.decode(t, &res)
	if res.Stdout != "kept" {
		t.Fatalf("stdin exec: %s", r.body)
	}
	r = h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"cat", "/workspace/state"}})
	r.decode(t, &res)
	if res.Stdout != "kept" {
		t.Fatalf("state did not persist: %s", r.body)
	}

	// Streamed exec: numbered events, exit last.
	r = h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"sh", "-c", "printf a; printf b >&2; printf '\\377'"}, Stream: true})
	if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("stream content type %q: %s", ct, r.body)
	}
	evs := events(t, r.body)
	var got []byte
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		if ev.Type == api.EventStdout {
			got = append(got, ev.Output()...)
		}
	}
	last := evs[len(evs)-1]
	if last.Type != api.EventExit || last.Result == nil || last.Result.ExitCode != 0 || string(got) != "a\xff" {
		t.Fatalf("stream: %s", r.body)
	}
	// A fast-failing command still ends its stream cleanly.
	r = h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"/nonexistent"}, Stream: true})
	evs = events(t, r.body)
	if len(evs) != 1 || evs[0].Type != api.EventExit || evs[0].Result.ExitCode != sandbox.ExitNotFound {
		t.Fatalf("failing stream: %s", r.body)
	}

	// Files.
	r = h.do("PUT", base+"/files?path=dir/hello.txt&mode=0600", tokenA, []byte("hello"))
	if r.status != 200 {
		// the parent does not exist yet
		if e := r.apiErr(t); e.Errno != "ENOENT" {
			t.Fatalf("write without parent: %d %s", r.status, r.body)
		}
	}
	if r = h.do("POST", base+"/files/mkdir", tokenA, api.Mkdir{Path: "dir/sub", Parents: true}); r.status != 200 {
		t.Fatalf("mkdir: %d %s", r.status, r.body)
	}
	if r = h.do("PUT", base+"/files?path=dir/hello.txt&mode=0600", tokenA, []byte("hello")); r.status != 200 {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	if r = h.do("GET", base+"/files?path=/workspace/dir/hello.txt", tokenA, nil); r.status != 200 || string(r.body) != "hello" {
		t.Fatalf("read: %d %q", r.status, r.body)
	}
	var fi sandbox.FileInfo
	r = h.do("GET", base+"/files/stat?path=dir/hello.txt", tokenA, nil)
	r.decode(t, &fi)
	if fi.Type != "file" || fi.Size != 5 || fi.Mode != 0o600 {
		t.Fatalf("stat: %s", r.body)
	}
	if r = h.do("POST", base+"/files/move", tokenA, api.Move{From: "dir/hello.txt", To: "dir/sub/moved.txt"}); r.status != 200 {
		t.Fatalf("move: %d %s", r.status, r.body)
	}
	var dl api.DirList
	r = h.do("GET", base+"/files/list?path=dir/sub", tokenA, nil)
	r.decode(t, &dl)
	if len(dl.Entries) != 1 || dl.Entries[0].Name != "moved.txt" {
		t.Fatalf("list: %s", r.body)
	}
	// Archives both ways.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Name: "up/a.txt", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("abc"))
	_ = tw.Close()
	if r = h.do("PUT", base+"/archive?path=/workspace", tokenA, tb.Bytes()); r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	r = h.do("GET", base+"/archive?path=/workspace/up", tokenA, nil)
	if r.status != 200 || r.header.Get("Content-Type") != "application/x-tar" {
		t.Fatalf("download: %d %s", r.status, r.body)
	}
	tr := tar.NewReader(bytes.NewReader(r.body))
	found := false
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		if strings.HasSuffix(hdr.Name, "a.txt") {
			b, _ := io.ReadAll(tr)
			found = string(b) == "abc"
		}
	}
	if !found {
		t.Fatal("downloaded archive lacks up/a.txt")
	}
	if r = h.do("POST", base+"/files/remove", tokenA, api.Remove{Path: "dir", Recursive: true}); r.status != 200 {
		t.Fatalf("remove: %d %s", r.status, r.body)
	}
	if r = h.do("GET", base+"/files/stat?path=dir", tokenA, nil); r.status != 404 || r.apiErr(t).Errno != "ENOENT" {
		t.Fatalf("stat after remove: %d %s", r.status, r.body)
	}

	// A background process: stdin, output, signal, wait.
	var p api.Process
	r = h.do("POST", base+"/processes", tokenA, api.Exec{Args: []string{"sh", "-c", "while read l; do echo got $l; done; echo eof; sleep 1000"}})
	r.decode(t, &p)
	if r.status != 201 || p.State != api.ProcRunning {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	pbase := fmt.Sprintf("%s/processes/%d", base, p.ID)
	if r = h.do("POST", pbase+"/stdin", tokenA, api.Stdin{Data: "one\ntwo\n", EOF: true}); r.status != 200 {
		t.Fatalf("stdin: %d %s", r.status, r.body)
	}
	if r = h.do("POST", pbase+"/stdin", tokenA, api.Stdin{Data: "late"}); r.status != 409 {
		t.Fatalf("stdin after eof: %d %s", r.status, r.body)
	}
	// Follow the output until "eof" shows, across reads that resume.
	var text string
	var after uint64
	for !strings.Contains(text, "eof") {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", h.srv.URL+pbase+"/output?follow=true&after="+strconv.FormatUint(after, 10), nil)
		req.Header.Set("Authorization", "Bearer "+tokenA)
		resp, err := h.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		line, err := readStreamLine(resp.Body)
		cancel()
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		evs := events(t, line)
		text += evs[0].Text
		after = evs[0].Seq
	}
	if text != "got one\ngot two\neof\n" {
		t.Fatalf("output %q", text)
	}
	if r = h.do("POST", pbase+"/signal", tokenA, api.Signal{Signal: "TERM"}); r.status != 200 {
		t.Fatalf("signal: %d %s", r.status, r.body)
	}
	r = h.do("POST", pbase+"/wait", tokenA, api.ProcessRef{TimeoutMs: 10000})
	r.decode(t, &p)
	if p.State != api.ProcExited || p.Result == nil || p.Result.ExitCode != 128+int(unix.SIGTERM) {
		t.Fatalf("wait: %s", r.body)
	}
	r = h.do("GET", pbase+"/output", tokenA, nil)
	evs = events(t, r.body)
	if len(evs) < 2 || evs[len(evs)-1].Type != api.EventExit || evs[len(evs)-1].Result.ExitCode != 143 {
		t.Fatalf("replayed output: %s", r.body)
	}
	if r = h.do("POST", pbase+"/signal", tokenA, api.Signal{Signal: "KILL"}); r.status != 410 {
		t.Fatalf("signal after exit: %d %s", r.status, r.body)
	}
	var pl api.ProcessList
	h.do("GET", base+"/processes", tokenA, nil).decode(t, &pl)
	if len(pl.Processes) != 1 || pl.Processes[0].ID != p.ID {
		t.Fatalf("process list: %+v", pl)
	}

	// Listing, then delete: the sandbox stays visible as stopped.
	var list api.SandboxList
	h.do("GET", "/v1/sandboxes", tokenA, nil).decode(t, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != id || list.Sandboxes[0].Labels["task"] != "t1" {
		t.Fatalf("list: %+v", list)
	}
	var sb api.Sandbox
	r = h.do("DELETE", base, tokenA, nil)
	r.decode(t, &sb)
	if sb.State != api.StateStopped || sb.EndReason != api.EndDeleted {
		t.Fatalf("delete: %s", r.body)
	}
	if r = h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"true"}}); r.status != 409 || r.apiErr(t).Code != api.CodeNotRunning {
		t.Fatalf("exec after delete: %d %s", r.status, r.body)
	}
	r = h.do("GET", base, tokenA, nil)
	r.decode(t, &sb)
	if r.status != 200 || sb.State != api.StateStopped || sb.EndReason != api.EndDeleted {
		t.Fatalf("get after delete: %d %s", r.status, r.body)
	}

	// Every call left audit events, in order, for this tenant.
	var page api.AuditPage
	h.do("GET", "/v1/audit?limit=1000&sandbox="+id, tokenA, nil).decode(t, &page)
	kinds := map[string]int{}
	for _, e := range page.Events {
		kinds[e.Kind]++
		if e.Tenant != "a" {
			t.Fatalf("event of tenant %q in tenant a's audit", e.Tenant)
		}
	}
	for _, k := range []string{"sandbox.create", "process.exec", "file.write", "file.read", "process.start", "process.stdin",
		"process.signal", "process.exit", "sandbox.end", "process.wait", "process.output", "process.list", "sandbox.get", "file.stat"} {
		if kinds[k] == 0 {
			t.Errorf("no %s event in %v", k, kinds)
		}
	}
}

// readStreamLine reads one line of a stream.
func readStreamLine(r io.Reader) ([]byte, error) {
	var out []byte
	b := make([]byte, 1)
	for {
		n, err := r.Read(b)
		if n == 1 {
			out = append(out, b[0])
			if b[0] == '\n' {
				return out, nil
			}
		}
		if err != nil {
			return out, err
		}
	}
}

// TestTenantIsolation: tenant b cannot see or touch tenant a's sandbox,
// which works for a (the control).
func TestTenantIsolation(t *testing.T) {
	h := newFakeHarness(t, nil)
	id := h.create(tokenA, api.CreateSandbox{})
	base := "/v1/sandboxes/" + id
	reqs := []struct {
		method, path string
		body         any
	}{
		{"GET", base, nil},
		{"POST", base + "/exec", api.Exec{Args: []string{"true"}}},
		{"POST", base + "/processes", api.Exec{Args: []string{"true"}}},
		{"GET", base + "/processes", nil},
		{"GET", base + "/files?path=/etc/hostname", nil},
		{"PUT", base + "/files?path=x", []byte("x")},
		{"GET", base + "/files/list?path=/", nil},
		{"GET", base + "/archive?path=/etc/hostname", nil},
		{"DELETE", base, nil},
	}
	for _, rq := range reqs {
		if r := h.do(rq.method, rq.path, tokenB, rq.body); r.status != 404 || r.apiErr(t).Code != api.CodeNotFound {
			t.Errorf("tenant b %s %s: %d %s", rq.method, rq.path, r.status, r.body)
		}
	}
	var list api.SandboxList
	h.do("GET", "/v1/sandboxes?state=", tokenB, nil).decode(t, &list)
	if len(list.Sandboxes) != 0 {
		t.Fatalf("tenant b lists %+v", list.Sandboxes)
	}
	var page api.AuditPage
	h.do("GET", "/v1/audit", tokenB, nil).decode(t, &page)
	for _, e := range page.Events {
		if e.Tenant != "b" {
			t.Fatalf("tenant b sees event %+v", e)
		}
	}
	// Control: the owner can do all of it.
	for _, rq := range reqs {
		if r := h.do(rq.method, rq.path, tokenA, rq.body); r.status >= 300 {
			t.Errorf("tenant a %s %s: %d %s", rq.method, rq.path, r.status, r.body)
		}
	}
}

// TestAuth: no token or a wrong one is 401 with a JSON error, recorded as
// a denial; nothing runs.
func TestAuth(t *testing.T) {
	h := newFakeHarness(t, nil)
	for _, tok := range []string{"", "wrong", tokenA + "x", strings.ToUpper(tokenA)} {
		r := h.do("POST", "/v1/sandboxes", tok, api.CreateSandbox{})
		if r.status != 401 || r.apiErr(t).Code != api.CodeUnauthenticated || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("token %q: %d %s", tok, r.status, r.body)
		}
	}
	h.svc.mu.Lock()
	n := len(h.svc.sandboxes)
	h.svc.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d sandboxes created without a valid token", n)
	}
	// Control: the same request with the tenant's token is served.
	if r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{}); r.status != 201 {
		t.Fatalf("control with a valid token: %d %s", r.status, r.body)
	}
	if r := h.do("GET", "/healthz", "", nil); r.status != 200 {
		t.Fatalf("healthz: %d", r.status)
	}
	if r := h.do("GET", "/readyz", "", nil); r.status != 200 {
		t.Fatalf("readyz: %d", r.status)
	}
	r := h.do("GET", "/metrics", "", nil)
	if !bytes.Contains(r.body, []byte(`moat_denials_total{reason="token"} 4`)) {
		t.Fatalf("metrics lack the denials:\n%s", r.body)
	}
}

// TestTokensFile: a first start creates a 0600 token that authenticates;
// a tokens file readable by others is refused.
func TestTokensFile(t *testing.T) {
	dir := t.TempDir()
	tokens, created, err := LoadTokens(dir)
	if err != nil || !created {
		t.Fatalf("LoadTokens: %v %v", created, err)
	}
	for _, name := range []string{TokenFile, TokensFile, ApproverTokenFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", name, fi.Mode(), err)
		}
	}
	tok, _ := os.ReadFile(filepath.Join(dir, TokenFile))
	c, err := tokens.Authenticate(strings.TrimSpace(string(tok)))
	if err != nil || c.Tenant != DefaultTenant || c.Approver {
		t.Fatalf("Authenticate: %+v %v", c, err)
	}
	// The approver token of the first start answers approvals.
	atok, _ := os.ReadFile(filepath.Join(dir, ApproverTokenFile))
	if c, err := tokens.Authenticate(strings.TrimSpace(string(atok))); err != nil || c.Tenant != DefaultTenant || !c.Approver {
		t.Fatalf("Authenticate approver: %+v %v", c, err)
	}
	if _, created, err := LoadTokens(dir); err != nil || created {
		t.Fatalf("second LoadTokens: %v %v", created, err)
	}
	if err := os.Chmod(filepath.Join(dir, TokensFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadTokens(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable tokens file: %v", err)
	}
	for _, bad := range []string{"", "a", "a short", "bad/tenant " + tokenA, "a " + tokenA + "\nb " + tokenA, "a " + tokenA + " admin", "a " + tokenA + " approver extra"} {
		if _, err := parseTokens([]byte(bad)); err == nil {
			t.Errorf("tokens %q accepted", bad)
		}
	}
}

// TestBadInput: malformed requests get a 4xx JSON error, never a 5xx, and
// leave no sandbox behind.
func TestBadInput(t *testing.T) {
	h := newFakeHarness(t, withLayers(t))
	id := h.create(tokenA, api.CreateSandbox{})
	base := "/v1/sandboxes/" + id
	cases := []struct {
		method, path string
		body         any
		status       int
	}{
		{"POST", "/v1/sandboxes", `{"limits":{"memory_bytes":-1}}`, 400},
		{"POST", "/v1/sandboxes", `{"limits":{"memory_bytes":1}}`, 400},
		{"POST", "/v1/sandboxes", `{"hostname":"a b"}`, 400},
		{"POST", "/v1/sandboxes", `{"timeout_ms":-5}`, 400},
		{"POST", "/v1/sandboxes", `{"timeout_ms":99999999999999}`, 400},
		{"POST", "/v1/sandboxes", `{"workspace":"/etc"}`, 403},
		{"POST", "/v1/sandboxes", `{"binds":[{"source":"/root","target":"/r"}]}`, 403},
		{"POST", "/v1/sandboxes", `{"limits":"x"}`, 400},
		{"POST", "/v1/sandboxes", `[1,2]`, 400},
		{"POST", "/v1/sandboxes", `{} {}`, 400},
		{"POST", "/v1/sandboxes", `{"labels":{"":"x"}}`, 400},
		{"POST", "/v1/sandboxes", []byte(`{}`), 415},
		{"POST", "/v1/sandboxes", `{"x":` + strings.Repeat(" ", MaxJSONBody) + `1}`, 413},
		{"GET", "/v1/sandboxes?limit=abc", nil, 400},
		{"GET", "/v1/sandboxes?state=zombie", nil, 400},
		{"GET", "/v1/sandboxes/nope", nil, 404},
		{"GET", "/v1/sandboxes/" + strings.Repeat("x", 5000), nil, 404},
		{"POST", base + "/exec", `{"args":[]}`, 400},
		{"POST", base + "/exec", `{"args":[],"env":["TOKEN=hunter2-secret"]}`, 400},
		{"POST", base + "/exec", `{"args":["true"],"env":["NOEQUALS"]}`, 400},
		{"POST", base + "/exec", `{"args":["true"],"timeout_ms":-1}`, 400},
		{"POST", base + "/exec", `{"args":["true"],"output_limit":-1}`, 400},
		{"POST", base + "/exec", `{"args":["a\u0000b"]}`, 400},
		{"POST", base + "/exec", `{"args":["true"],"cwd":"/nonexistent"}`, 200}, // a result (exit 125), not a server fault
		{"POST", base + "/processes", `{"args":["true"],"stdin":"x"}`, 400},
		{"GET", base + "/processes/99", nil, 404},
		{"GET", base + "/processes/-1", nil, 400},
		{"POST", base + "/processes/99/signal", `{"signal":"TERM"}`, 404},
		{"GET", base + "/files", nil, 400},
		{"GET", base + "/files?path=/etc/shadow", nil, 403}, // policy_denied: a host secret
		{"GET", base + "/files?path=/proc/1/environ", nil, 403},
		{"GET", base + "/files?path=/proc/self/root/etc/passwd&max_bytes=-1", nil, 400},
		{"PUT", base + "/files?path=/usr/bin/x", []byte("x"), 403},
		{"PUT", base + "/files?path=x&mode=999", []byte("x"), 400},
		{"PUT", base + "/archive?path=/workspace", []byte("not a tar"), 400},
		{"POST", base + "/files/move", `{"from":"","to":"x"}`, 400},
		{"POST", base + "/files/mkdir", `{"path":"/"}`, 409},
		{"GET", "/v1/audit?since=yesterday", nil, 400},
		{"GET", "/v1/audit?limit=100000", nil, 400},
		{"GET", "/v1/nothing", nil, 404},
		{"PATCH", base, nil, 405},
	}
	for _, c := range cases {
		r := h.do(c.method, c.path, tokenA, c.body)
		if r.status != c.status {
			t.Errorf("%s %s %.60v: status %d, want %d: %s", c.method, c.path, c.body, r.status, c.status, r.body)
			continue
		}
		if r.status >= 400 {
			if e := r.apiErr(t); e.Code == "" || e.Message == "" {
				t.Errorf("%s %s: error without code or message: %s", c.method, c.path, r.body)
			}
		}
	}
	var list api.SandboxList
	h.do("GET", "/v1/sandboxes?state=running", tokenA, nil).decode(t, &list)
	if len(list.Sandboxes) != 1 {
		t.Fatalf("bad input left %d running sandboxes", len(list.Sandboxes))
	}
	// Refused calls are audited too, without the values of their
	// environment.
	var page api.AuditPage
	h.do("GET", "/v1/audit?kind=process.exec&limit=1000", tokenA, nil).decode(t, &page)
	refused := 0
	for _, e := range page.Events {
		if strings.Contains(e.Error, "args must name a command") && e.Sandbox == id {
			refused++
		}
	}
	if refused != 2 {
		t.Fatalf("%d audit events for the 2 refused execs", refused)
	}
	tape, err := os.ReadFile(filepath.Join(h.dir, "audit", "audit.jsonl"))
	if err != nil || !bytes.Contains(tape, []byte("TOKEN")) || bytes.Contains(tape, []byte("hunter2-secret")) {
		t.Fatalf("the audit tape must name the env key but not its value (read err %v)", err)
	}
	// Random garbage on every route: never a 5xx.
	for _, op := range api.Ops {
		path := strings.NewReplacer("{sandbox}", id, "{process}", "1", "{snapshot}", "snap-00000000000000000000").Replace(op.Path)
		for _, body := range []string{"", "{", "null", `{"args":1}`, `{"path":["x"]}`, "\x00\xff"} {
			for _, q := range []string{"", "?path=%00", "?after=18446744073709551616", "?follow=maybe"} {
				var b any
				if body != "" {
					b = body
				}
				r := h.do(op.Method, path+q, tokenA, b)
				if r.status >= 500 {
					t.Errorf("%s %s%s %q: %d %s", op.Method, path, q, body, r.status, r.body)
				}
			}
		}
	}
}

// TestBusy: a second exec while one runs is refused unless it asks for
// concurrency.
func TestBusy(t *testing.T) {
	h := newFakeHarness(t, nil)
	id := h.create(tokenA, api.CreateSandbox{})
	base := "/v1/sandboxes/" + id
	// The first exec streams; once its first event arrives it is running.
	body := strings.NewReader(`{"args":["sh","-c","echo started; cat /workspace/fifo"],"stream":true}`)
	if r := h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"mkfifo", "/workspace/fifo"}}); r.status != 200 {
		t.Fatal(string(r.body))
	}
	req, _ := http.NewRequest("POST", h.srv.URL+base+"/exec", body)
	req.Header.Set("Authorization", "Bearer "+tokenA)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := readStreamLine(resp.Body); err != nil {
		t.Fatal(err)
	}
	r := h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"true"}})
	if r.status != 409 || r.apiErr(t).Code != api.CodeBusy {
		t.Fatalf("second exec: %d %s", r.status, r.body)
	}
	// With concurrent set it runs, and here releases the first.
	r = h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"sh", "-c", "echo done > /workspace/fifo"}, Concurrent: true})
	if r.status != 200 {
		t.Fatalf("concurrent exec: %d %s", r.status, r.body)
	}
	rest, _ := io.ReadAll(resp.Body)
	evs := events(t, rest)
	if last := evs[len(evs)-1]; last.Type != api.EventExit || last.Result.ExitCode != 0 {
		t.Fatalf("first exec: %s", rest)
	}
	if r := h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"true"}}); r.status != 200 {
		t.Fatalf("exec after the first ended: %d %s", r.status, r.body)
	}
}

// TestPruning: a sandbox left idle, and one past its maximum age, are
// ended by the pruner with the reason recorded; an active one is not
// pruned for idleness.
func TestPruning(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.PruneInterval = 20 * time.Millisecond })
	idle := h.create(tokenA, api.CreateSandbox{IdleTimeoutMs: 200})
	old := h.create(tokenA, api.CreateSandbox{TimeoutMs: 300})
	busy := h.create(tokenA, api.CreateSandbox{IdleTimeoutMs: 200})
	// A call that lasts longer than the idle timeout keeps "busy" alive.
	r := h.do("POST", "/v1/sandboxes/"+busy+"/exec", tokenA, api.Exec{Args: []string{"sleep", "0.5"}})
	if r.status != 200 {
		t.Fatalf("exec: %d %s", r.status, r.body)
	}
	got := map[string]string{}
	for len(got) < 3 {
		select {
		case e := <-h.ended:
			got[e[0]] = e[1]
		case <-time.After(10 * time.Second):
			t.Fatalf("ended so far: %v", got)
		}
	}
	if got[idle] != api.EndIdle || got[old] != api.EndTimeout || got[busy] != api.EndIdle {
		t.Fatalf("end reasons: %v", got)
	}
	sb, err := h.st.GetSandbox(context.Background(), "a", idle)
	if err != nil || sb.State != api.StateStopped || sb.EndReason != api.EndIdle {
		t.Fatalf("store: %+v %v", sb, err)
	}
}

// TestInitExit: a sandbox whose init dies is marked stopped
// (init_exited) and its calls fail with a clear error.
func TestInitExit(t *testing.T) {
	h := newHarness(t, nil)
	id := h.create(tokenA, api.CreateSandbox{})
	m, err := h.svc.lookup(Caller{Tenant: "a"}, id)
	if err != nil {
		t.Fatal(err)
	}
	pid := initPid(t)
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.sb.Done()
	if reason := h.waitEnd(id, 10*time.Second); reason != api.EndExited {
		t.Fatalf("reason %q", reason)
	}
	if r := h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"true"}}); r.status != 409 {
		t.Fatalf("exec on a dead sandbox: %d %s", r.status, r.body)
	}
	// Another tenant still cannot tell it from a missing one.
	if r := h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenB, api.Exec{Args: []string{"true"}}); r.status != 404 {
		t.Fatalf("tenant b exec on a's dead sandbox: %d %s", r.status, r.body)
	}
}

// initPid finds the one sandbox init that is a child of this process.
func initPid(t *testing.T) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	var found []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmd, []byte("__moat_init")) {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("found %d sandbox inits among our children", len(found))
	}
	return found[0]
}

// TestQuota: a tenant past its quota gets 429; others are unaffected.
func TestQuota(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.MaxPerTenant = 2 })
	h.create(tokenA, api.CreateSandbox{})
	h.create(tokenA, api.CreateSandbox{})
	r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{})
	if r.status != 429 || r.apiErr(t).Code != api.CodeTooMany {
		t.Fatalf("third sandbox: %d %s", r.status, r.body)
	}
	h.create(tokenB, api.CreateSandbox{})
}

// TestConcurrentSandboxes: many clients at once, each with its own
// sandbox, see only their own files.
func TestConcurrentSandboxes(t *testing.T) {
	h := newFakeHarness(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{})
			var sb api.Sandbox
			if err := jsonDecode(r.body, &sb); err != nil || r.status != 201 {
				errs <- fmt.Errorf("create: %d %s", r.status, r.body)
				return
			}
			base := "/v1/sandboxes/" + sb.ID
			want := fmt.Sprintf("client %d", i)
			h.do("PUT", base+"/files?path=who", tokenA, []byte(want))
			for range 5 {
				r := h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"cat", "who"}})
				var res sandbox.Result
				if err := jsonDecode(r.body, &res); err != nil || res.Stdout != want {
					errs <- fmt.Errorf("sandbox %s: %s", sb.ID, r.body)
					return
				}
			}
			h.do("DELETE", base, tokenA, nil)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRequestTimeLimit: a request whose body trickles past the limit is
// cut off, while an exec that runs past it (its body long read) completes.
func TestRequestTimeLimit(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.RequestTimeout = 300 * time.Millisecond })
	id := h.create(tokenA, api.CreateSandbox{})
	r := h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"sleep", "0.8"}, Stream: true})
	evs := events(t, r.body)
	if last := evs[len(evs)-1]; r.status != 200 || last.Type != api.EventExit || last.Result.ExitCode != 0 {
		t.Fatalf("exec past the request limit: %d %s", r.status, r.body)
	}
	// A body that never finishes: the server gives up at the limit.
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("PUT", h.srv.URL+"/v1/sandboxes/"+id+"/files?path=slow", pr)
	req.Header.Set("Authorization", "Bearer "+tokenA)
	go func() { _, _ = pw.Write([]byte("partial")) }()
	resp, err := h.srv.Client().Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("a body that never ended was accepted: %d", resp.StatusCode)
		}
	}
	if r := h.do("GET", "/v1/sandboxes/"+id+"/files/stat?path=slow", tokenA, nil); r.status != 404 {
		t.Fatalf("the cut-off upload left a file: %d %s", r.status, r.body)
	}
}
