package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// stdioRoot is where a --stdio daemon without --data keeps its data.
const stdioRoot = "/var/lib/moat/stdio"

// stdioServer is a `moat serve --stdio` started by startStdioServer.
type stdioServer struct {
	cmd    *exec.Cmd
	in     *os.File // write end of its stdin (nil once handed away)
	out    *bufio.Reader
	stderr *bytes.Buffer
}

// startStdioServer starts `moat serve --stdio` with extra args and waits
// until it answers a request (so its data directory exists).
func startStdioServer(t *testing.T, args ...string) *stdioServer {
	t.Helper()
	testutil.RequireRoot(t)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Moat(t), append([]string{"serve", "--stdio"}, args...)...)
	cmd.Stdin = inR
	pr, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &stdioServer{cmd: cmd, in: inW, out: bufio.NewReader(pr), stderr: &bytes.Buffer{}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	if _, err := inW.WriteString(`{"jsonrpc":"2.0","id":1,"method":"sandbox.list","params":{}}` + "\n"); err != nil {
		t.Fatal(err)
	}
	line, err := s.out.ReadString('\n')
	if err != nil || !strings.Contains(line, `"id":1`) {
		t.Fatalf("no answer from moat serve --stdio: %q %v; stderr %q", line, err, s.stderr.String())
	}
	return s
}

// wait waits (at most a minute) for the server to exit.
func (s *stdioServer) wait(t *testing.T) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		<-done
		t.Fatal("moat serve --stdio did not exit a minute after its input ended")
	}
}

// stdioDirsOf lists the entries of stdioRoot made for pid (the pid is
// one of the dash-separated fields of the name).
func stdioDirsOf(t *testing.T, pid int) []string {
	t.Helper()
	ents, err := os.ReadDir(stdioRoot)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		for _, f := range strings.Split(e.Name(), "-") {
			if f == strconv.Itoa(pid) {
				out = append(out, filepath.Join(stdioRoot, e.Name()))
			}
		}
	}
	return out
}

// TestStdioLeavesNothing: a --stdio daemon without --data removes its
// data directory when its session ends, and writes nothing on stderr by
// default (its log goes to a file in that directory).
func TestStdioLeavesNothing(t *testing.T) {
	s := startStdioServer(t)
	pid := s.cmd.Process.Pid
	if dirs := stdioDirsOf(t, pid); len(dirs) != 1 {
		t.Fatalf("while running: data directories %q", dirs)
	}
	s.in.Close()
	s.wait(t)
	if dirs := stdioDirsOf(t, pid); len(dirs) != 0 {
		t.Fatalf("left behind: %q", dirs)
	}
	if s.stderr.Len() != 0 {
		t.Fatalf("stderr: %q", s.stderr.String())
	}
}

// TestStdioParentKilled: the program that started the daemon is killed
// (SIGKILL): the daemon's input ends, and it still removes its data.
func TestStdioParentKilled(t *testing.T) {
	s := startStdioServer(t)
	pid := s.cmd.Process.Pid
	// The "parent" holds the only write end of the daemon's stdin.
	parent := exec.Command("sleep", "1000")
	parent.ExtraFiles = []*os.File{s.in}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	s.in.Close()
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	s.wait(t)
	if dirs := stdioDirsOf(t, pid); len(dirs) != 0 {
		t.Fatalf("left behind: %q", dirs)
	}
}

// TestStdioKilledCleanedNextStart: a --stdio daemon killed outright
// cannot clean up; the next one to start removes what it left.
func TestStdioKilledCleanedNextStart(t *testing.T) {
	a := startStdioServer(t)
	pidA := a.cmd.Process.Pid
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	a.in.Close()
	b := startStdioServer(t)
	if dirs := stdioDirsOf(t, pidA); len(dirs) != 0 {
		t.Fatalf("the killed daemon's data is still there after the next start: %q", dirs)
	}
	b.in.Close()
	b.wait(t)
	if dirs := stdioDirsOf(t, b.cmd.Process.Pid); len(dirs) != 0 {
		t.Fatalf("left behind: %q", dirs)
	}
}

// TestStdioLogStderr: --log-stderr sends a --stdio daemon's log lines to
// stderr.
func TestStdioLogStderr(t *testing.T) {
	s := startStdioServer(t, "--log-stderr")
	s.in.Close()
	s.wait(t)
	if !strings.Contains(s.stderr.String(), "msg=stopped") {
		t.Fatalf("stderr: %q", s.stderr.String())
	}
}
