package guest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// threadStatus returns the Uid, Gid, Groups and CapEff lines of the
// calling thread's /proc status.
func threadStatus() (map[string]string, error) {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		switch k {
		case "Uid", "Gid", "Groups", "CapEff", "CapPrm":
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out, nil
}

// TestFileWorkerCredentials: the worker's thread, and only it, has the
// sandbox user's uid and gid, no groups and no capabilities; operations
// are judged by the kernel with those credentials.
func TestFileWorkerCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (uid 0) to change a thread's credentials")
	}
	hc, ac := pair(t)
	a := NewAgent(ac, &Setup{UID: 4242, GID: 4343})
	w := a.fileWorker()
	got := make(chan map[string]string, 1)
	w.enqueue(fileJob{fn: func() {
		st, err := threadStatus()
		if err != nil {
			st = map[string]string{"error": err.Error()}
		}
		got <- st
	}})
	st := <-got
	// Real and saved uid: guardUID, so that the sandbox user cannot
	// signal the thread (and through it the init).
	want := map[string]string{"Uid": "65534 4242 65534 4242", "Gid": "4343 4343 4343 4343", "Groups": "",
		"CapEff": "0000000000000000", "CapPrm": "0000000000000000"}
	for k, v := range want {
		if st[k] != v {
			t.Errorf("worker thread %s = %q, want %q (%v)", k, st[k], v, st)
		}
	}
	// The other threads keep theirs: the change was per thread.
	if os.Geteuid() != 0 || os.Getuid() != 0 {
		t.Fatal("the test's own thread lost root")
	}

	// A process of the sandbox user cannot signal the worker thread
	// (kill of a thread id signals the whole process); control: it can
	// signal itself. SIGURG is harmless to a Go program.
	tids := make(chan int, 1)
	w.enqueue(fileJob{fn: func() { tids <- unix.Gettid() }})
	tid := <-tids
	script := fmt.Sprintf("kill -s URG $$ || exit 10; kill -s URG %d 2>/dev/null && exit 11; exit 0", tid)
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4343}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("signals as the sandbox user: %v %s (exit 10: control failed, 11: the worker was signalled)", err, out)
	}

	// Operations run with those credentials: a root-only directory is
	// closed to them, the same directory opened up is not.
	// Not t.TempDir(): its parent is closed to other users.
	dir, err := os.MkdirTemp("", "moat-files-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	stat := func(id uint64) *Message {
		a.file(id, &FileOp{Op: FileStat, Path: filepath.Join(dir, "f")}, nil)
		m, fds, err := hc.Recv()
		closeAll(fds)
		if err != nil {
			t.Fatal(err)
		}
		if m.Type != MsgFileDone || m.ID != id {
			t.Fatalf("reply %+v", m)
		}
		return m
	}
	if m := stat(1); m.Error == nil || m.Error.Errno != "EACCES" || m.Error.Stage != FileStat {
		t.Fatalf("stat in a root-only directory: %+v %+v", m.Error, m.Result)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if m := stat(2); m.Error != nil || m.Result == nil || m.Result.Info == nil || m.Result.Info.Name != "f" || m.Result.Info.Size != 1 {
		t.Fatalf("control: stat in an open directory: %+v %+v", m.Error, m.Result)
	}
	// A file it writes is owned by the sandbox user.
	if err := os.Chown(dir, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(p[1], []byte("content")); err != nil {
		t.Fatal(err)
	}
	unix.Close(p[1])
	a.file(3, &FileOp{Op: FileWrite, Path: filepath.Join(dir, "new"), Max: 100}, []int{p[0]}) // the worker closes p[0]
	m, _, err := hc.Recv()
	if err != nil || m.Error != nil || m.Result.Bytes != 7 {
		t.Fatalf("write: %v %+v", err, m)
	}
	var sst unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "new"), &sst); err != nil || sst.Uid != 4242 || sst.Gid != 4343 || sst.Mode&0o777 != 0o644 {
		t.Fatalf("written file: %+v %v", sst, err)
	}
}

// TestFileWorkerRefusesRoot: without a non-root sandbox user the worker
// refuses every operation rather than run them as root.
func TestFileWorkerRefusesRoot(t *testing.T) {
	hc, ac := pair(t)
	a := NewAgent(ac, &Setup{UID: 0, GID: 0})
	a.file(7, &FileOp{Op: FileStat, Path: "/"}, nil)
	m, _, err := hc.Recv()
	if err != nil || m.ID != 7 || m.Error == nil || m.Error.Errno != "EPERM" {
		t.Fatalf("reply: %v %+v", err, m)
	}
}

// TestFileWorkerThreadHardening: the worker runs the agent's thread
// hardening once, on its own thread, before its first operation; if it
// fails, every operation is refused.
func TestFileWorkerThreadHardening(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (uid 0) to change a thread's credentials")
	}
	_, ac := pair(t) // the jobs below reply to no one
	a := NewAgent(ac, &Setup{UID: 4242, GID: 4343})
	tids := make(chan int, 2)
	a.SetThreadHardening(func() error { tids <- unix.Gettid(); return nil })
	w := a.fileWorker()
	ran := make(chan int, 1)
	w.enqueue(fileJob{fn: func() { ran <- unix.Gettid() }})
	w.enqueue(fileJob{fn: func() { ran <- unix.Gettid() }})
	first, second := <-ran, <-ran
	if hardened := <-tids; hardened != first || first != second {
		t.Fatalf("hardened thread %d, jobs ran on %d and %d", hardened, first, second)
	}
	if len(tids) != 0 {
		t.Fatal("hardening ran more than once")
	}

	// Control: a hardening that fails closes the worker.
	hc2, ac2 := pair(t)
	b := NewAgent(ac2, &Setup{UID: 4242, GID: 4343})
	b.SetThreadHardening(func() error { return errors.New("no landlock") })
	b.file(9, &FileOp{Op: FileStat, Path: "/"}, nil)
	m, _, err := hc2.Recv()
	if err != nil || m.ID != 9 || m.Error == nil || m.Error.Errno != "EPERM" {
		t.Fatalf("reply with failed hardening: %v %+v", err, m)
	}
}

