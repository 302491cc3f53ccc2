package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

func newBox(t *testing.T, opts ...Option) *Sandbox {
	t.Helper()
	sb, err := New(opts...).Create(context.Background(), &sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Shutdown(context.Background()) })
	return sb.(*Sandbox)
}

func run(t *testing.T, sb *Sandbox, stdin string, args ...string) *sandbox.Result {
	t.Helper()
	p := &sandbox.Process{Args: args}
	if stdin != "" {
		p.Stdin = strings.NewReader(stdin)
	}
	res, err := sb.Exec(context.Background(), p)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return res
}

func TestScripts(t *testing.T) {
	sb := newBox(t)
	for _, c := range []struct {
		stdin, script, out, errOut string
		code                       int
	}{
		{"", "echo out; echo err >&2; id -u; exit 3", "out\n1000\n", "err\n", 3},
		{"kept", "cat > state; cat state", "kept", "", 0},
		{"", `printf a; printf b >&2; printf '\377'`, "a\xff", "b", 0},
		{"", `printf 'a<b>\000'`, "a<b>\x00", "", 0},
		{"one\ntwo\n", "while read l; do echo got $l; done; echo eof", "got one\ngot two\neof\n", "", 0},
		{"", "yes spill | head -c 12", "spill\nspill\n", "", 0},
		{"", "false && echo no || echo yes", "yes\n", "", 0},
		{"", "nosuch", "", "sh: 1: nosuch: not found\n", 127},
		{"", "echo v1 > /workspace/f && mkdir /workspace/d && cat f", "v1\n", "", 0},
		{"", "touch /etc/x", "", "touch: /etc/x: Permission denied\n", 1},
		{"", "echo 'unterminated", "", "", 2},
	} {
		res := run(t, sb, c.stdin, "sh", "-c", c.script)
		if res.ExitCode != c.code || res.Stdout != c.out || c.errOut != "" && res.Stderr != c.errOut {
			t.Errorf("%q: %+v", c.script, res)
		}
		if res.StdoutBytes != int64(len(res.Stdout)) || res.ExitReason != sandbox.ReasonExited || res.Enforcement.Runtime != "fake" {
			t.Errorf("%q: %+v", c.script, res)
		}
	}
	if res := run(t, sb, "", "head", "-c", "3000000", "/dev/zero"); res.StdoutBytes != 3_000_000 || !res.Truncated {
		t.Errorf("head: %d %v", res.StdoutBytes, res.Truncated)
	}
	if res := run(t, sb, "", "/nonexistent"); res.ExitCode != sandbox.ExitNotFound || res.Error == "" {
		t.Errorf("not found: %+v", res)
	}
	res, err := sb.Exec(context.Background(), &sandbox.Process{Args: []string{"true"}, Cwd: "/nonexistent"})
	if err != nil || res.ExitCode != sandbox.ExitSetupFailed || res.ExitReason != sandbox.ReasonSetupError {
		t.Errorf("bad cwd: %+v %v", res, err)
	}
}

