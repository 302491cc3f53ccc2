package server

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// writePolicy replaces a policy file (a new inode: the watcher sees the
// change whatever the clock's resolution).
func writePolicy(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := p + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// wantDenied checks that r is a 403 policy_denied naming rule (and a
// source containing source) and returns the error.
func wantDenied(t *testing.T, r reply, rule, source string) api.Error {
	t.Helper()
	if r.status != http.StatusForbidden {
		t.Fatalf("status %d, want 403: %s", r.status, r.body)
	}
	e := r.apiErr(t)
	if e.Code != api.CodePolicyDenied || !strings.Contains(e.Rule, rule) || !strings.Contains(e.Source, source) || !strings.Contains(e.Message, "denied: ") {
		t.Fatalf("want policy_denied by %q (%q): %s", rule, source, r.body)
	}
	return e
}

// auditEvents returns the tenant's events of kind (a prefix).
func (h *harness) auditEvents(token, kind string) []api.AuditEvent {
	h.t.Helper()
	r := h.do("GET", "/v1/audit?limit=1000&kind="+kind, token, nil)
	var p api.AuditPage
	r.decode(h.t, &p)
	return p.Events
}

// TestPolicyDeny: a deny rule of the user's file refuses exec and start
// with a reason the agent can read, naming the rule and its line; nothing
// runs; the audit event of the call carries the rule.
func TestPolicyDeny(t *testing.T) {
	h := newFakeHarness(t, nil)
	writePolicy(t, h.user, "version = 1\ndeny = [\"Exec(touch *)\"]\n")
	id := h.create(tokenA, api.CreateSandbox{})
	base := "/v1/sandboxes/" + id

	e := wantDenied(t, h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"touch", "/workspace/marker"}}),
		"deny Exec(touch *)", "user ~/.config/moat/policy.toml:2")
	if !strings.Contains(e.Message, "denied: Exec `touch /workspace/marker` matches deny Exec(touch *)") {
		t.Fatalf("reason: %q", e.Message)
	}
	// Wrapped in a shell, streamed, or in the background: still refused.
	wantDenied(t, h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"sh", "-c", "echo x && touch /workspace/marker"}, Stream: true}), "deny Exec(touch *)", "user")
	wantDenied(t, h.do("POST", base+"/processes", tokenA, api.Exec{Args: []string{"env", "touch", "/workspace/marker"}}), "deny Exec(touch *)", "user")
	if r := h.do("GET", base+"/files/stat?path=/workspace/marker", tokenA, nil); r.status != http.StatusNotFound {
		t.Fatalf("the marker exists: %d %s", r.status, r.body)
	}
	// Other commands run.
	var res sandbox.Result
	r := h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"echo", "ok"}})
	r.decode(t, &res)
	if r.status != 200 || res.Stdout != "ok\n" {
		t.Fatalf("echo: %d %s", r.status, r.body)
	}

	// Per-call rules narrow; their allow rules grant nothing.
	wantDenied(t, h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"echo", "ok"}, Policy: &api.CallRules{Deny: []string{"Exec(echo *)"}}}),
		"deny Exec(echo *)", "per-call exec deny[0]")
	wantDenied(t, h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"touch", "/workspace/marker"}, Policy: &api.CallRules{Allow: []string{"Exec(touch *)"}}}),
		"deny Exec(touch *)", "user")
	for _, bad := range []*api.CallRules{{Deny: []string{"Exec("}}, {Profile: string(policy.Trusted)}} {
		if r := h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"true"}, Policy: bad}); r.status != http.StatusBadRequest {
			t.Fatalf("bad per-call rules %+v: %d %s", bad, r.status, r.body)
		}
	}
	// Per-sandbox rules apply to every call of the sandbox.
	id2 := h.create(tokenA, api.CreateSandbox{Policy: &api.CallRules{Deny: []string{"Exec(cat *)"}}})
	wantDenied(t, h.do("POST", "/v1/sandboxes/"+id2+"/exec", tokenA, api.Exec{Args: []string{"cat", "/etc/hostname"}}), "deny Exec(cat *)", "per-call sandbox deny[0]")
	if r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Policy: &api.CallRules{Ask: []string{"Nope(x)"}}}); r.status != http.StatusBadRequest {
		t.Fatalf("bad sandbox rules: %d %s", r.status, r.body)
	}

	// The audit: the refused exec with its decision and rule.
	var found bool
	for _, ev := range h.auditEvents(tokenA, "process.exec") {
		if ev.Decision == audit.DecisionDeny && strings.Contains(ev.Rule, "deny Exec(touch *) (user ~/.config/moat/policy.toml:2)") {
			var res struct {
				Policy []verdict `json:"policy"`
			}
			if err := json.Unmarshal(ev.Result, &res); err != nil || len(res.Policy) != 1 || res.Policy[0].Decided != "deny" || res.Policy[0].Reason == "" {
				t.Fatalf("audit result: %s", ev.Result)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("no audit event of the refused exec with its rule")
	}
	m := h.do("GET", "/metrics", "", nil)
	for _, want := range []string{`moat_policy_decisions_total{effect="deny"}`, `moat_policy_decisions_total{effect="allow"}`, "moat_approvals_pending 0"} {
		if !bytes.Contains(m.body, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestPolicyFiles: file operations on host paths are judged (credentials
// in the workspace are refused, protected paths are read-only), while
// the sandbox's own storage (/tmp) needs no decision.
func TestPolicyFiles(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.AllowHostPaths = true })
	ws := t.TempDir()
	for name, content := range map[string]string{"id_rsa": "PRIVATE KEY", ".env": "TOKEN=x", "ok.txt": "fine", ".git/config": "[core]\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Workspace: ws})
	var sb api.Sandbox
	r.decode(t, &sb)
	if r.status != http.StatusCreated || sb.Policy == nil || sb.Policy.Profile != "untrusted" || sb.Policy.Restrictions == 0 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	base := "/v1/sandboxes/" + sb.ID

	wantDenied(t, h.do("GET", base+"/files?path=/workspace/id_rsa", tokenA, nil), "builtin: credential", "builtin")
	wantDenied(t, h.do("GET", base+"/files?path=.env", tokenA, nil), "builtin: credential", "builtin")
	wantDenied(t, h.do("GET", base+"/archive?path=/workspace/id_rsa", tokenA, nil), "builtin: credential", "builtin")
	wantDenied(t, h.do("PUT", base+"/files?path=/workspace/.git/config", tokenA, []byte("[core]\nhooksPath=/tmp\n")), "read-only", "builtin")
	wantDenied(t, h.do("POST", base+"/files/move", tokenA, api.Move{From: "/workspace/ok.txt", To: "/workspace/.bashrc"}), "read-only", "builtin")
	if r := h.do("GET", base+"/files?path=/workspace/ok.txt", tokenA, nil); r.status != 200 || string(r.body) != "fine" {
		t.Fatalf("read ok.txt: %d %s", r.status, r.body)
	}
	if r := h.do("GET", base+"/files/list?path=/workspace", tokenA, nil); r.status != 200 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	// The sandbox's own /tmp holds nothing of the host: no decision.
	if r := h.do("PUT", base+"/files?path=/tmp/id_rsa", tokenA, []byte("scratch")); r.status != 200 {
		t.Fatalf("write /tmp: %d %s", r.status, r.body)
	}
	if r := h.do("GET", base+"/files?path=/tmp/id_rsa", tokenA, nil); r.status != 200 || string(r.body) != "scratch" {
		t.Fatalf("read /tmp: %d %s", r.status, r.body)
	}
	// An upload is judged entry by entry.
	tarOf := func(names ...string) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, n := range names {
			_ = tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
			_, _ = tw.Write([]byte("x\n"))
		}
		_ = tw.Close()
		return b.Bytes()
	}
	if r := h.do("PUT", base+"/archive?path=/workspace", tokenA, tarOf("up/a.txt", "up/b.txt")); r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	wantDenied(t, h.do("PUT", base+"/archive?path=/workspace", tokenA, tarOf("up/c.txt", ".git/hooks/pre-commit")), "read-only", "builtin")
	if _, err := os.Stat(filepath.Join(ws, ".git", "hooks", "pre-commit")); err == nil {
		t.Fatal("the refused hook was written")
	}
	if r := h.do("PUT", base+"/archive?path=/workspace", tokenA, []byte("not a tar")); r.status != http.StatusBadRequest || r.apiErr(t).Errno != "EBADTAR" {
		t.Fatalf("bad tar: %d %s", r.status, r.body)
	}
	// The audit keeps the rule of a refused file operation.
	var found bool
	for _, ev := range h.auditEvents(tokenA, "file.read") {
		found = found || ev.Decision == audit.DecisionDeny && strings.HasPrefix(ev.Rule, "builtin: credential")
	}
	if !found {
		t.Fatal("no audit event of the refused read with its rule")
	}
}

// TestPolicyHotReload: a change of the user's file applies to the next
// decision of a running sandbox; an invalid edit keeps the last good
// policy.
func TestPolicyHotReload(t *testing.T) {
	h := newFakeHarness(t, nil)
	id := h.create(tokenA, api.CreateSandbox{})
	exec := func() reply {
		return h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"echo", "hi"}})
	}
	if r := exec(); r.status != 200 {
		t.Fatalf("before: %d %s", r.status, r.body)
	}
	writePolicy(t, h.user, "version = 1\n\ndeny = [\"Exec(echo *)\"]\n")
	wantDenied(t, exec(), "deny Exec(echo *)", "user ~/.config/moat/policy.toml:3")
	writePolicy(t, h.user, "version = 1\ndeny = [\"Exec(echo *\"]\n")
	wantDenied(t, exec(), "deny Exec(echo *)", "user ~/.config/moat/policy.toml:3")
	if r := exec(); r.status != http.StatusForbidden {
		t.Fatalf("still invalid: %d %s", r.status, r.body)
	}
	writePolicy(t, h.user, "version = 1\n")
	if r := exec(); r.status != 200 {
		t.Fatalf("after: %d %s", r.status, r.body)
	}
}

