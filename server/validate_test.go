package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// quick sends a request that must be answered within d: a handler that
// spins or blocks fails the test instead of hanging it.
func (h *harness) quick(d time.Duration, method, path, token string, body any) reply {
	h.t.Helper()
	j, ok := body.([]byte) // raw JSON
	if !ok && body != nil {
		var err error
		if j, err = json.Marshal(body); err != nil {
			h.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var rd io.Reader
	if j != nil {
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if j != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			h.t.Fatalf("%s %s: no answer within %v (the daemon spins or blocks)", method, path, d)
		}
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// wantBadRequest checks a 400 invalid_argument whose message holds want.
func wantBadRequest(t *testing.T, what string, r reply, want string) {
	t.Helper()
	if r.status != http.StatusBadRequest {
		t.Fatalf("%s: %d %s, want 400", what, r.status, r.body)
	}
	if e := r.apiErr(t); e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, want) {
		t.Fatalf("%s: %+v, want invalid_argument with %q", what, e, want)
	}
}

// TestCreateBadBindTarget: a relative or unclean bind target is refused
// with 400 at once (it used to make the policy compiler loop forever,
// holding a quota slot); the slot is free again afterwards.
func TestCreateBadBindTarget(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.AllowHostPaths = true; c.MaxPerTenant = 1 })
	ws := t.TempDir()
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"rel", ".", "./x", "../x", "x/", "/x/../y", "/x//y", "/a\x00b"} {
		r := h.quick(20*time.Second, "POST", "/v1/sandboxes", tokenA,
			api.CreateSandbox{Workspace: ws, Binds: []sandbox.Bind{{Source: src, Target: target, Writable: true}}})
		wantBadRequest(t, "target "+target, r, "bind target")
	}
	for _, source := range []string{"rel", "/a/../b", "/a\x00b", "/" + strings.Repeat("x/", 3000)} {
		r := h.quick(20*time.Second, "POST", "/v1/sandboxes", tokenA,
			api.CreateSandbox{Binds: []sandbox.Bind{{Source: source, Target: "/data"}}})
		wantBadRequest(t, "source "+source[:min(len(source), 20)], r, "bind source")
	}
	// The refused creates hold no slot: the tenant's only one is free.
	id := h.create(tokenA, api.CreateSandbox{Workspace: ws, Binds: []sandbox.Bind{{Source: src, Target: "/data"}}})
	h.do("DELETE", "/v1/sandboxes/"+id, tokenA, nil)
}

// TestCreateSystemTrees: /proc, /sys and /dev (and below) of the host
// cannot be bound or be the workspace: 400, not a 500 from the mount.
func TestCreateSystemTrees(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.AllowHostPaths = true })
	for _, req := range []api.CreateSandbox{
		{Binds: []sandbox.Bind{{Source: "/sys", Target: "/hostsys"}}},
		{Binds: []sandbox.Bind{{Source: "/proc", Target: "/hostproc"}}},
		{Binds: []sandbox.Bind{{Source: "/dev", Target: "/hostdev"}}},
		{Binds: []sandbox.Bind{{Source: "/sys/kernel", Target: "/k"}}},
		{Binds: []sandbox.Bind{{Source: "/proc/self", Target: "/me"}}},
		{Binds: []sandbox.Bind{{Source: "/dev/shm", Target: "/shm", Writable: true}}},
		{Workspace: "/dev"},
		{Workspace: "/proc"},
		{Workspace: "/sys"},
	} {
		r := h.quick(20*time.Second, "POST", "/v1/sandboxes", tokenA, req)
		wantBadRequest(t, string(mustJSON(req)), r, "system tree")
	}
}

// TestCreateProjectPolicyFIFO: a FIFO as the workspace's policy file is
// refused at once (it used to block the create forever, holding a quota
// slot until creates got 429); the slot is free again afterwards.
func TestCreateProjectPolicyFIFO(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.AllowHostPaths = true; c.MaxPerTenant = 1 })
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, ".moat"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ws, ".moat", "policy.toml"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := h.quick(20*time.Second, "POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Workspace: ws})
		wantBadRequest(t, "fifo", r, "not a regular file")
	}
	if err := os.Remove(filepath.Join(ws, ".moat", "policy.toml")); err != nil {
		t.Fatal(err)
	}
	id := h.create(tokenA, api.CreateSandbox{Workspace: ws})
	h.do("DELETE", "/v1/sandboxes/"+id, tokenA, nil)
}

