package linux

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// slowWriter counts what it is given; its first Write tells first and
// then blocks until release is closed: a copy that is slow, as on a
// loaded host.
type slowWriter struct {
	first   chan struct{}
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	n       int64
}

func (w *slowWriter) Write(p []byte) (int, error) {
	w.once.Do(func() {
		close(w.first)
		<-w.release
	})
	w.mu.Lock()
	w.n += int64(len(p))
	w.mu.Unlock()
	return len(p), nil
}

// TestDrainSlowCopy: in a long-lived sandbox, a process writes its last
// bytes and exits while the copy of its output is still busy with the
// first ones. When the copy gets back to the pipe, the read deadline set
// after the exit has passed; every byte the process wrote must still be
// read and counted (before the fix, the bytes left in the pipe were
// dropped without a trace: stdout_bytes short, nothing truncated).
func TestDrainSlowCopy(t *testing.T) {
	r := newTestRuntime(t)
	sb, err := r.Create(context.Background(), &sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Shutdown(context.Background()) })

	w := &slowWriter{first: make(chan struct{}), release: make(chan struct{})}
	testHookDrain = func(c *call) {
		// The deadline has passed by the time the copy reads again.
		// (Framed streams are drained by the agent: guest's
		// TestRelayDrain is this test for them.)
		for _, st := range c.streams {
			if st.pipe != nil {
				_ = st.pipe.SetReadDeadline(time.Unix(1, 0))
			}
		}
		close(w.release)
	}
	t.Cleanup(func() { testHookDrain = nil })
	stdinR, stdinW := io.Pipe()
	go func() {
		// The rest of the output comes only once the copy holds the
		// first byte, so that it stays in the pipe.
		<-w.first
		_, _ = io.WriteString(stdinW, "go\n")
		stdinW.Close()
	}()
	const rest = 60 << 10 // fits in the pipe: the process exits at once
	res, err := sb.Exec(context.Background(), &sandbox.Process{
		Args:   []string{"/bin/sh", "-c", fmt.Sprintf("printf a; read x; head -c %d /dev/zero", rest)},
		Stdin:  stdinR,
		Stdout: w,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	if want := int64(1 + rest); res.StdoutBytes != want || w.n != want {
		t.Fatalf("the process wrote %d bytes; stdout_bytes %d, the writer got %d", want, res.StdoutBytes, w.n)
	}
}

// TestDrainManyShortProcesses: many short processes of one long-lived
// sandbox, run at once, each print an exact number of bytes and exit at
// once; every result counts and holds all of them.
func TestDrainManyShortProcesses(t *testing.T) {
	r := newTestRuntime(t)
	sb, err := r.Create(context.Background(), &sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Shutdown(context.Background()) })
	const procs, each = 48, 200_000
	var wg sync.WaitGroup
	errs := make(chan string, procs)
	for i := range procs {
		wg.Go(func() {
			res, err := sb.Exec(context.Background(), &sandbox.Process{
				Args: []string{"/bin/sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' %c", each, 'a'+i%26)}, OutputLimit: 1 << 20})
			switch {
			case err != nil || res.ExitCode != 0:
				errs <- fmt.Sprintf("exec %d: %v %+v", i, err, res)
			case res.StdoutBytes != each || len(res.Stdout) != each || res.Truncated ||
				strings.Count(res.Stdout, string(rune('a'+i%26))) != each:
				errs <- fmt.Sprintf("exec %d: printed %d bytes; stdout_bytes %d, stdout %d bytes, truncated %v",
					i, each, res.StdoutBytes, len(res.Stdout), res.Truncated)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
