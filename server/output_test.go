package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// Issue 17, item 1: an output_limit above the server's maximum is a clear
// 400 that names the maximum, for exec and start alike; at the maximum
// the call runs.
func TestOutputLimitMax(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.MaxOutputLimit = 1 << 20 })
	id := h.create(tokenA, api.CreateSandbox{})
	base := "/v1/sandboxes/" + id
	for _, path := range []string{base + "/exec", base + "/processes"} {
		r := h.do("POST", path, tokenA, api.Exec{Args: []string{"true"}, OutputLimit: 300 << 20})
		if e := r.apiErr(t); r.status != http.StatusBadRequest || e.Code != api.CodeInvalidArgument ||
			!strings.Contains(e.Message, "maximum of 1048576 bytes") {
			t.Fatalf("%s with output_limit 300 MiB: %d %s; want 400 naming the maximum", path, r.status, r.body)
		}
	}
	r := h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"head", "-c", "3000000", "/dev/zero"}, OutputLimit: 1 << 20})
	var res sandbox.Result
	r.decode(t, &res)
	if r.status != 200 || res.StdoutBytes != 3000000 || !res.Truncated || len(res.Stdout) > 1<<20+100 {
		t.Fatalf("exec at the maximum: %d bytes %d truncated %v len %d", r.status, res.StdoutBytes, res.Truncated, len(res.Stdout))
	}
}

// Issue 17, item 4: the store row of an exec holds counts and a preview,
// not the output; NUL bytes cost one byte; a larger capture is kept in a
// file that the sweeper removes after the retention.
func TestExecOutputLeavesStore(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) {
		c.OutputDir = filepath.Join(t.TempDir(), "output")
		c.TenantOutputDisk = 64 << 20
		c.OutputRetention = time.Hour
	})
	id := h.create(tokenA, api.CreateSandbox{})
	const calls, size = 5, 4_000_000 // 20 MB of NUL bytes in all
	for range calls {
		// The first half of the stream is NUL bytes, then a secret-free
		// text tail to see in the preview.
		r := h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{
			Args: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero; printf THE-END; echo err >&2", size-7)}, OutputLimit: size})
		var res sandbox.Result
		r.decode(t, &res)
		// Control: the flood happened and the client got all of it.
		if r.status != 200 || res.StdoutBytes != size || len(res.Stdout) != size || !strings.HasSuffix(res.Stdout, "THE-END") {
			t.Fatalf("exec: %d stdout_bytes %d len %d", r.status, res.StdoutBytes, len(res.Stdout))
		}
	}
	db := dbBytes(t, h.dir)
	t.Logf("moat.db and its WAL after %d calls of %d NUL bytes: %d bytes", calls, size, db)
	if db > 2<<20 {
		t.Fatalf("the database holds %d bytes after %d calls printing %d NUL bytes each", db, calls, size)
	}
	list, err := h.st.ListCalls(context.Background(), "a", id, 0)
	if err != nil || len(list) != calls {
		t.Fatalf("calls: %d %v", len(list), err)
	}
	c := list[0]
	o := c.Output
	if o.StdoutBytes != size || o.StderrBytes != 4 || string(o.StderrPreview) != "err\n" {
		t.Fatalf("row counts: %+v", o)
	}
	if len(o.StdoutPreview) > PreviewBytes+64 || !bytes.HasPrefix(o.StdoutPreview, make([]byte, PreviewBytes/2)) ||
		!bytes.HasSuffix(o.StdoutPreview, []byte("THE-END")) || !bytes.Contains(o.StdoutPreview, []byte("bytes not in the preview")) {
		t.Fatalf("preview (%d bytes): %q…", len(o.StdoutPreview), o.StdoutPreview[PreviewBytes/2-8:])
	}
	var row map[string]any
	if err := json.Unmarshal(c.Result, &row); err != nil || row["stdout"] != "" || row["stdout_bytes"] != float64(size) {
		t.Fatalf("result column: %.200s (%v)", c.Result, err)
	}
	if o.Ref == "" {
		t.Fatal("no reference to the kept output")
	}
	file := filepath.Join(h.svc.cfg.OutputDir, o.Ref+".stdout")
	if fi, err := os.Stat(file); err != nil || fi.Size() != size {
		t.Fatalf("kept output %s: %v", file, err)
	}
	if u := h.svc.out.DiskUsage("a"); u != calls*size {
		t.Fatalf("tenant disk usage %d, want %d", u, calls*size)
	}
	// The sweeper: nothing is removed before the retention, all after.
	now := time.Now()
	if n := h.svc.out.Sweep(now.Add(59 * time.Minute)); n != 0 {
		t.Fatalf("swept %d files before the retention", n)
	}
	if n := h.svc.out.Sweep(now.Add(61 * time.Minute)); n != calls {
		t.Fatalf("swept %d files after the retention, want %d", n, calls)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("kept output still there: %v", err)
	}
	if u := h.svc.out.DiskUsage("a"); u != 0 {
		t.Fatalf("tenant disk usage %d after the sweep", u)
	}
}