// TestCreateProjectPolicySymlink: a workspace's policy file that is a
// symlink (or under a symlinked .moat) to a root-only file elsewhere is
// refused without being read: the answer names the symlink and holds
// nothing of the target. Control: the target is readable by the daemon
// (root) and would give a parse error quoting its content.
func TestCreateProjectPolicySymlink(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.AllowHostPaths = true })
	secretDir := filepath.Join(t.TempDir(), "root-only")
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(secretDir, "policy.toml")
	if err := os.WriteFile(secret, []byte("SeCrEtKeY = \"hunter2\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Control: root reads the target, and read as a policy it is an error
	// that names its key.
	if data, err := os.ReadFile(secret); err != nil || !bytes.Contains(data, []byte("SeCrEtKeY")) {
		t.Fatalf("control read: %v", err)
	}
	ctrl := t.TempDir()
	writePolicy(t, filepath.Join(ctrl, ".moat", "policy.toml"), "SeCrEtKeY = \"hunter2\"\n")
	r := h.quick(20*time.Second, "POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Workspace: ctrl})
	wantBadRequest(t, "control", r, "unknown key")

	link := t.TempDir()
	if err := os.Mkdir(filepath.Join(link, ".moat"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(link, ".moat", "policy.toml")); err != nil {
		t.Fatal(err)
	}
	dirLink := t.TempDir()
	if err := os.Symlink(secretDir, filepath.Join(dirLink, ".moat")); err != nil {
		t.Fatal(err)
	}
	missing := t.TempDir()
	if err := os.Mkdir(filepath.Join(missing, ".moat"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(secretDir, "absent"), filepath.Join(missing, ".moat", "policy.toml")); err != nil {
		t.Fatal(err)
	}
	for _, ws := range []string{link, dirLink, missing} {
		r := h.quick(20*time.Second, "POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Workspace: ws})
		wantBadRequest(t, ws, r, "symlink")
		if bytes.Contains(r.body, []byte("SeCrEtKeY")) || bytes.Contains(r.body, []byte("hunter2")) || bytes.Contains(r.body, []byte("root-only")) {
			t.Fatalf("the answer reveals the target: %s", r.body)
		}
	}
}

// TestProcessTooLarge: argv and environment over the limit are refused
// with a 4xx JSON error by process.start as by process.exec (start used
// to answer 500).
func TestProcessTooLarge(t *testing.T) {
	h := newHarness(t, nil)
	id := h.create(tokenA, api.CreateSandbox{})
	// Control: argv within the limit but over the control socket's
	// default buffer (208 KiB; each argument under the kernel's 128 KiB
	// per string) runs, in the background as in the foreground (start
	// used to answer 500, exec exit 125: "message too long").
	word := strings.Repeat("w", 100<<10)
	args := []string{"sh", "-c", `echo "ok $#"`, "sh", word, word, word}
	r := h.quick(30*time.Second, "POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: args})
	var res sandbox.Result
	r.decode(t, &res)
	if r.status != 200 || res.Stdout != "ok 3\n" {
		t.Fatalf("exec of 300 KiB of argv: %d %.300s", r.status, r.body)
	}
	r = h.quick(30*time.Second, "POST", "/v1/sandboxes/"+id+"/processes", tokenA, api.Exec{Args: args})
	if r.status != http.StatusCreated {
		t.Fatalf("start of 300 KiB of argv: %d %.300s", r.status, r.body)
	}
	var pr api.Process
	r.decode(t, &pr)
	r = h.quick(30*time.Second, "GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/output?follow=true", id, pr.ID), tokenA, nil)
	if r.status != 200 || !bytes.Contains(r.body, []byte("ok 3")) {
		t.Fatalf("output of the started process: %d %.300s", r.status, r.body)
	}
	// "<" is one byte in the request body (sent unescaped) and six in the
	// runtime's message to the sandbox (Go's JSON escapes it): the body
	// is under its 1 MiB cap, argv+env are over.
	big := strings.Repeat("<", 200<<10)
	for _, c := range []struct {
		name string
		req  string
	}{
		{"args", `{"args":["true","` + big + `"]}`},
		{"env", `{"args":["true"],"env":["BIG=` + big + `"]}`},
		{"many args", `{"args":["true"` + strings.Repeat(`,"<<<<<"`, 120<<10) + `]}`},
	} {
		for _, op := range []string{"/processes", "/exec"} {
			r := h.quick(30*time.Second, "POST", "/v1/sandboxes/"+id+op, tokenA, []byte(c.req))
			if r.status < 400 || r.status >= 500 {
				t.Fatalf("%s %s: %d %s, want 4xx", c.name, op, r.status, r.body)
			}
			if e := r.apiErr(t); e.Code != api.CodeTooLarge || !strings.Contains(e.Message, "argv") {
				t.Fatalf("%s %s: %+v", c.name, op, e)
			}
		}
	}
	// Every refused call is in the audit, cut to fit (an event over the
	// audit's line limit used to be dropped).
	for _, kind := range []string{"process.start", "process.exec"} {
		refused := 0
		for _, ev := range h.auditEvents(tokenA, kind) {
			if strings.Contains(ev.Error, "argv") {
				refused++
			}
		}
		if refused != 3 {
			t.Fatalf("%d refused %s calls in the audit, want 3", refused, kind)
		}
	}
}