// TestPolicyCreate: an invalid policy file fails the create (400 for the
// workspace's own file, 500 for the daemon's), never "no policy"; a bind
// the policy denies is 403 policy_denied.
func TestPolicyCreate(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.AllowHostPaths = true })
	ws := t.TempDir()
	writePolicy(t, filepath.Join(ws, ".moat", "policy.toml"), "version = 1\nask = [\"Exec(\"]\n")
	r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Workspace: ws})
	if r.status != http.StatusBadRequest || !strings.Contains(r.apiErr(t).Message, ".moat/policy.toml:2") {
		t.Fatalf("invalid project file: %d %s", r.status, r.body)
	}
	writePolicy(t, h.managed, "version = 1\nbogus = 1\n")
	r = h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{})
	if r.status != http.StatusInternalServerError || !strings.Contains(r.apiErr(t).Message, "policy") {
		t.Fatalf("invalid managed file: %d %s", r.status, r.body)
	}
	writePolicy(t, h.managed, "version = 1\n")
	ssh := filepath.Join(h.home, ".ssh")
	if err := os.MkdirAll(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Binds: []sandbox.Bind{{Source: ssh}}}), "credential", "builtin")
	if r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Workspace: "relative/dir"}); r.status != http.StatusBadRequest {
		t.Fatalf("relative workspace: %d %s", r.status, r.body)
	}
	if r := h.do("GET", "/v1/sandboxes?state=running", tokenA, nil); !bytes.Contains(r.body, []byte(`"sandboxes":[]`)) {
		t.Fatalf("a refused create left a sandbox: %s", r.body)
	}
}

// TestHidePaths: the daemon's own directories (Config.HidePaths) are hidden
// from every sandbox, even inside a workspace the policy lets it read; the
// sibling control is readable.
func TestHidePaths(t *testing.T) {
	ws := t.TempDir()
	data := filepath.Join(ws, "daemon-data")
	writePolicy(t, filepath.Join(data, "tokens"), "default secret-token\n")
	writePolicy(t, filepath.Join(ws, "notes.txt"), "notes\n")
	h := newHarness(t, func(c *Config) { c.AllowHostPaths = true; c.HidePaths = []string{data} })
	id := h.create(tokenA, api.CreateSandbox{Workspace: ws})
	r := h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"sh", "-c", "cat /workspace/notes.txt; cat /workspace/daemon-data/tokens || echo hidden"}})
	var res sandbox.Result
	r.decode(t, &res)
	if res.Stdout != "notes\nhidden\n" || strings.Contains(res.Stdout, "secret-token") {
		t.Fatalf("exec: %q %q", res.Stdout, res.Stderr)
	}
}
