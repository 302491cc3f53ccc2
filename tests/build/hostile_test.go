//go:build linux

package build

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// Hostile build commands: each is contained, and a control shows the
// same build passes when the limit allows it.

// marker is a word no process of the host has on its command line.
func marker(t *testing.T, what string) string {
	t.Helper()
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatal(err)
	}
	return "moat-test-" + what + "-" + hex.EncodeToString(r[:])
}

// TestBuildForkBomb: a command that forks without end under --pids 64
// ends (failed or timeout), every process of it with it, and the host
// still forks; control: ten processes at once pass.
func TestBuildForkBomb(t *testing.T) {
	b := privateBuilder(t, "")
	dir := writeTree(t, map[string]string{"README": "bomb\n"})
	m := marker(t, "bomb")
	r := b.sh(t, []string{"--pids", "64", "--timeout", "3s"}, dir, fmt.Sprintf(`while :; do sh -c 'sleep 1000; :' %s & done`, m))
	switch {
	case r.build.Status == api.BuildFailed && r.code == 1:
	case r.build.Status == api.BuildTimeout && r.code == 124:
	default:
		t.Errorf("fork bomb: %s/%s exit %d, want failed (1) or timeout (124)\n%s", r.build.Status, r.build.Reason, r.code, r.stderr)
	}
	t.Logf("fork bomb: %s/%s exit %d: %s", r.build.Status, r.build.Reason, r.code, r.build.Message)
	if r.build.Status == api.BuildFailed && !strings.Contains(strings.ToLower(logOf(r.build)), "fork") {
		t.Errorf("the bomb failed, but not for want of a process: %q", logOf(r.build))
	}
	markerGone(t, m)
	if err := exec.Command("true").Run(); err != nil {
		t.Errorf("the host cannot fork after the bomb: %v", err)
	}
	c := marker(t, "ten")
	r = b.sh(t, []string{"--pids", "64", "--timeout", "20s"}, dir, fmt.Sprintf(`for i in 1 2 3 4 5 6 7 8 9 10; do sh -c 'sleep 0.2; :' %s & done; wait`, c))
	r.want(t, "control: ten processes", api.BuildSucceeded, "", 0)
}

// TestBuildFillsDisk: writing 200 MiB under --disk 64m fails the build;
// control: 16 MiB passes.
func TestBuildFillsDisk(t *testing.T) {
	b := privateBuilder(t, "")
	dir := writeTree(t, map[string]string{"README": "disk\n"})
	r := b.sh(t, []string{"--disk", "64m"}, dir, "dd if=/dev/zero of=big bs=1M count=200")
	r.want(t, "200 MiB under --disk 64m", api.BuildFailed, api.ReasonCompileFailed, 1)
	if !strings.Contains(logOf(r.build), "No space left on device") {
		t.Errorf("dd's log does not say ENOSPC: %q", logOf(r.build))
	}
	r = b.sh(t, []string{"--disk", "64m"}, dir, "dd if=/dev/zero of=big bs=1M count=16")
	r.want(t, "control: 16 MiB", api.BuildSucceeded, "", 0)
}

