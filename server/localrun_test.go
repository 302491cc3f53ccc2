//go:build linux

package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// localRunDialEnv makes the test binary a local run client (of the
// socket it names) instead of running tests: for a caller of another uid.
const localRunDialEnv = "MOAT_TEST_LOCALRUN_DIAL"

func init() {
	if path := os.Getenv(localRunDialEnv); path != "" {
		rep, err := dialLocalRun(path, []int{0, 1, 2}, LocalRunRequest{Args: []string{"--", "/bin/true"}, Cwd: "/"})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Printf("refused=%q accepted=%v\n", rep.Refused, rep.Accepted)
		os.Exit(0)
	}
}

// dialLocalRun sends req with fds and reads the first reply.
func dialLocalRun(path string, fds []int, req LocalRunRequest) (LocalRunReply, error) {
	var rep LocalRunReply
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return rep, err
	}
	defer c.Close()
	b, err := EncodeLocalRunFrame(req)
	if err != nil {
		return rep, err
	}
	// A daemon refusing the caller answers before reading: the write may
	// then fail while the answer waits to be read.
	_, _, werr := c.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	if err = ReadLocalRunFrame(c, &rep, 1<<16); err != nil && werr != nil {
		return rep, werr
	}
	return rep, err
}

// startLocalRun serves a socket in dir with h.
func startLocalRunDoor(t *testing.T, dir string, h LocalRunHandler) string {
	t.Helper()
	path := filepath.Join(dir, LocalRunSocket)
	ln, err := ListenLocalRun(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ServeLocalRun(ctx, ln, 2, h, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if _, err := os.Lstat(path); err == nil {
			t.Error("the socket outlived the door")
		}
	})
	return path
}

func TestLocalRunServes(t *testing.T) {
	dir := t.TempDir()
	path := startLocalRunDoor(t, dir, func(ctx context.Context, r *LocalRun) (int, error) {
		if len(r.Args) > 0 && r.Args[0] == "refuse" {
			return 0, fmt.Errorf("%w: shape", ErrLocalRunRefused)
		}
		if err := r.Accept(); err != nil {
			return 0, err
		}
		fmt.Fprint(r.Stdout, strings.Join(r.Args, " "))
		return 7, nil
	})
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := EncodeLocalRunFrame(LocalRunRequest{Args: []string{"hello", "there"}, Cwd: "/"})
	if _, _, err := c.WriteMsgUnix(b, unix.UnixRights(0, int(pw.Fd()), 2), nil); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var rep LocalRunReply
	if err := ReadLocalRunFrame(c, &rep, 1<<16); err != nil || !rep.Accepted {
		t.Fatalf("first reply %+v %v", rep, err)
	}
	if err := ReadLocalRunFrame(c, &rep, 1<<16); err != nil || rep.Exit != 7 {
		t.Fatalf("exit reply %+v %v", rep, err)
	}
	c.Close()
	out, _ := io.ReadAll(pr)
	if string(out) != "hello there" {
		t.Fatalf("the handler wrote %q to the caller's stdout", out)
	}
	if rep, err := dialLocalRun(path, []int{0, 1, 2}, LocalRunRequest{Args: []string{"refuse"}}); err != nil || rep.Refused == "" || rep.Accepted {
		t.Fatalf("refused shape: %+v %v", rep, err)
	}
	if rep, err := dialLocalRun(path, []int{0, 1}, LocalRunRequest{Args: []string{"x"}}); err != nil || rep.Refused == "" {
		t.Fatalf("two descriptors: %+v %v", rep, err)
	}
}

// TestLocalRunOtherUID: the socket is 0600, and a caller of another uid
// that reaches it anyway (mode opened here) is refused by its
// credentials.
func TestLocalRunOtherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	// A directory another uid can reach (t.TempDir's parent is private).
	dir, err := os.MkdirTemp("", "moat-localrun-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ran := false
	path := startLocalRunDoor(t, dir, func(ctx context.Context, r *LocalRun) (int, error) {
		ran = true
		return 0, r.Accept()
	})
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v, want 0600", fi.Mode().Perm(), err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, path} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{localRunDialEnv + "=" + path}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "uid 65534 may not use") {
		t.Fatalf("another uid: %v: %s", err, out)
	}
	if ran {
		t.Fatal("the handler ran for another uid")
	}
}
