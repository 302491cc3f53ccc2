package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/runtime/linux"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/sandbox/sandboxtest"
	"github.com/moat-sandbox/moat/store"
)

func TestMain(m *testing.M) {
	linux.RunHelper()
	os.Exit(m.Run())
}

// Tokens of the test tenants.
const (
	tokenA = "moat_test_token_of_tenant_a_0123456789abcdef"
	tokenB = "moat_test_token_of_tenant_b_0123456789abcdef"
	// approverA and approverB answer the approvals of their tenants.
	approverA = "moat_test_approver_of_tenant_a_0123456789abcdef"
	approverB = "moat_test_approver_of_tenant_b_0123456789abcdef"
)

// harness is a Service behind an httptest server, with tenants "a" and
// "b": with the real Linux runtime (newHarness: root, integration tests
// of what the kernel enforces) or with the fake in-memory runtime of
// package sandboxtest (newFakeHarness: no root, the control plane's logic
// only; its sandboxes isolate nothing).
type harness struct {
	t     *testing.T
	svc   *Service
	st    *store.Store
	tape  *audit.Tape
	srv   *httptest.Server
	dir   string
	ended chan [2]string // (id, reason) of every sandbox that ended
	// home and the policy files of the managed and user layers (absent
	// until a test writes them).
	home, managed, user string
}

// newHarness starts a service with the real Linux runtime (it needs
// root); mod may change its config. It is closed when the test ends.
func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	return newTestService(t, false, mod)
}

// newFakeHarness starts a service with the fake runtime
// (sandbox/sandboxtest): for tests of the API, auth, tenancy, quotas,
// policy decisions, approvals, the store and the audit, which need
// neither root nor a kernel's enforcement.
func newFakeHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	return newTestService(t, true, mod)
}

// newTestService starts a service with the fake runtime or the real one.
func newTestService(t *testing.T, fake bool, mod func(*Config)) *harness {
	t.Helper()
	var rt sandbox.Runtime
	if fake {
		rt = sandboxtest.New()
	} else {
		testutil.RequireRoot(t)
		lrt, err := linux.New(linux.WithKillGrace(500 * time.Millisecond))
		if err != nil {
			testutil.SkipOrFail(t, err.Error())
		}
		rt = lrt
	}
	var err error
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	tape, err := audit.Open(filepath.Join(dir, "audit"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, st: st, tape: tape, dir: dir, ended: make(chan [2]string, 64),
		home: filepath.Join(dir, "home"), managed: filepath.Join(dir, "etc", "policy.toml")}
	h.user = filepath.Join(h.home, ".config", "moat", "policy.toml")
	if err := os.MkdirAll(filepath.Dir(h.user), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Runtime: rt, Store: st, Tape: tape, OnEnd: func(id, reason string) { h.ended <- [2]string{id, reason} },
		Home: h.home, PolicyManaged: h.managed, PolicyUser: h.user}
	if mod != nil {
		mod(&cfg)
	}
	if h.svc, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, TokensFile), []byte("a "+tokenA+"\nb "+tokenB+"\na "+approverA+" approver\nb "+approverB+" approver\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, _, err := LoadTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(h.svc.Handler(tokens))
	t.Cleanup(func() {
		h.srv.Close()
		if err := h.svc.Close(context.Background()); err != nil {
			t.Error(err)
		}
		tape.Close()
		st.Close()
	})
	return h
}

// reply is an HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %q: %v", r.body, err)
	}
}

// apiErr decodes the body as an API error.
func (r reply) apiErr(t *testing.T) api.Error {
	t.Helper()
	var e api.Error
	r.decode(t, &e)
	return e
}

// do sends a request with token (none if empty); a non-nil body that is
// not []byte is sent as JSON.
func (h *harness) do(method, path, token string, body any) reply {
	h.t.Helper()
	switch b := body.(type) {
	case nil:
		return h.send(method, path, token, "", nil)
	case []byte:
		return h.send(method, path, token, "application/octet-stream", b)
	case string:
		return h.send(method, path, token, "application/json", []byte(b))
	}
	j, err := json.Marshal(body)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.send(method, path, token, "application/json", j)
}

// send makes an HTTP request with an explicit media type.
func (h *harness) send(method, path, token, contentType string, body []byte) reply {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// create makes a sandbox for the tenant of token and returns its id.
func (h *harness) create(token string, req api.CreateSandbox) string {
	h.t.Helper()
	r := h.do("POST", "/v1/sandboxes", token, req)
	if r.status != http.StatusCreated {
		h.t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sb api.Sandbox
	r.decode(h.t, &sb)
	return sb.ID
}

// events splits an NDJSON body into events.
func events(t *testing.T, body []byte) []api.Event {
	t.Helper()
	var out []api.Event
	for _, line := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var ev api.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		out = append(out, ev)
	}
	return out
}

// waitEnd waits for the sandbox id to end and returns the reason.
func (h *harness) waitEnd(id string, within time.Duration) string {
	h.t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case e := <-h.ended:
			if e[0] == id {
				return e[1]
			}
		case <-timer.C:
			h.t.Fatalf("sandbox %s did not end within %v", id, within)
		}
	}
}

func jsonDecode(b []byte, v any) error { return json.Unmarshal(b, v) }