// TestBuildReadsHostFiles: /etc/shadow and a file the test writes on the
// host are not readable inside; control: the same file in the source is.
func TestBuildReadsHostFiles(t *testing.T) {
	b := privateBuilder(t, "")
	secret := marker(t, "secret")
	hostFile := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(hostFile, []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := writeTree(t, map[string]string{"README": "host files\n"})
	r := b.sh(t, nil, dir, fmt.Sprintf(`if cat /etc/shadow; then exit 10; fi; if cat %s; then exit 11; fi`, hostFile))
	r.want(t, "reading host files", api.BuildSucceeded, "", 0)
	if strings.Contains(logOf(r.build), secret) || strings.Contains(logOf(r.build), "root:") {
		t.Errorf("ESCAPE: the log holds a host file's content: %q", logOf(r.build))
	}
	dir = writeTree(t, map[string]string{"secret.txt": secret + "\n"})
	r = b.sh(t, nil, dir, "cat secret.txt")
	r.want(t, "control: the file in the source", api.BuildSucceeded, "", 0)
	if !strings.Contains(logOf(r.build), secret) {
		t.Errorf("control: the source's file was not read: %q", logOf(r.build))
	}
}

// TestBuildSockets: the host's loopback and an outside address cannot be
// reached (no connection reaches the test's listener); control: a
// listener inside the build's own loopback works.
func TestBuildSockets(t *testing.T) {
	b := privateBuilder(t, "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	dir := writeTree(t, map[string]string{"README": "sockets\n"})
	r := b.sh(t, nil, dir, fmt.Sprintf(`if timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d'; then exit 10; fi
if timeout 5 bash -c 'exec 3<>/dev/tcp/1.1.1.1/53'; then exit 11; fi
exit 0`, port))
	r.want(t, "connecting out", api.BuildSucceeded, "", 0)
	// A connection that reached the listener is queued: one Accept finds
	// it.
	l.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if c, err := l.Accept(); err == nil {
		c.Close()
		t.Errorf("ESCAPE: a connection from the build reached the host's 127.0.0.1:%d", port)
	}
	r = b.build(t, nil, dir, "python3", "-c", `import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname()); a, _ = s.accept()
c.sendall(b"pong"); print(a.recv(4).decode())`)
	r.want(t, "control: loopback inside", api.BuildSucceeded, "", 0)
	if !strings.Contains(logOf(r.build), "pong") {
		t.Errorf("control: %q", logOf(r.build))
	}
}

// TestBuildSleepsForever: past --timeout the build ends as timeout (exit
// 124) and its processes with it; control: a short sleep passes.
func TestBuildSleepsForever(t *testing.T) {
	b := privateBuilder(t, "")
	dir := writeTree(t, map[string]string{"README": "sleep\n"})
	m := marker(t, "sleep")
	start := time.Now()
	r := b.sh(t, []string{"--timeout", "1s"}, dir, fmt.Sprintf("sh -c 'sleep 1000; :' %s & exec sleep 1000", m))
	r.want(t, "sleep forever", api.BuildTimeout, api.ReasonTimeout, 124)
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("a 1s timeout took %s", d)
	}
	markerGone(t, m)
	r = b.sh(t, []string{"--timeout", "10s"}, dir, "sleep 0.1")
	r.want(t, "control: sleep 0.1", api.BuildSucceeded, "", 0)
}

// TestBuildOutputSymlinks: an output that is a symlink is not followed
// (output_missing, nothing of its target on the host); a symlink inside
// an output directory is listed as skipped and not written; control: the
// regular files are collected.
func TestBuildOutputSymlinks(t *testing.T) {
	b := privateBuilder(t, "")
	dir := writeTree(t, map[string]string{"README": "outputs\n"})
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	noPasswd := func(out string) {
		t.Helper()
		filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if d.Type()&os.ModeSymlink != 0 {
				t.Errorf("ESCAPE: a symlink under --out: %s", p)
				return nil
			}
			if b, _ := os.ReadFile(p); strings.Contains(string(b), string(passwd[:min(len(passwd), 32)])) {
				t.Errorf("ESCAPE: /etc/passwd's content under --out: %s", p)
			}
			return nil
		})
	}

	r := b.sh(t, []string{"--output", "a.out"}, dir, "ln -s /etc/passwd a.out")
	r.want(t, "a.out a symlink", api.BuildFailed, api.ReasonOutputMissing, 1)
	noPasswd(r.out)

	r = b.sh(t, []string{"--output", "d"}, dir, "mkdir d && echo regular > d/f && ln -s /etc/passwd d/p && ln -s .. d/up")
	r.want(t, "a symlink in an output directory", api.BuildSucceeded, "", 0)
	if len(r.build.Artifacts) != 1 || r.build.Artifacts[0].Path != "d/f" {
		t.Errorf("artifacts %+v, want d/f only", r.build.Artifacts)
	}
	if s := strings.Join(r.build.Skipped, " "); !strings.Contains(s, "d/p") || !strings.Contains(s, "d/up") {
		t.Errorf("skipped %q, want d/p and d/up", r.build.Skipped)
	}
	if _, err := os.Lstat(filepath.Join(r.out, "d", "p")); err == nil {
		t.Error("ESCAPE: d/p written under --out")
	}
	if got, _ := os.ReadFile(filepath.Join(r.out, "d", "f")); string(got) != "regular\n" {
		t.Errorf("control: d/f under --out: %q", got)
	}
	noPasswd(r.out)

	r = b.sh(t, []string{"--output", "a.out"}, dir, "echo built > a.out")
	r.want(t, "control: a.out a file", api.BuildSucceeded, "", 0)
	if got, _ := os.ReadFile(filepath.Join(r.out, "a.out")); string(got) != "built\n" {
		t.Errorf("control: a.out under --out: %q", got)
	}
}

// TestBuildInterrupt: ^C stops a private daemon's build: moat exits 130
// and the build's processes are gone (control: the host saw them while
// the build ran).
func TestBuildInterrupt(t *testing.T) {
	b := privateBuilder(t, "")
	dir := writeTree(t, map[string]string{"README": "interrupt\n"})
	m := marker(t, "intr")
	cmd := exec.Command(testutil.Moat(t), "build", "--local", "--out", filepath.Join(t.TempDir(), "out"), dir, "--",
		"/bin/sh", "-c", "echo started; sleep 1000; :", m)
	cmd.Env = b.env
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan bool, 1)
	done := make(chan error, 1)
	go func() {
		// The command's own line on stderr: it runs.
		sc := bufio.NewScanner(pr)
		seen := false
		for sc.Scan() {
			if sc.Text() == "started" {
				seen = true
				break
			}
		}
		started <- seen
		io.Copy(io.Discard, pr)
		done <- cmd.Wait()
	}()
	guard := time.NewTimer(hangGuard)
	defer guard.Stop()
	select {
	case ok := <-started:
		if !ok {
			t.Fatalf("the build ended before it started: %v", <-done)
		}
	case <-guard.C:
		cmd.Process.Kill()
		t.Fatal("the build did not start")
	}
	if markerPresent(t, m) == 0 {
		t.Fatal("control: the host does not see the build's process: the check after ^C proves nothing")
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err = <-done:
	case <-guard.C:
		cmd.Process.Kill()
		t.Fatal("moat build did not end after ^C")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("after ^C: %v, want exit 130", err)
	}
	markerGone(t, m)
}
