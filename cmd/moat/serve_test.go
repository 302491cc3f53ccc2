//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/store"
)

// daemon is a `moat serve` child listening on a unix socket.
type daemon struct {
	*testutil.Daemon
	t      *testing.T
	cmd    *exec.Cmd
	client *http.Client
	token  string
}

// startDaemon starts moat serve on data dir dir, on a unix socket.
func startDaemon(t *testing.T, dir string) *daemon {
	t.Helper()
	sock := filepath.Join(dir, "api.sock")
	td := testutil.StartDaemon(t, dir, "--listen", "unix:"+sock)
	return &daemon{Daemon: td, t: t, cmd: td.Cmd, token: td.Token, client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}}
}

// call sends a JSON request and decodes a JSON answer into out.
func (d *daemon) call(method, path string, body, out any) int {
	d.t.Helper()
	resp := d.send(method, path, body)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			d.t.Fatalf("%s %s: %d %q: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

func (d *daemon) send(method, path string, body any) *http.Response {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://moat"+path, rd)
	req.Header.Set("Authorization", "Bearer "+d.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	return resp
}

// TestServeKilledAndRestarted: kill -9 of the daemon with a sandbox
// running (a background process, a daemonised grandchild and a call in
// flight) leaves no process, mount or cgroup once the next daemon has
// started; the next daemon marks the sandbox and the call lost, and
// nothing recorded before the kill is missing.
func TestServeKilledAndRestarted(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	mounts := mountCount(t)
	d := startDaemon(t, dir)
	var sb api.Sandbox
	if st := d.call("POST", "/v1/sandboxes", api.CreateSandbox{}, &sb); st != 201 {
		t.Fatalf("create: %d", st)
	}
	base := "/v1/sandboxes/" + sb.ID
	var res sandbox.Result
	d.call("POST", base+"/exec", api.Exec{Args: []string{"sh", "-c", "setsid sleep 1000 > /dev/null 2>&1 < /dev/null & echo ok"}}, &res)
	if res.Stdout != "ok\n" {
		t.Fatalf("exec: %+v", res)
	}
	var p api.Process
	if st := d.call("POST", base+"/processes", api.Exec{Args: []string{"sleep", "1001"}}, &p); st != 201 {
		t.Fatalf("start: %d", st)
	}
	// A call in flight at the kill: its first event says it runs.
	stream := d.send("POST", base+"/exec", api.Exec{Args: []string{"sh", "-c", "echo running; exec sleep 1002"}, Stream: true})
	defer stream.Body.Close()
	if line, err := bufio.NewReader(stream.Body).ReadString('\n'); err != nil || !strings.Contains(line, "running") {
		t.Fatalf("stream: %q %v", line, err)
	}
	slot, pids := sandboxOf(t, d.cmd.Process.Pid)
	if len(pids) < 3 {
		t.Fatalf("found %d sandbox processes", len(pids))
	}
	var pidfds []int
	for _, pid := range pids {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			pidfds = append(pidfds, fd)
		}
	}

	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	for _, fd := range pidfds {
		// A pidfd becomes readable when its process exits: no polling.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 10_000); n != 1 || err != nil {
			t.Fatalf("a sandbox process outlived the daemon (poll %d, %v)", n, err)
		}
		unix.Close(fd)
	}
	if got := mountCount(t); got != mounts {
		t.Fatalf("host mounts %d -> %d", mounts, got)
	}

	d2 := startDaemon(t, dir)
	defer func() {
		_ = d2.cmd.Process.Signal(syscall.SIGTERM)
		_ = d2.cmd.Wait()
	}()
	// The new daemon reclaimed the dead sandbox's cgroups before it
	// listened.
	for _, c := range cgroupDirs(t) {
		if filepath.Base(c) == strconv.Itoa(slot) && contains(staleCgroups(t), c) {
			t.Fatalf("cgroup %s of the killed sandbox is still there", c)
		}
	}
	var got api.Sandbox
	if st := d2.call("GET", base, nil, &got); st != 200 || got.State != api.StateStopped || got.EndReason != api.EndLost {
		t.Fatalf("after restart: %d %+v", st, got)
	}
	var page api.AuditPage
	d2.call("GET", "/v1/audit?limit=1000&sandbox="+sb.ID, nil, &page)
	kinds := map[string]int{}
	for _, e := range page.Events {
		kinds[e.Kind]++
	}
	if kinds["sandbox.create"] != 1 || kinds["process.exec"] < 1 || kinds["process.start"] != 1 || kinds["sandbox.end"] != 1 {
		t.Fatalf("audit after restart: %v", kinds)
	}
	st, err := store.Open(context.Background(), filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	calls, err := st.ListCalls(context.Background(), "default", sb.ID, 0)
	if err != nil || len(calls) != 3 {
		t.Fatalf("calls: %d %v", len(calls), err)
	}
	lost := 0
	for _, c := range calls {
		if c.EndedAt == nil {
			t.Fatalf("call %s has no end after reconciliation", c.ID)
		}
		if c.ExitReason == "lost" {
			lost++
		}
	}
	if lost != 2 || calls[0].ExitReason != "exited" {
		t.Fatalf("calls after restart: %+v", calls)
	}
	// A clean stop ends running sandboxes and exits 0.
	var sb2 api.Sandbox
	d2.call("POST", "/v1/sandboxes", api.CreateSandbox{}, &sb2)
	_ = d2.cmd.Process.Signal(syscall.SIGTERM)
	if err := d2.cmd.Wait(); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	rec, err := st.GetSandbox(context.Background(), "default", sb2.ID)
	if err != nil || rec.EndReason != api.EndShutdown {
		t.Fatalf("after a clean stop: %+v %v", rec, err)
	}
	if got := mountCount(t); got != mounts {
		t.Fatalf("host mounts %d -> %d", mounts, got)
	}
}

// TestServeBadFlags: a daemon that cannot start says why in one line,
// exits 125 and creates nothing.
func TestServeBadFlags(t *testing.T) {
	for _, flags := range [][]string{
		{"--listen", "bogus"}, {"--listen", "127.0.0.1:99999"}, {"--default-timeout", "-1s"},
		{"--idle-timeout", "0"}, {"--max-sandboxes", "0"}, {"--log-level", "loud"}, {"extra"},
		{"--data", "/etc/passwd"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		args := append([]string{"serve", "--data", dir}, flags...)
		o := testutil.Exec(t, args...)
		if o.Code != 125 || strings.Count(strings.TrimSpace(o.Stderr), "\n") > 1 || !strings.Contains(o.Stderr, "moat serve: ") {
			t.Errorf("serve %v: exit %d, stderr %q", flags, o.Code, o.Stderr)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("serve %v created its data directory", flags)
		}
	}
}

// TestServeSIGHUPAtListening: a SIGHUP (reload the tokens) sent the moment
// the daemon says it listens reloads the tokens and does not end it.
func TestServeSIGHUPAtListening(t *testing.T) {
	testutil.RequireRoot(t)
	d := startDaemon(t, t.TempDir())
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var list struct{ Sandboxes []api.Sandbox }
	if code := d.call("GET", "/v1/sandboxes", nil, &list); code != http.StatusOK {
		t.Fatalf("after SIGHUP: %d", code)
	}
	if d.cmd.ProcessState != nil {
		t.Fatalf("the daemon ended: %v", d.cmd.ProcessState)
	}
}
