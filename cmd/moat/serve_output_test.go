//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// procKB reads a "Vm…:  N kB" line of /proc/PID/status, in bytes.
func procKB(t *testing.T, pid int, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

// resetHWM resets the peak RSS (VmHWM) of pid to its current RSS.
func resetHWM(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
}

// TestServeOutputFlood (issue 17, items 1 and 3): a real daemon with small
// output budgets (24 MiB in all, 8 MiB per tenant) under output floods from
// four tenants: an output_limit over the maximum is a 400 naming it; 16
// concurrent execs printing 48 MiB each, and 64 background processes
// printing 12 MiB each, raise the daemon's peak RSS by a bounded amount
// however much is printed; the memory goes back once the sandboxes end.
func TestServeOutputFlood(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	tenants := []string{"default", "t1", "t2", "t3"}
	tok := writeTenantTokens(t, dir, tenants...)
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(`
[output]
max_limit = "8MiB"
memory_budget = "24MiB"
tenant_memory_budget = "8MiB"
tenant_disk_quota = "16MiB"
retention = "1h"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	d := testutil.StartDaemon(t, dir, "--listen", "unix:"+sock, "--config", cfg)
	pid := d.Cmd.Process.Pid
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	dm := &daemon{t: t, client: hc}
	as := func(ten string) *daemon { c := *dm; c.token = tok[ten]; return &c }

	sbs := map[string]string{}
	for _, ten := range tenants {
		var sb api.Sandbox
		if st := as(ten).call("POST", "/v1/sandboxes", api.CreateSandbox{}, &sb); st != http.StatusCreated {
			t.Fatalf("create for %s: %d", ten, st)
		}
		sbs[ten] = sb.ID
	}
	// Item 1: over the maximum, a clear 400.
	var e api.Error
	if st := as("default").call("POST", "/v1/sandboxes/"+sbs["default"]+"/exec",
		api.Exec{Args: []string{"true"}, OutputLimit: 300 << 20}, &e); st != http.StatusBadRequest ||
		e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, "maximum of 8388608 bytes") {
		t.Errorf("output_limit 300 MiB: %d %+v; want 400 naming the maximum", st, e)
	}

	base := procKB(t, pid, "VmRSS")
	resetHWM(t, pid)
	const execs, execBytes = 4, 48 << 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	var got int64
	for _, ten := range tenants {
		for range execs {
			wg.Go(func() {
				var res sandbox.Result
				st := as(ten).call("POST", "/v1/sandboxes/"+sbs[ten]+"/exec", api.Exec{
					Args: []string{"sh", "-c", fmt.Sprintf("yes flood | head -c %d", execBytes)}, OutputLimit: 8 << 20, Concurrent: true}, &res)
				if st != 200 {
					t.Errorf("exec: %d", st)
				}
				mu.Lock()
				got += res.StdoutBytes
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	execPeak := procKB(t, pid, "VmHWM") - base
	// Control: the flood really happened.
	if want := int64(len(tenants) * execs * execBytes); got != want {
		t.Fatalf("the execs printed %d bytes, want %d", got, want)
	}
	t.Logf("exec flood: %d MiB printed; daemon RSS %d MiB before, peak +%d MiB", got>>20, base>>20, execPeak>>20)
	if execPeak > 192<<20 {
		t.Errorf("exec flood raised the daemon's peak RSS by %d MiB (budget 24 MiB)", execPeak>>20)
	}

	// Item 3: background processes flooding, 16 per tenant.
	resetHWM(t, pid)
	const bg, bgBytes = 16, 12 << 20
	type started struct{ ten, sb, id string }
	var procs []started
	for _, ten := range tenants {
		for range bg {
			var p api.Process
			if st := as(ten).call("POST", "/v1/sandboxes/"+sbs[ten]+"/processes", api.Exec{
				Args: []string{"sh", "-c", fmt.Sprintf("yes flood | head -c %d", bgBytes)}}, &p); st != http.StatusCreated {
				t.Fatalf("start: %d", st)
			}
			procs = append(procs, started{ten, sbs[ten], strconv.FormatUint(p.ID, 10)})
		}
	}
	for _, p := range procs {
		var pr api.Process
		if st := as(p.ten).call("POST", "/v1/sandboxes/"+p.sb+"/processes/"+p.id+"/wait", map[string]any{}, &pr); st != 200 ||
			pr.Result == nil || pr.Result.StdoutBytes != bgBytes {
			t.Fatalf("wait: %d %+v", st, pr.Result)
		}
	}
	bgPeak := procKB(t, pid, "VmHWM") - base
	t.Logf("background flood: %d processes × %d MiB; daemon peak RSS +%d MiB", len(procs), bgBytes>>20, bgPeak>>20)
	if bgPeak > 192<<20 {
		t.Errorf("background flood raised the daemon's peak RSS by %d MiB (budget 24 MiB)", bgPeak>>20)
	}
	// A reader is told what it lost.
	resp := as(procs[0].ten).send("GET", "/v1/sandboxes/"+procs[0].sb+"/processes/"+procs[0].id+"/output", nil)
	body, _ := readAllString(resp)
	if !strings.Contains(body, `"type":"lost"`) || !strings.Contains(body, `"lost_bytes":`) {
		t.Errorf("no lost event with lost_bytes in %.300s", body)
	}

	// Memory goes back once the sandboxes end.
	for _, ten := range tenants {
		as(ten).call("DELETE", "/v1/sandboxes/"+sbs[ten], nil, nil)
	}
	deadline := time.Now().Add(10 * time.Second)
	var rss int64
	for {
		rss = procKB(t, pid, "VmRSS")
		if rss-base < 48<<20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the RSS, not synchronising
	}
	t.Logf("after the sandboxes ended: daemon RSS %d MiB (+%d MiB)", rss>>20, (rss-base)>>20)
	if rss-base >= 48<<20 {
		t.Errorf("daemon RSS still +%d MiB 10 s after the sandboxes ended", (rss-base)>>20)
	}
}

func readAllString(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// writeTenantTokens writes a tokens file with one token per tenant into
// the data dir (and the first tenant's as its token file) and returns the
// tokens by tenant.
func writeTenantTokens(t *testing.T, dir string, tenants ...string) map[string]string {
	t.Helper()
	var tokens strings.Builder
	tok := map[string]string{}
	for _, ten := range tenants {
		tok[ten] = "moat_test_token_of_" + ten + "_0123456789abcdef0123456789"
		fmt.Fprintf(&tokens, "%s %s\n", ten, tok[ten])
	}
	for name, text := range map[string]string{"tokens": tokens.String(), "token": tok[tenants[0]] + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return tok
}
