//go:build linux

package build

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// logCap is the [build] max_log_bytes of the daemon below.
const logCap = 1 << 20

// TestBuildDaemon: moat build against `moat serve` over HTTP (MOAT_URL):
// the C build gives the digests a private daemon gives, and the daemon
// keeps the build (the command deletes only a private daemon's). Then a
// build writes 1 GiB of log: it ends with the log cut at the daemon's cap
// and the daemon's memory small; control: a small log is kept whole.
func TestBuildDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	data := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("[build]\nmax_log_bytes = \""+strconv.Itoa(logCap)+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := testutil.StartDaemon(t, data, "--listen", "127.0.0.1:0", "--config", cfg)
	b := &builder{env: env("MOAT_URL="+d.URL, "MOAT_TOKEN="+d.Token)}
	src := writeTree(t, map[string]string{"hello.c": helloC})
	script := "gcc -O2 -Wall -o hello hello.c"

	r := b.sh(t, []string{"--output", "hello"}, src, script)
	r.want(t, "gcc over HTTP", api.BuildSucceeded, "", 0)
	local := privateBuilder(t, "").sh(t, []string{"--output", "hello"}, src, script)
	local.want(t, "gcc in a private daemon", api.BuildSucceeded, "", 0)
	if r.build.SourceDigest != local.build.SourceDigest || artifact(t, r.build, "hello").SHA256 != artifact(t, local.build, "hello").SHA256 {
		t.Errorf("the daemon and a private daemon disagree: source %s / %s, hello %s / %s", r.build.SourceDigest, local.build.SourceDigest,
			artifact(t, r.build, "hello").SHA256, artifact(t, local.build, "hello").SHA256)
	}
	req, _ := http.NewRequest(http.MethodGet, d.URL+"/v1/builds/"+r.build.ID, nil)
	req.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/builds/%s after moat build: %s, want the daemon to keep it", r.build.ID, resp.Status)
	}

	const flood = 1 << 30
	r = b.sh(t, nil, src, "yes | head -c "+strconv.Itoa(flood))
	r.want(t, "1 GiB of log", api.BuildSucceeded, "", 0)
	lg := r.build.Log
	if !lg.Truncated || lg.Kept != logCap || lg.Bytes != flood {
		t.Errorf("log %d bytes written, %d kept, truncated %v; want %d, %d, true", lg.Bytes, lg.Kept, lg.Truncated, flood, logCap)
	}
	if hwm := peakRSS(t, d.Cmd.Process.Pid); hwm > 256<<20 {
		t.Errorf("the daemon's peak RSS is %d MiB after 1 GiB of log", hwm>>20)
	} else {
		t.Logf("the daemon's peak RSS after 1 GiB of log: %d MiB; the build took %d ms", hwm>>20, r.build.DurationMs)
	}
	r = b.sh(t, nil, src, "echo a small log")
	r.want(t, "control: a small log", api.BuildSucceeded, "", 0)
	if lg := r.build.Log; lg.Truncated || lg.Kept != lg.Bytes || lg.Head != "a small log\n" {
		t.Errorf("control: log %+v, want it whole", lg)
	}
}

// peakRSS is the process pid's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}
