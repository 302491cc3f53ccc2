//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// Per docs/API.md ("Memory"): the daemon's peak RSS growth under an
// output flood stays within memory_budget, plus the soft memory limit's
// margin (a quarter of the budget, at least 16 MiB), plus this much per
// call in progress.
const perCallMemory = 256 << 10

// memDaemon is a daemon of the memory test: the moat built from this
// checkout, or MOAT_TEST_DAEMON_BIN (to run the test against another
// build, e.g. one from before a change).
type memDaemon struct {
	pid    int
	client *http.Client
}

func startMemDaemon(t *testing.T, dir, cfg string) *memDaemon {
	t.Helper()
	bin := os.Getenv("MOAT_TEST_DAEMON_BIN")
	if bin == "" {
		bin = testutil.Moat(t)
	}
	sock := filepath.Join(dir, "api.sock")
	d := testutil.StartDaemonCmd(t, dir, exec.Command(bin, "serve", "--data", dir, "--listen", "unix:"+sock, "--config", cfg))
	return &memDaemon{pid: d.Cmd.Process.Pid, client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}}
}

// do sends a request and decodes a JSON answer into out; errors are
// returned, not fatal, for use from any goroutine.
func (d *memDaemon) do(token, method, path string, body, out any, want int) error {
	resp, err := d.request(token, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (d *memDaemon) request(token, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://moat"+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return d.client.Do(req)
}

// follow reads a background process's output to its end: the bytes
// received, the bytes lost events report, and the exit's result.
func (d *memDaemon) follow(token, sb string, id uint64) (received, lost int64, res *sandbox.Result, err error) {
	resp, err := d.request(token, "GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/output?follow=true", sb, id), nil)
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.Event
		if err := dec.Decode(&ev); err == io.EOF {
			return received, lost, res, nil
		} else if err != nil {
			return received, lost, res, err
		}
		switch ev.Type {
		case api.EventStdout, api.EventStderr:
			received += int64(len(ev.Output()))
		case api.EventLost:
			lost += ev.LostBytes
		case api.EventExit:
			res = ev.Result
		case api.EventError:
			return received, lost, res, fmt.Errorf("error event: %+v", ev.Error)
		}
	}
}

// TestServeOutputMemoryBound: a real daemon with a small output budget
// (32 MiB, 8 MiB per tenant) under a flood from four tenants, 16
// concurrent execs printing 8 MiB of NUL bytes each with output_limit
// 8 MiB (an answer's JSON is six times its stdout: "\u0000") and 16
// background processes printing 8 MiB each, every one followed by a
// reader. The daemon's peak RSS growth (VmHWM) stays within the budget
// plus the documented margin and per-call constant, and every byte is
// accounted for: each answer counts its whole stream and holds it or
// says truncated; each background process's result counts its whole
// stream and its reader received it or was told it was lost.
func TestServeOutputMemoryBound(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	tenants := []string{"default", "t1", "t2", "t3"}
	tok := writeTenantTokens(t, dir, tenants...)
	const budget = 32 << 20
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(`
[output]
max_limit = "8MiB"
memory_budget = "32MiB"
tenant_memory_budget = "8MiB"
tenant_disk_quota = "256MiB"
retention = "1h"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startMemDaemon(t, dir, cfg)
	sbs := map[string]string{}
	for _, ten := range tenants {
		var sb api.Sandbox
		if err := d.do(tok[ten], "POST", "/v1/sandboxes", api.CreateSandbox{}, &sb, http.StatusCreated); err != nil {
			t.Fatal(err)
		}
		sbs[ten] = sb.ID
		var res sandbox.Result
		if err := d.do(tok[ten], "POST", "/v1/sandboxes/"+sb.ID+"/exec", api.Exec{Args: []string{"true"}}, &res, 200); err != nil {
			t.Fatal(err)
		}
	}

	base := procKB(t, d.pid, "VmRSS")
	resetHWM(t, d.pid)
	const execs, bgs, each = 16, 16, 8 << 20
	script := []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero", each)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	whole, truncated := 0, 0
	for i := range execs {
		ten := tenants[i%len(tenants)]
		wg.Go(func() {
			var res sandbox.Result
			if err := d.do(tok[ten], "POST", "/v1/sandboxes/"+sbs[ten]+"/exec",
				api.Exec{Args: script, OutputLimit: 8 << 20, Concurrent: true}, &res, 200); err != nil {
				problem("exec %d: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case res.ExitCode != 0 || res.StdoutBytes != each:
				problems = append(problems, fmt.Sprintf("exec %d: exit %d, stdout_bytes %d of %d", i, res.ExitCode, res.StdoutBytes, each))
			case len(res.Stdout) == each && strings.Count(res.Stdout, "\x00") == each:
				whole++
			case res.Truncated:
				truncated++
			default:
				problems = append(problems, fmt.Sprintf("exec %d: %d bytes of %d in the answer, not truncated", i, len(res.Stdout), each))
			}
		})
	}
	var received, lost int64
	for i := range bgs {
		ten := tenants[i%len(tenants)]
		wg.Go(func() {
			var p api.Process
			if err := d.do(tok[ten], "POST", "/v1/sandboxes/"+sbs[ten]+"/processes", api.Exec{Args: script}, &p, http.StatusCreated); err != nil {
				problem("start %d: %v", i, err)
				return
			}
			r, l, res, err := d.follow(tok[ten], sbs[ten], p.ID)
			if err != nil {
				problem("follow %d: %v", i, err)
			}
			switch {
			case res == nil:
				problem("background %d: no exit event", i)
			case res.StdoutBytes != each:
				problem("background %d: stdout_bytes %d of %d", i, res.StdoutBytes, each)
			case r+l != each:
				problem("background %d: printed %d bytes; received %d, told of %d lost (%+d unaccounted)", i, each, r, l, each-r-l)
			}
			mu.Lock()
			received, lost = received+r, lost+l
			mu.Unlock()
		})
	}
	wg.Wait()
	peak := procKB(t, d.pid, "VmHWM") - base
	for _, p := range problems {
		t.Error(p)
	}
	bound := int64(budget + max(budget/4, 16<<20) + (execs+bgs)*perCallMemory)
	t.Logf("execs: %d whole answers, %d truncated; background: %d MiB received, %d MiB lost; daemon RSS %d MiB before, peak +%.1f MiB (bound %d MiB)",
		whole, truncated, received>>20, lost>>20, base>>20, float64(peak)/(1<<20), bound>>20)
	if peak > bound {
		t.Errorf("the flood raised the daemon's peak RSS by %.1f MiB, over budget + margin + %d calls × %d KiB = %d MiB",
			float64(peak)/(1<<20), execs+bgs, perCallMemory>>10, bound>>20)
	}
}
