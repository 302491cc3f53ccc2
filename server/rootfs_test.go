package server

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/rootfs"
	"github.com/moat-sandbox/moat/sandbox"
)

func withLayers(t *testing.T) func(*Config) {
	return func(c *Config) {
		st, err := rootfs.Open(filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		c.Layers = st
	}
}

// run execs a shell script in sandbox id and returns its result.
func (h *harness) run(token, id, script string) sandbox.Result {
	h.t.Helper()
	r := h.do("POST", "/v1/sandboxes/"+id+"/exec", token, api.Exec{Args: []string{"/bin/sh", "-c", script}})
	if r.status != http.StatusOK {
		h.t.Fatalf("exec %q: %d %s", script, r.status, r.body)
	}
	var res sandbox.Result
	r.decode(h.t, &res)
	return res
}

func TestSnapshotRestoreFork(t *testing.T) {
	h := newHarness(t, withLayers(t))
	id := h.create(tokenA, api.CreateSandbox{})
	h.run(tokenA, id, "echo v1 > /workspace/f && mkdir /workspace/d && echo x > /workspace/d/x")
	r := h.do("POST", "/v1/sandboxes/"+id+"/snapshots", tokenA, api.CreateSnapshot{})
	if r.status != http.StatusOK {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	var sn api.Snapshot
	r.decode(t, &sn)
	if sn.Template != "host" || sn.Entries == 0 || !strings.HasPrefix(sn.Processes, "not captured") {
		t.Fatalf("snapshot: %+v", sn)
	}
	h.run(tokenA, id, "echo v2 > /workspace/f && rm -r /workspace/d && echo new > /workspace/n")

	// Another tenant sees nothing of it.
	for _, c := range []struct{ method, path string }{{"GET", "/v1/snapshots/" + sn.ID}, {"DELETE", "/v1/snapshots/" + sn.ID}, {"POST", "/v1/snapshots/" + sn.ID + "/fork"}} {
		var body any
		if c.method == "POST" {
			body = api.ForkSnapshot{}
		}
		if r := h.do(c.method, c.path, tokenB, body); r.status != http.StatusNotFound {
			t.Errorf("tenant b %s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	var list api.SnapshotList
	h.do("GET", "/v1/snapshots", tokenB, nil).decode(t, &list)
	if len(list.Snapshots) != 0 {
		t.Fatalf("tenant b lists %v", list.Snapshots)
	}
	if r := h.do("POST", "/v1/sandboxes", tokenB, api.CreateSandbox{Snapshot: sn.ID}); r.status != http.StatusNotFound {
		t.Fatalf("tenant b creates from a's snapshot: %d %s", r.status, r.body)
	}

	// Restore: the same sandbox, the snapshot's files, its processes gone.
	bg := h.do("POST", "/v1/sandboxes/"+id+"/processes", tokenA, api.Exec{Args: []string{"sleep", "600"}})
	if bg.status != http.StatusCreated {
		t.Fatalf("start: %d %s", bg.status, bg.body)
	}
	r = h.do("POST", "/v1/sandboxes/"+id+"/restore", tokenA, api.RestoreSandbox{Snapshot: sn.ID})
	if r.status != http.StatusOK {
		t.Fatalf("restore: %d %s", r.status, r.body)
	}
	var info api.Sandbox
	r.decode(t, &info)
	if info.ID != id || info.Snapshot != sn.ID || info.Running != 0 {
		t.Fatalf("restored: %+v", info)
	}
	if got := string(h.run(tokenA, id, "cat /workspace/f /workspace/d/x; ls /workspace").Stdout); got != "v1\nx\nd\nf\n" {
		t.Fatalf("after restore: %q", got)
	}

	// Fork two: independent of each other and of the parent.
	r = h.do("POST", "/v1/snapshots/"+sn.ID+"/fork", tokenA, api.ForkSnapshot{Count: 2})
	if r.status != http.StatusOK {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	var forks api.SandboxList
	r.decode(t, &forks)
	if len(forks.Sandboxes) != 2 || forks.Sandboxes[0].Snapshot != sn.ID {
		t.Fatalf("forks: %+v", forks)
	}
	a, b := forks.Sandboxes[0].ID, forks.Sandboxes[1].ID
	h.run(tokenA, a, "echo a > /workspace/f")
	if got := string(h.run(tokenA, b, "cat /workspace/f").Stdout); got != "v1\n" {
		t.Fatalf("fork b sees %q", got)
	}
	if got := string(h.run(tokenA, id, "cat /workspace/f").Stdout); got != "v1\n" {
		t.Fatalf("parent sees %q", got)
	}
	// In use: 409; the forks' own snapshots layer on it.
	if r := h.do("DELETE", "/v1/snapshots/"+sn.ID, tokenA, nil); r.status != http.StatusConflict {
		t.Fatalf("delete in use: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/v1/snapshots/"+sn.ID+"/fork", tokenA, api.ForkSnapshot{Count: MaxFork + 1}); r.status != http.StatusBadRequest {
		t.Fatalf("fork too many: %d %s", r.status, r.body)
	}
	r = h.do("POST", "/v1/sandboxes/"+a+"/snapshots", tokenA, api.CreateSnapshot{})
	var child api.Snapshot
	r.decode(t, &child)
	if child.Parent != sn.ID || child.Depth != 2 {
		t.Fatalf("snapshot of a fork: %+v", child)
	}
}

// TestPoolClaimEnforcesClaimerPolicy: a sandbox handed out from a warm pool
// carries the claimer's policy, limits and network, not the pool's
// defaults: each check below would pass the other way round if the pool's
// default leaked (no exec rule, no memory limit, no network).
func TestPoolClaimEnforcesClaimerPolicy(t *testing.T) {
	filled := make(chan string, 16)
	h := newHarness(t, func(c *Config) {
		withLayers(t)(c)
		c.Pools = []PoolConfig{{Template: "host", Size: 1}}
		c.OnPoolReady = func(tm string) { filled <- tm }
	})
	waitFill := func() {
		t.Helper()
		select {
		case <-filled:
		case <-time.After(30 * time.Second):
			t.Fatal("the pool did not fill")
		}
	}
	waitFill()
	r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{
		Policy:  &policy.CallRules{Deny: []string{"Exec(cat *)"}},
		Limits:  sandbox.Limits{MemoryBytes: 64 << 20},
		Network: &api.Network{Mode: "proxy", AllowDomains: []string{"allowed.test"}},
	})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var info api.Sandbox
	r.decode(t, &info)
	if !info.Pooled {
		t.Fatalf("not handed out from the pool: %+v", info)
	}
	if info.Enforcement.Limits.MemoryBytes != 64<<20 {
		t.Errorf("limits: %+v", info.Enforcement.Limits)
	}
	// The caller's exec rule.
	if r := h.do("POST", "/v1/sandboxes/"+info.ID+"/exec", tokenA, api.Exec{Args: []string{"cat", "/etc/hostname"}}); r.status != http.StatusForbidden {
		t.Errorf("cat under the caller's deny rule: %d %s", r.status, r.body)
	}
	// The caller's memory limit.
	res := h.run(tokenA, info.ID, "python3 -c 'b = bytearray(200 << 20); print(len(b))'")
	if strings.Contains(string(res.Stdout), "209715200") || res.ExitCode == 0 {
		t.Errorf("200 MiB allocated under a 64 MiB limit: exit %d %s", res.ExitCode, res.Stdout)
	}
	// The caller's network: the proxy is there, and decides with the
	// caller's allowlist.
	curl := func(url string) string {
		return string(h.run(tokenA, info.ID, "curl -s -o /dev/null -w '%{http_code} %header{x-proxy-error}' "+url).Stdout)
	}
	if got := curl("http://denied.test/"); got != "403 denied" {
		t.Errorf("proxy answers %q for a name outside the caller's allowlist", got)
	}
	if got := curl("http://allowed.test/"); strings.Contains(got, "denied") || strings.HasPrefix(got, "000") {
		t.Errorf("proxy answers %q for a name on the caller's allowlist", got)
	}
	// Control: a pooled sandbox claimed with the pool's defaults (no
	// rules, limits or network of the caller's) does all three.
	waitFill()
	r = h.do("POST", "/v1/sandboxes", tokenB, api.CreateSandbox{})
	var plain api.Sandbox
	r.decode(t, &plain)
	if r.status != http.StatusCreated || !plain.Pooled {
		t.Fatalf("control create: %d pooled=%v", r.status, plain.Pooled)
	}
	if res := h.run(tokenB, plain.ID, "cat /etc/hostname"); res.ExitCode != 0 {
		t.Errorf("control: cat exit %d", res.ExitCode)
	}
	if res := h.run(tokenB, plain.ID, "python3 -c 'b = bytearray(200 << 20); print(len(b))'"); !strings.Contains(string(res.Stdout), "209715200") {
		t.Errorf("control: 200 MiB not allocated without a limit: exit %d %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if got := string(h.run(tokenB, plain.ID, "curl -s -o /dev/null -w '%{http_code}' http://denied.test/").Stdout); got != "000" {
		t.Errorf("control: without the proxy curl got %q, want no connection (000)", got)
	}
	// The pool refills; a create the pool cannot serve (a hostname) is a
	// cold create.
	waitFill()
	r = h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Hostname: "other"})
	info = api.Sandbox{}
	r.decode(t, &info)
	if r.status != http.StatusCreated || info.Pooled {
		t.Fatalf("hostname create: %d pooled=%v", r.status, info.Pooled)
	}
	var m strings.Builder
	h.svc.metrics.reg.WritePrometheus(&m)
	if !strings.Contains(m.String(), `moat_pool_ready{template="host",profile=""} 1`) || !strings.Contains(m.String(), `moat_pool_events_total{template="host",event="hit"} 2`) {
		t.Errorf("metrics:\n%s", m.String())
	}
}