// TestFileErrInfo: errno names and moat's own codes reach the host.
func TestFileErrInfo(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{unix.ENOENT, "ENOENT"},
		{fmt.Errorf("entry %q: %w", "a", unix.EROFS), "EROFS"},
		{errTooBig("big"), codeTooBig},
		{fmt.Errorf("x: %w", errBadTar("bad")), codeBadTar},
		{errInvalid("bad"), codeInvalid},
		{errors.New("something else"), "EIO"},
	} {
		if got := fileErrInfo("read", c.err); got.Errno != c.want || got.Stage != "read" || got.Message != c.err.Error() {
			t.Errorf("fileErrInfo(%v) = %+v, want %s", c.err, got, c.want)
		}
	}
}

// TestFileWorkerStreams: the operations that move content do it over
// framed streams (FileOp.Streams) as well as through a pipe: a write
// larger than the window, its read back, a tar stream each way; an
// operation that fails before reading resets the host's stream rather
// than leave its writer waiting for credit.
func TestFileWorkerStreams(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (uid 0) to change a thread's credentials")
	}
	hc, ac := pair(t)
	serve(ac)
	msgs := serve(hc)
	a := NewAgent(ac, &Setup{UID: 4242, GID: 4343})
	dir, err := os.MkdirTemp("", "moat-files-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	id := uint64(0)
	// do runs op with content in (to the agent) and returns what came
	// out (from the agent) and the reply.
	do := func(op *FileOp, in []byte) ([]byte, *Message, error) {
		t.Helper()
		id++
		op.Streams = true
		var out bytes.Buffer
		copied := make(chan error, 1)
		// The host opens its half before the request goes, and sends
		// only after: the agent opens its own as the request arrives.
		switch streams, toHost := FileStreams(op.Op); {
		case !streams:
			a.file(id, op, nil)
			copied <- nil
		case toHost:
			r, err := hc.Streams().Reader(id, StreamFile)
			if err != nil {
				t.Fatal(err)
			}
			a.file(id, op, nil)
			go func() { _, err := out.ReadFrom(r); r.Close(); copied <- err }()
		default:
			w, err := hc.Streams().Writer(id, StreamFile)
			if err != nil {
				t.Fatal(err)
			}
			a.file(id, op, nil)
			go func() {
				_, err := w.Write(in)
				w.Close()
				copied <- err
			}()
		}
		m := waitMsg(t, msgs)
		if m.Type != MsgFileDone || m.ID != id {
			t.Fatalf("reply %+v", m)
		}
		err := <-copied
		return out.Bytes(), m, err
	}
	content := bytes.Repeat([]byte("content "), StreamWindow/2)
	p := filepath.Join(dir, "f")
	if _, m, err := do(&FileOp{Op: FileWrite, Path: p, Max: 1 << 30}, content); err != nil || m.Error != nil || m.Result.Bytes != int64(len(content)) {
		t.Fatalf("write: %v %+v", err, m)
	}
	if got, m, err := do(&FileOp{Op: FileRead, Path: p, Max: 1 << 30}, nil); err != nil || m.Error != nil || !bytes.Equal(got, content) {
		t.Fatalf("read: %d bytes, %v %+v", len(got), err, m)
	}
	if _, m, _ := do(&FileOp{Op: FileRead, Path: p, Max: 10}, nil); m.Error == nil || m.Error.Errno != codeTooBig {
		t.Fatalf("read over the limit: %+v", m)
	}
	archive, m, err := do(&FileOp{Op: FileTarOut, Path: p, Max: 1 << 30}, nil)
	if err != nil || m.Error != nil {
		t.Fatalf("tar_out: %v %+v", err, m)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sub, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	if _, m, err := do(&FileOp{Op: FileTarIn, Path: sub, Max: 1 << 30}, archive); err != nil || m.Error != nil {
		t.Fatalf("tar_in: %v %+v", err, m)
	}
	if got, err := os.ReadFile(filepath.Join(sub, "f")); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("extracted: %d bytes, %v", len(got), err)
	}
	// A write onto a directory fails before reading: the host's writer,
	// with more than a window to send, is reset, not left waiting.
	_, m, err = do(&FileOp{Op: FileWrite, Path: sub, Max: 1 << 30}, content)
	if m.Error == nil || m.Error.Errno != "EISDIR" || !errors.Is(err, ErrStreamReset) {
		t.Fatalf("write onto a directory: %v %+v", err, m.Error)
	}
	if r, w := hc.Streams().Open(); r+w != 0 {
		t.Fatalf("host: %d readers, %d writers left open", r, w)
	}
	if r, w := ac.Streams().Open(); r+w != 0 {
		t.Fatalf("agent: %d readers, %d writers left open", r, w)
	}
}
