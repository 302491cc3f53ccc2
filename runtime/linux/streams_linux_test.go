package linux

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// framedEnv, set in the environment of this test binary, makes every
// runtime of newTestRuntime carry its streams in frames.
const framedEnv = "MOAT_TEST_FRAMED_STREAMS"

func framedTests() bool { return os.Getenv(framedEnv) == "1" }

// TestFramedStreams runs this package's tests again with every process's
// stdio and pty and every file operation's content in frames
// (WithFramedStreams): the exec, file, pty, drain, kill and timeout tests
// go through the protocol a runtime without descriptor passing (a
// microVM) speaks with the same agent.
func TestFramedStreams(t *testing.T) {
	if framedTests() {
		t.Skip("this run is the framed one")
	}
	if testing.Short() {
		t.Skip("runs the package's tests again")
	}
	testutil.RequireRoot(t)
	args := []string{"-test.count=1", "-test.skip=^TestFramedStreams$", "-test.timeout=10m"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), framedEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the package's tests with framed streams: %v\n%s", err, out)
	}
	t.Logf("with framed streams:\n%s", out)
}

// modes runs fn with the runtime in each of its stream modes.
func modes(t *testing.T, fn func(t *testing.T, r *Runtime)) {
	testutil.RequireRoot(t)
	for _, framed := range []bool{false, true} {
		name := "fd"
		if framed {
			name = "framed"
		}
		t.Run(name, func(t *testing.T) {
			opts := []Option{WithKillGrace(500 * time.Millisecond)}
			if framed {
				opts = append(opts, WithFramedStreams())
			}
			r, err := New(opts...)
			if err != nil {
				testutil.SkipOrFail(t, err.Error())
			}
			fn(t, r)
		})
	}
}

// notifyBuffer collects output and tells each time some arrives.
type notifyBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	more chan struct{}
}

func newNotifyBuffer() *notifyBuffer { return &notifyBuffer{more: make(chan struct{}, 1)} }

func (n *notifyBuffer) Write(p []byte) (int, error) {
	n.mu.Lock()
	n.b.Write(p)
	n.mu.Unlock()
	select {
	case n.more <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (n *notifyBuffer) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b.String()
}

// waitFor waits until the output satisfies ok, for at most a minute.
func (n *notifyBuffer) waitFor(t *testing.T, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	for !ok(n.String()) {
		select {
		case <-n.more:
		case <-deadline:
			t.Fatalf("no %s in the output: %q", what, n.String())
		}
	}
}

var sizeLine = regexp.MustCompile(`(?m)^(\d+) (\d+)\r?$`)

// TestExecTTY: a process with a terminal sees one on its stdio, of the
// initial size; a resize reaches it; input typed into the terminal
// reaches it; its output comes back.
func TestExecTTY(t *testing.T) {
	modes(t, func(t *testing.T, r *Runtime) {
		ctx := context.Background()
		sb, err := r.Create(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Shutdown(ctx)
		inR, inW := io.Pipe()
		defer inW.Close()
		resize := make(chan sandbox.WinSize)
		defer close(resize)
		out := newNotifyBuffer()
		script := `test -t 0 && test -t 1 && test -t 2 && echo tty-ok; stty size; while read x; do stty size; [ "$x" = q ] && exit 7; done`
		p, err := sb.Start(ctx, &sandbox.Process{Args: []string{"/bin/sh", "-c", script}, TTY: true,
			Stdin: inR, Stdout: out, InitialSize: &sandbox.WinSize{Rows: 30, Cols: 100}, Resize: resize})
		if err != nil {
			t.Fatal(err)
		}
		out.waitFor(t, "initial size", func(s string) bool { return strings.Contains(s, "tty-ok") && strings.Contains(s, "30 100") })
		resize <- sandbox.WinSize{Rows: 40, Cols: 120}
		// The resize and the input travel apart: type lines until the
		// process reports the new size.
		for i := 0; !strings.Contains(out.String(), "40 120"); i++ {
			if i == 100 {
				t.Fatalf("the resize never arrived: %q", out.String())
			}
			sizes := len(sizeLine.FindAllString(out.String(), -1))
			if _, err := io.WriteString(inW, "a\n"); err != nil {
				t.Fatal(err)
			}
			out.waitFor(t, "size line", func(s string) bool { return len(sizeLine.FindAllString(s, -1)) > sizes })
		}
		if _, err := io.WriteString(inW, "q\n"); err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait(ctx)
		if err != nil || res.ExitCode != 7 {
			t.Fatalf("wait: %v %+v (output %q)", err, res, out.String())
		}
		if res.StdoutBytes != int64(len(out.String())) {
			t.Fatalf("stdout_bytes %d, the writer got %d", res.StdoutBytes, len(out.String()))
		}
	})
}

// countWriter counts bytes and checks they are all c.
type countWriter struct {
	n   atomic.Int64
	c   byte
	bad atomic.Bool
}

func (w *countWriter) Write(p []byte) (int, error) {
	if bytes.IndexFunc(p, func(r rune) bool { return r != rune(w.c) }) >= 0 {
		w.bad.Store(true)
	}
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// TestLargeStdio: tens of megabytes through stdout and stderr at once,
// and through stdin, arrive whole.
func TestLargeStdio(t *testing.T) {
	modes(t, func(t *testing.T, r *Runtime) {
		ctx := context.Background()
		sb, err := r.Create(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Shutdown(ctx)
		const outN, errN = 48 << 20, 16 << 20
		stdout, stderr := &countWriter{c: 'o'}, &countWriter{c: 'e'}
		script := fmt.Sprintf("head -c %d /dev/zero | tr '\\0' o & head -c %d /dev/zero | tr '\\0' e >&2; wait", outN, errN)
		res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"/bin/sh", "-c", script}, Stdout: stdout, Stderr: stderr})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %v %+v", err, res)
		}
		if res.StdoutBytes != outN || stdout.n.Load() != outN || res.StderrBytes != errN || stderr.n.Load() != errN || stdout.bad.Load() || stderr.bad.Load() {
			t.Fatalf("stdout %d/%d, stderr %d/%d bytes of %d and %d (wrong bytes: %v %v)", res.StdoutBytes, stdout.n.Load(),
				res.StderrBytes, stderr.n.Load(), outN, errN, stdout.bad.Load(), stderr.bad.Load())
		}
		in := make([]byte, 16<<20)
		rand.Read(in)
		sum := sha256.Sum256(in)
		res, err = sb.Exec(ctx, &sandbox.Process{Args: []string{"sha256sum"}, Stdin: bytes.NewReader(in)})
		if err != nil || res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, hex.EncodeToString(sum[:])) {
			t.Fatalf("stdin: %v %+v", err, res)
		}
	})
}