func TestEnds(t *testing.T) {
	sb := newBox(t)
	res, _ := sb.Exec(context.Background(), &sandbox.Process{Args: []string{"sleep", "60"}, Timeout: 50 * time.Millisecond})
	if res.ExitCode != sandbox.ExitTimeout || res.ExitReason != sandbox.ReasonTimeout {
		t.Errorf("timeout: %+v", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	res, _ = sb.Exec(ctx, &sandbox.Process{Args: []string{"sleep", "60"}})
	if res.ExitCode != 137 || res.ExitReason != sandbox.ReasonKilled {
		t.Errorf("cancel: %+v", res)
	}
	p, err := sb.Start(context.Background(), &sandbox.Process{Args: []string{"sh", "-c", "echo up; exec sleep 1000"}, Stdin: strings.NewReader("")})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, _ = p.Wait(context.Background())
	if res.ExitCode != 143 || res.ExitReason != sandbox.ReasonSignaled || res.Stdout != "up\n" {
		t.Errorf("signal: %+v", res)
	}
	if err := p.Signal(syscall.SIGKILL); !errors.Is(err, sandbox.ErrExited) {
		t.Errorf("signal after exit: %v", err)
	}
	// FIFO between two calls.
	run(t, sb, "", "mkfifo", "/workspace/fifo")
	got := make(chan *sandbox.Result)
	go func() {
		r, _ := sb.Exec(context.Background(), &sandbox.Process{Args: []string{"sh", "-c", "echo a; read x < /workspace/fifo; echo $x"}})
		got <- r
	}()
	run(t, sb, "", "sh", "-c", "echo go > /workspace/fifo")
	if r := <-got; r.Stdout != "a\ngo\n" {
		t.Errorf("fifo: %+v", r)
	}
	// Shutdown ends what runs.
	go func() { time.Sleep(50 * time.Millisecond); _ = sb.Shutdown(context.Background()) }()
	res, err = sb.Exec(context.Background(), &sandbox.Process{Args: []string{"sleep", "60"}})
	if err == nil || res.ExitReason != sandbox.ReasonSetupError {
		t.Errorf("shutdown: %+v %v", res, err)
	}
	<-sb.Done()
	if _, err := sb.Exec(context.Background(), &sandbox.Process{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("exec after shutdown: %v", err)
	}
}

func TestFiles(t *testing.T) {
	ctx := context.Background()
	f := newBox(t).Files()
	if _, err := f.WriteFile(ctx, "dir/x", strings.NewReader("x"), 0o600, 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("write without parent: %v", err)
	}
	if err := f.Mkdir(ctx, "dir/sub", 0, true); err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteFile(ctx, "dir/hello", strings.NewReader("hello"), 0o600, 10); err != nil || n != 5 {
		t.Fatal(n, err)
	}
	if _, err := f.WriteFile(ctx, "big", strings.NewReader("hello"), 0o600, 4); !errors.Is(err, sandbox.ErrTooBig) {
		t.Fatal(err)
	}
	if fi, err := f.Stat(ctx, "/workspace/dir/hello"); err != nil || fi.Size != 5 || fi.Mode != 0o600 || fi.Type != "file" {
		t.Fatal(fi, err)
	}
	if err := f.Rename(ctx, "dir/hello", "dir/sub/moved"); err != nil {
		t.Fatal(err)
	}
	if l, err := f.ReadDir(ctx, "dir/sub"); err != nil || len(l) != 1 || l[0].Name != "moved" {
		t.Fatal(l, err)
	}
	if err := f.Remove(ctx, "dir", false); err == nil {
		t.Fatal("removed a non-empty directory")
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Name: "up/a.txt", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("abc"))
	_ = tw.Close()
	if err := f.PutTar(ctx, "/workspace", &tb, 100); err != nil {
		t.Fatal(err)
	}
	if b, err := f.ReadFile(ctx, "up/a.txt", 10); err != nil || string(b) != "abc" {
		t.Fatal(b, err)
	}
	var out bytes.Buffer
	if err := f.GetTar(ctx, "/workspace/up", &out, 100); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	var names []string
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != "up/,up/a.txt" {
		t.Fatal(names)
	}
	if err := f.PutTar(ctx, "/workspace", strings.NewReader("not a tar"), 100); err == nil {
		t.Fatal("bad tar accepted")
	}
	if err := f.Mkdir(ctx, "/", 0, false); !errors.Is(err, fs.ErrExist) {
		t.Fatal(err)
	}
	if _, err := f.WriteFile(ctx, "/usr/bin/x", strings.NewReader("x"), 0, 10); !errors.Is(err, fs.ErrPermission) {
		t.Fatal(err)
	}
}

func TestHandler(t *testing.T) {
	sb := newBox(t, WithHandler(func(ctx context.Context, c *Cmd) (int, bool) {
		if c.Args[0] != "git" {
			return 0, false
		}
		c.Stdout.Write([]byte("git " + strings.Join(c.Args[1:], " ")))
		return 7, true
	}))
	if res := run(t, sb, "", "git", "status"); res.ExitCode != 7 || res.Stdout != "git status" {
		t.Fatalf("%+v", res)
	}
	if res := run(t, sb, "", "sh", "-c", "git log"); res.ExitCode != 7 || res.Stdout != "git log" {
		t.Fatalf("%+v", res)
	}
	if res := run(t, sb, "", "python3"); res.ExitCode != 127 {
		t.Fatalf("%+v", res)
	}
}
