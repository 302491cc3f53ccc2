package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/templates"
)

func withLayers(t *testing.T) func(*Config) {
	return func(c *Config) {
		st, err := templates.Open(filepath.Join(t.TempDir(), "store"))
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
		Policy:  &api.CallRules{Deny: []string{"Exec(cat *)"}},
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

// storeDu is what the tree at root allocates on disk, as du counts it:
// st_blocks × 512 of every entry, a file with several links once.
func storeDu(t *testing.T, root string) int64 {
	t.Helper()
	var total int64
	seen := map[uint64]bool{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !seen[st.Ino] {
			seen[st.Ino] = true
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// sparseScript makes /workspace/sparse: 1 GiB of holes with "head" at
// its start, "mid" at 512 MiB and "tail" at its end.
const sparseScript = `set -e
truncate -s 1G /workspace/sparse
printf head | dd of=/workspace/sparse conv=notrunc status=none
printf mid | dd of=/workspace/sparse bs=1 seek=536870912 conv=notrunc status=none
printf tail | dd of=/workspace/sparse bs=1 seek=1073741820 conv=notrunc status=none`

// sparseCheck prints the file's apparent size, its content at the three
// places and its allocated KiB.
const sparseCheck = `stat -c %s /workspace/sparse
head -c 4 /workspace/sparse; echo
dd if=/workspace/sparse bs=1 skip=536870912 count=3 status=none; echo
tail -c 4 /workspace/sparse; echo
du -k /workspace/sparse | cut -f1`

// TestSnapshotSparse: a sandbox with a 64 MiB disk makes a 1 GiB sparse
// file; its snapshot costs the store a few blocks, not 1 GiB, and a
// restore and a fork of it see the same file, still sparse (a write to it
// copies it up into the 64 MiB upper layer, which only fits with its holes
// kept).
func TestSnapshotSparse(t *testing.T) {
	h := newHarness(t, withLayers(t))
	storeDir := h.svc.cfg.Layers.Dir()
	id := h.create(tokenA, api.CreateSandbox{Limits: sandbox.Limits{DiskBytes: 64 << 20}})
	// Control: the disk limit is real, 100 MiB of data do not fit.
	if res := h.run(tokenA, id, "head -c 100M /dev/zero > /workspace/dense; s=$?; rm -f /workspace/dense; exit $s"); res.ExitCode == 0 {
		t.Fatal("control: 100 MiB fit in a 64 MiB disk")
	}
	if res := h.run(tokenA, id, sparseScript); res.ExitCode != 0 {
		t.Fatalf("making the sparse file: %+v", res)
	}
	// check reads the file in sb; it must allocate at most maxKiB.
	check := func(who, sb string, maxKiB int64) int64 {
		t.Helper()
		res := h.run(tokenA, sb, sparseCheck)
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if res.ExitCode != 0 || len(lines) != 5 || lines[0] != "1073741824" || lines[1] != "head" || lines[2] != "mid" || lines[3] != "tail" {
			t.Fatalf("%s: the sparse file: %+v %q", who, res, res.Stdout)
		}
		kib, err := strconv.ParseInt(lines[4], 10, 64)
		if err != nil || kib > maxKiB {
			t.Fatalf("%s: the 1 GiB file allocates %s KiB", who, lines[4])
		}
		return kib
	}
	check("control, in the sandbox", id, 1024)

	before := storeDu(t, storeDir)
	r := h.do("POST", "/v1/sandboxes/"+id+"/snapshots", tokenA, api.CreateSnapshot{})
	if r.status != http.StatusOK {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	var sn api.Snapshot
	r.decode(t, &sn)
	after := storeDu(t, storeDir)
	// A copy that filled the holes would cost the store the whole
	// apparent size: 1073741824 bytes for this one file.
	t.Logf("store: %d bytes before the snapshot, %d after (+%d) for a file of %d apparent bytes; snapshot bytes %d",
		before, after, after-before, 1<<30, sn.Bytes)
	if after-before > 8<<20 {
		t.Fatalf("the snapshot of a 1 GiB sparse file cost the store %d bytes", after-before)
	}
	// What the snapshot says it costs is what it cost (the layer; the
	// metadata file is not counted), and the list's usage says the same.
	if sn.Bytes < 1<<30 || sn.DiskBytes <= 0 || sn.DiskBytes > after-before {
		t.Fatalf("snapshot bytes %d, disk_bytes %d; the store grew by %d", sn.Bytes, sn.DiskBytes, after-before)
	}
	var list api.SnapshotList
	h.do("GET", "/v1/snapshots", tokenA, nil).decode(t, &list)
	if list.StoreBytes != sn.DiskBytes || list.StoreQuota != DefaultSnapshotQuota {
		t.Fatalf("list: store_bytes %d, store_quota %d; snapshot disk_bytes %d", list.StoreBytes, list.StoreQuota, sn.DiskBytes)
	}

	// Restore: the same file, still a few blocks; writing into it copies
	// it up into the sandbox's 64 MiB upper layer, holes kept.
	h.run(tokenA, id, "rm /workspace/sparse")
	if r := h.do("POST", "/v1/sandboxes/"+id+"/restore", tokenA, api.RestoreSandbox{Snapshot: sn.ID}); r.status != http.StatusOK {
		t.Fatalf("restore: %d %s", r.status, r.body)
	}
	check("after restore", id, 1024)
	if res := h.run(tokenA, id, "printf X | dd of=/workspace/sparse bs=1 seek=4096 conv=notrunc status=none"); res.ExitCode != 0 {
		t.Fatalf("write into the restored file (copy-up): %+v", res)
	}
	// overlayfs copies up in 1 MiB chunks and skips the holes among them.
	check("after copy-up", id, 8<<10)

	// Fork: the same again, and the store did not grow.
	r = h.do("POST", "/v1/snapshots/"+sn.ID+"/fork", tokenA, api.ForkSnapshot{Count: 1})
	if r.status != http.StatusOK {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	var forks api.SandboxList
	r.decode(t, &forks)
	check("fork", forks.Sandboxes[0].ID, 1024)
	if now := storeDu(t, storeDir); now-after > 1<<20 {
		t.Fatalf("restore and fork grew the store by %d bytes", now-after)
	}
}

// storeEntries lists what the store holds: its layers, snapshot metadata
// and work directories.
func storeEntries(t *testing.T, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, sub := range []string{"layers", "snapshots", "tmp"} {
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		out[sub] = []string{}
		for _, e := range ents {
			out[sub] = append(out[sub], e.Name())
		}
	}
	return out
}

// TestSnapshotQuota: a tenant's snapshots together may cost at most its
// store quota. A snapshot that would pass it is 507 insufficient_storage
// naming the quota, the sandbox keeps running and the store is left as it
// was; another tenant is unaffected; a removal frees the quota; and sparse
// files count by what they allocate, not by their apparent size.
func TestSnapshotQuota(t *testing.T) {
	const quota = 8 << 20
	h := newHarness(t, func(c *Config) { withLayers(t)(c); c.SnapshotQuota = quota })
	dir := h.svc.cfg.Layers.Dir()
	snapshot := func(token, id string) (reply, api.Snapshot) {
		t.Helper()
		r := h.do("POST", "/v1/sandboxes/"+id+"/snapshots", token, api.CreateSnapshot{})
		var sn api.Snapshot
		if r.status == http.StatusOK {
			r.decode(t, &sn)
		}
		return r, sn
	}
	usage := func(token string) api.SnapshotList {
		t.Helper()
		var l api.SnapshotList
		h.do("GET", "/v1/snapshots", token, nil).decode(t, &l)
		return l
	}

	// 3 MiB of data and 1 GiB of holes: about 3 MiB of the 8 MiB quota.
	one := h.create(tokenA, api.CreateSandbox{})
	h.run(tokenA, one, "head -c 3M /dev/urandom > /workspace/a && truncate -s 1G /workspace/holes")
	r, first := snapshot(tokenA, one)
	if r.status != http.StatusOK {
		t.Fatalf("first snapshot, under the quota: %d %s", r.status, r.body)
	}
	if first.DiskBytes < 3<<20 || first.DiskBytes > 4<<20 || first.Bytes < 1<<30 {
		t.Fatalf("first snapshot: disk_bytes %d, bytes %d", first.DiskBytes, first.Bytes)
	}
	if l := usage(tokenA); l.StoreBytes != first.DiskBytes || l.StoreQuota != quota {
		t.Fatalf("usage: %+v", l)
	}

	// 6 MiB more would pass it: refused, nothing kept, still running.
	two := h.create(tokenA, api.CreateSandbox{})
	h.run(tokenA, two, "head -c 6M /dev/urandom > /workspace/b")
	before := storeEntries(t, dir)
	r, _ = snapshot(tokenA, two)
	var e api.Error
	if r.status != http.StatusInsufficientStorage || json.Unmarshal(r.body, &e) != nil || e.Code != api.CodeStorage ||
		!strings.Contains(e.Message, "snapshot store quota") {
		t.Fatalf("snapshot over the quota: %d %s", r.status, r.body)
	}
	t.Logf("over the quota: %d %s", r.status, r.body)
	if after := storeEntries(t, dir); !reflect.DeepEqual(after, before) {
		t.Fatalf("a refused snapshot changed the store: %v, was %v", after, before)
	}
	if res := h.run(tokenA, two, "wc -c < /workspace/b"); strings.TrimSpace(string(res.Stdout)) != "6291456" {
		t.Fatalf("after the refusal: %q", res.Stdout)
	}
	if l := usage(tokenA); l.StoreBytes != first.DiskBytes || len(l.Snapshots) != 1 {
		t.Fatalf("usage after the refusal: %+v", l)
	}

	// Another tenant has a quota of its own.
	other := h.create(tokenB, api.CreateSandbox{})
	h.run(tokenB, other, "head -c 6M /dev/urandom > /workspace/b")
	if r, _ := snapshot(tokenB, other); r.status != http.StatusOK {
		t.Fatalf("tenant b: %d %s", r.status, r.body)
	}

	// Removing the first snapshot frees its share: the second now fits.
	if r := h.do("DELETE", "/v1/snapshots/"+first.ID, tokenA, nil); r.status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if l := usage(tokenA); l.StoreBytes != 0 {
		t.Fatalf("usage after the removal: %+v", l)
	}
	r, second := snapshot(tokenA, two)
	if r.status != http.StatusOK {
		t.Fatalf("snapshot after the removal: %d %s", r.status, r.body)
	}
	if l := usage(tokenA); l.StoreBytes != second.DiskBytes || second.DiskBytes < 6<<20 {
		t.Fatalf("usage: %+v, snapshot %+v", l, second)
	}
	// And 3 MiB more pass it again (refused while copying).
	h.run(tokenA, two, "head -c 3M /dev/urandom > /workspace/c")
	if r, _ := snapshot(tokenA, two); r.status != http.StatusInsufficientStorage {
		t.Fatalf("second over the quota: %d %s", r.status, r.body)
	}
	if ents := storeEntries(t, dir); len(ents["tmp"]) != 0 {
		t.Fatalf("work directories left: %v", ents["tmp"])
	}
}