// TestStalledConsumer: a call whose output nobody reads holds up that
// call only: meanwhile another process runs and file operations work;
// once read, its output arrives whole.
func TestStalledConsumer(t *testing.T) {
	modes(t, func(t *testing.T, r *Runtime) {
		ctx := context.Background()
		sb, err := r.Create(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Shutdown(ctx)
		release := make(chan struct{})
		first := make(chan struct{})
		var once sync.Once
		var n atomic.Int64
		stalled := writerFunc(func(p []byte) (int, error) {
			once.Do(func() { close(first) })
			<-release
			n.Add(int64(len(p)))
			return len(p), nil
		})
		const size = 8 << 20
		p, err := sb.Start(ctx, &sandbox.Process{Args: []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}, Stdout: stalled})
		if err != nil {
			t.Fatal(err)
		}
		<-first
		res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"echo", "side"}})
		if err != nil || res.Stdout != "side\n" {
			t.Fatalf("another process: %v %+v", err, res)
		}
		f := sb.Files()
		content := bytes.Repeat([]byte("f"), 1<<20)
		if _, err := f.WriteFile(ctx, "/workspace/f", bytes.NewReader(content), 0o644, 2<<20); err != nil {
			t.Fatal(err)
		}
		if got, err := f.ReadFile(ctx, "/workspace/f", 2<<20); err != nil || !bytes.Equal(got, content) {
			t.Fatalf("read back: %d bytes, %v", len(got), err)
		}
		close(release)
		res, err = p.Wait(ctx)
		if err != nil || res.ExitCode != 0 || res.StdoutBytes != size || n.Load() != size {
			t.Fatalf("the stalled call: %v %+v, the writer got %d", err, res, n.Load())
		}
	})
}

// TestBackgroundChildHoldsOutput: a process that leaves a background
// child holding its stdout ends with its output, without waiting for the
// child, in a one-shot and in a long-lived sandbox.
func TestBackgroundChildHoldsOutput(t *testing.T) {
	modes(t, func(t *testing.T, r *Runtime) {
		ctx := context.Background()
		p := &sandbox.Process{Args: []string{"/bin/sh", "-c", "sleep 60 & echo hi"}}
		res, err := r.Run(ctx, nil, p)
		if err != nil || res.ExitCode != 0 || res.Stdout != "hi\n" || res.DurationMs > 30_000 {
			t.Fatalf("one-shot: %v %+v", err, res)
		}
		sb, err := r.Create(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Shutdown(ctx)
		res, err = sb.Exec(ctx, p)
		if err != nil || res.ExitCode != 0 || res.Stdout != "hi\n" || res.DurationMs > 30_000 {
			t.Fatalf("long-lived: %v %+v", err, res)
		}
	})
}

// benchModes runs fn with a runtime in each stream mode.
func benchModes(b *testing.B, fn func(b *testing.B, r *Runtime)) {
	testutil.RequireRoot(b)
	for _, framed := range []bool{false, true} {
		name := "fd"
		var opts []Option
		if framed {
			name = "framed"
			opts = append(opts, WithFramedStreams())
		}
		b.Run(name, func(b *testing.B) {
			r, err := New(opts...)
			if err != nil {
				testutil.SkipOrFail(b, err.Error())
			}
			fn(b, r)
		})
	}
}

// BenchmarkExecTrue: the round trip of a trivial command in a live
// sandbox.
func BenchmarkExecTrue(b *testing.B) {
	benchModes(b, func(b *testing.B, r *Runtime) {
		ctx := context.Background()
		sb, err := r.Create(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Shutdown(ctx)
		for b.Loop() {
			if res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("%v %+v", err, res)
			}
		}
	})
}

// BenchmarkRunTrue: a one-shot sandbox running a trivial command, as
// moat run does.
func BenchmarkRunTrue(b *testing.B) {
	benchModes(b, func(b *testing.B, r *Runtime) {
		for b.Loop() {
			if res, err := r.Run(context.Background(), nil, &sandbox.Process{Args: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("%v %+v", err, res)
			}
		}
	})
}

// BenchmarkStdout: output throughput, 100 MB through stdout of a live
// sandbox's process.
func BenchmarkStdout(b *testing.B) {
	benchModes(b, func(b *testing.B, r *Runtime) {
		ctx := context.Background()
		sb, err := r.Create(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Shutdown(ctx)
		const size = 100_000_000
		b.SetBytes(size)
		for b.Loop() {
			res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}, Stdout: io.Discard})
			if err != nil || res.ExitCode != 0 || res.StdoutBytes != size {
				b.Fatalf("%v %+v", err, res)
			}
		}
	})
}
