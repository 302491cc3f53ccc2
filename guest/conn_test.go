//go:build linux

package guest

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func pair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	h, a, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	// FileConn takes an inherited descriptor number, as the init does.
	fd, err := unix.Dup(int(a.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	ac, err := FileConn(fd)
	if err != nil {
		t.Fatal(err)
	}
	hc := NewConn(h)
	t.Cleanup(func() { hc.Close(); ac.Close() })
	return hc, ac
}

// TestConnRoundTrip: a message and its descriptors arrive intact, and
// the received descriptors are close-on-exec.
func TestConnRoundTrip(t *testing.T) {
	hc, ac := pair(t)
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("payload"); err != nil {
		t.Fatal(err)
	}
	msg := &Message{Type: MsgExec, ID: 7, Exec: &Exec{Args: []string{"echo", "hi"}, Cwd: "/workspace",
		Secrets: []SecretFile{{Name: "K", Value: []byte{0, 1, 2}}}}}
	if err := hc.Send(msg, int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	got, fds, err := ac.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != MsgExec || got.ID != 7 || strings.Join(got.Exec.Args, " ") != "echo hi" || string(got.Exec.Secrets[0].Value) != "\x00\x01\x02" {
		t.Fatalf("got %+v", got)
	}
	if len(fds) != 1 {
		t.Fatalf("%d fds", len(fds))
	}
	defer unix.Close(fds[0])
	flags, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("received fd not close-on-exec: %v", err)
	}
	b := make([]byte, 7)
	if n, err := unix.Pread(fds[0], b, 0); err != nil || string(b[:n]) != "payload" {
		t.Fatalf("read through passed fd: %q %v", b[:n], err)
	}
}

func TestConnLimits(t *testing.T) {
	hc, ac := pair(t)
	big := &Message{Type: MsgExec, Exec: &Exec{Args: []string{strings.Repeat("a", MaxMessage)}}}
	if err := hc.Send(big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized send: %v", err)
	}
	if err := hc.Send(&Message{Type: MsgSignal}, make([]int, MaxFDs+1)...); err == nil {
		t.Fatal("too many descriptors accepted")
	}
	// The peer going away is io.EOF.
	hc.Close()
	if _, _, err := ac.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("recv after close: %v", err)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := dir + "/tool"
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/data", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p, code, err := lookPath("tool", "/", "/nonexistent:"+dir); err != nil || p != exe || code != 0 {
		t.Fatalf("found %q %d %v", p, code, err)
	}
	if _, code, _ := lookPath("data", "/", dir); code != 126 {
		t.Fatalf("non-executable: code %d", code)
	}
	if _, code, _ := lookPath("missing", "/", dir); code != 127 {
		t.Fatalf("missing: code %d", code)
	}
	if p, code, err := lookPath("./tool", dir, ""); err != nil || p != exe || code != 0 {
		t.Fatalf("relative: %q %d %v", p, code, err)
	}
	if _, code, _ := lookPath(dir, "/", ""); code != 126 {
		t.Fatalf("directory: code %d", code)
	}
	if envPath([]string{"PATH=/a", "X=1", "PATH=/b"}) != "/b" {
		t.Fatal("the last PATH wins")
	}
}
