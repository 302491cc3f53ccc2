package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// startServe runs `moat serve` under prefix (a wrapper command such as
// prlimit, or none) with args and returns it with its URL and token.
func startServe(t *testing.T, dir string, prefix []string, args ...string) (cmd *exec.Cmd, url, token string) {
	t.Helper()
	argv := append(append(prefix, testutil.Moat(t), "serve", "--data", dir), args...)
	d := testutil.StartDaemonCmd(t, dir, exec.Command(argv[0], argv[1:]...))
	return d.Cmd, d.URL, d.Token
}

// openFiles reads the soft and hard "Max open files" of pid.
func openFiles(t *testing.T, pid int) (soft, hard uint64) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "Max open files")); strings.HasPrefix(line, "Max open files") && len(f) >= 2 {
			soft, _ = strconv.ParseUint(f[0], 10, 64)
			hard, _ = strconv.ParseUint(f[1], 10, 64)
			return soft, hard
		}
	}
	t.Fatalf("no Max open files in %s", b)
	return 0, 0
}

// TestServeRaisesNofile: a daemon started with a low RLIMIT_NOFILE
// (512 soft, 4096 hard) raises it at start, so that it does not run out
// of descriptors at a few hundred connections and sandboxes (issue 17,
// item 9): the soft limit to the hard one (Go's runtime alone stops one
// short), and the hard one too where the daemon may (CAP_SYS_RESOURCE);
// its sandboxes keep the limit they were given.
func TestServeRaisesNofile(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	dir := t.TempDir()
	cmd, url, token := startServe(t, dir, []string{"prlimit", "--nofile=512:4096", "--"}, "--listen", "127.0.0.1:0")
	soft, hard := openFiles(t, cmd.Process.Pid)
	switch {
	case soft != hard || hard < 4096:
		t.Errorf("moat serve started at 512:4096 open files runs with %d:%d; want the soft limit raised to the hard one", soft, hard)
	case hasSysResource(t) && hard <= 4096:
		t.Errorf("moat serve with CAP_SYS_RESOURCE runs with %d:%d open files; want the hard limit raised too", soft, hard)
	}
	// A sandbox's processes get the limit the daemon was started with.
	c := &http.Client{}
	do := func(method, path, body string, out any) int {
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
			}
		}
		return resp.StatusCode
	}
	var sb api.Sandbox
	if st := do("POST", "/v1/sandboxes", `{}`, &sb); st != 201 {
		t.Fatalf("create: %d", st)
	}
	var res struct {
		Stdout string `json:"stdout"`
	}
	do("POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"args":["sh","-c","ulimit -n"]}`, &res)
	if got := strings.TrimSpace(res.Stdout); got != "512" {
		t.Errorf("a sandbox's open files limit: %q, want 512 (the daemon's at its start)", got)
	}
}

// hasSysResource reports whether this process has CAP_SYS_RESOURCE (some
// hosts drop it even for root), which raising a hard limit needs.
func hasSysResource(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps&(1<<24) != 0 // CAP_SYS_RESOURCE
		}
	}
	return false
}

// TestServeConnCap: --max-conns-per-client caps the open connections of
// one address; the next is refused with 503, another address is served
// (issue 17, item 10).
func TestServeConnCap(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	_, url, _ := startServe(t, dir, nil, "--listen", "127.0.0.1:0", "--max-conns-per-client", "2")
	addr := strings.TrimPrefix(url, "http://")
	get := func(src string) (net.Conn, string) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.DialContext(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: moat\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return c, "error: " + err.Error()
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return c, resp.Status
	}
	for i := range 2 {
		c, st := get("127.0.0.1")
		defer c.Close()
		if st != "200 OK" {
			t.Fatalf("connection %d: %s", i+1, st)
		}
	}
	c, st := get("127.0.0.1")
	c.Close()
	if st == "200 OK" {
		t.Errorf("a third connection from 127.0.0.1 with --max-conns-per-client 2 was served")
	}
	c, st = get("127.0.0.2")
	c.Close()
	if st != "200 OK" {
		t.Errorf("127.0.0.2 while 127.0.0.1 is at its cap: %s", st)
	}
}