// dbBytes is the size of the database with its WAL.
func dbBytes(t *testing.T, dir string) int64 {
	var n int64
	for _, f := range []string{"moat.db", "moat.db-wal"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// Issue 17, item 1: past the tenant's memory budget an exec's capture
// stops growing and the rest of its stream spills to a file within the
// tenant's disk quota; its memory is given back when it ends.
func TestExecOutputSpill(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) {
		c.MaxOutputLimit = 8 << 20
		c.OutputMemory, c.TenantOutputMemory = 4<<20, 2<<20
		c.OutputDir = filepath.Join(t.TempDir(), "output")
		c.TenantOutputDisk = 12 << 20
		c.OutputRetention = time.Hour
	})
	id := h.create(tokenA, api.CreateSandbox{})
	const size = 20 << 20
	r := h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{
		Args: []string{"sh", "-c", fmt.Sprintf("yes spill | head -c %d", size)}, OutputLimit: 8 << 20})
	var res sandbox.Result
	r.decode(t, &res)
	if r.status != 200 || res.StdoutBytes != size || !res.Truncated {
		t.Fatalf("exec: %d %d %v", r.status, res.StdoutBytes, res.Truncated)
	}
	// The capture held at most the tenant's budget.
	if len(res.Stdout) > 2<<20+100 || !strings.Contains(res.Stdout, "bytes truncated ...]") {
		t.Fatalf("stdout of %d bytes, over the tenant budget", len(res.Stdout))
	}
	if p := h.svc.out.budget.Peak(); p > 2<<20 {
		t.Fatalf("peak held %d, over the tenant budget", p)
	}
	if n := h.svc.out.budget.Held(); n != 0 {
		t.Fatalf("%d bytes still held after the call", n)
	}
	// Control: the flood went to the spill file, up to the disk quota.
	list, _ := h.st.ListCalls(context.Background(), "a", id, 0)
	fi, err := os.Stat(filepath.Join(h.svc.cfg.OutputDir, list[0].Output.Ref+".stdout"))
	if err != nil || fi.Size() != 12<<20 {
		t.Fatalf("spill file: %v %v (want the 12 MiB quota filled)", fi.Size(), err)
	}
	if u := h.svc.out.DiskUsage("a"); u != 12<<20 {
		t.Fatalf("disk usage %d", u)
	}
	// The next call has no room on disk: it still runs, output cut.
	r = h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"sh", "-c", "yes | head -c 5000000"}, OutputLimit: 8 << 20})
	r.decode(t, &res)
	if r.status != 200 || res.StdoutBytes != 5000000 {
		t.Fatalf("exec past the disk quota: %d %s", r.status, r.body[:min(200, len(r.body))])
	}
}

// Issue 17, item 3: background processes of two tenants flooding output
// stay within the daemon's and each tenant's budget; what does not fit is
// dropped oldest first and a reader is told how many bytes it lost (what
// it reads plus what it lost is the whole output); ending the sandboxes
// gives every byte back.
func TestBackgroundOutputBudget(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) {
		c.OutputBuffer = 1 << 20
		c.OutputMemory, c.TenantOutputMemory = 6<<20, 4<<20
	})
	const procs, size = 8, 3 << 20 // per sandbox: 24 MiB of output, 32 MiB of logs allowed before
	type started struct {
		token, sb string
		id        uint64
	}
	var all []started
	var sbs []string
	for _, tok := range []string{tokenA, tokenB} {
		sb := h.create(tok, api.CreateSandbox{})
		sbs = append(sbs, sb)
		for range procs {
			r := h.do("POST", "/v1/sandboxes/"+sb+"/processes", tok, api.Exec{
				Args: []string{"sh", "-c", fmt.Sprintf("yes flood | head -c %d", size)}, OutputLimit: 4 << 20})
			var p api.Process
			r.decode(t, &p)
			if r.status != http.StatusCreated {
				t.Fatalf("start: %d %s", r.status, r.body)
			}
			all = append(all, started{tok, sb, p.ID})
		}
	}
	for _, p := range all {
		r := h.do("POST", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/wait", p.sb, p.id), p.token, map[string]any{})
		if r.status != 200 {
			t.Fatalf("wait: %d %s", r.status, r.body)
		}
	}
	b := h.svc.out.budget
	if peak := b.Peak(); peak > 6<<20 {
		t.Fatalf("peak held %d, over the daemon budget of %d", peak, 6<<20)
	}
	for _, ten := range []string{"a", "b"} {
		if n := b.TenantHeld(ten); n > 4<<20 {
			t.Fatalf("tenant %s holds %d, over its budget", ten, n)
		}
	}
	if b.Refused() == 0 {
		t.Fatal("the budget never refused: the flood did not reach it")
	}
	// Every reader gets what is kept, and a lost event for the rest.
	var lostAny bool
	for _, p := range all {
		r := h.do("GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/output", p.sb, p.id), p.token, nil)
		var got, lost int64
		for _, ev := range events(t, r.body) {
			switch ev.Type {
			case api.EventStdout:
				got += int64(len(ev.Output()))
			case api.EventLost:
				lost += ev.LostBytes
				lostAny = true
			}
		}
		if got+lost != size {
			t.Fatalf("process %d: read %d + lost %d != %d", p.id, got, lost, size)
		}
	}
	if !lostAny {
		t.Fatal("no lost event")
	}
	var wg sync.WaitGroup
	for i, sb := range sbs {
		tok := []string{tokenA, tokenB}[i]
		wg.Go(func() { h.do("DELETE", "/v1/sandboxes/"+sb, tok, nil) })
	}
	wg.Wait()
	if n := b.Held(); n != 0 {
		t.Fatalf("%d bytes held after the sandboxes ended", n)
	}
}

func TestPlainName(t *testing.T) {
	long := strings.Repeat("a", 64)
	for s, want := range map[string]bool{
		"a": true, "tenant-1": true, "A.b_c-d": true, long: true, "9x": true,
		"": false, long + "a": false, ".a": false, "-a": false, "_a": false,
		"a/b": false, "a b": false, "ä": false, "a\x00": false, "..": false,
	} {
		if got := plainName(s); got != want {
			t.Errorf("plainName(%q) = %v, want %v", s, got, want)
		}
	}
}
