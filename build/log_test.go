package build

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// spillFile is a new spill file in a test directory.
func spillFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// pattern is n bytes that tell their offset apart.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
		if i%1000 == 999 {
			b[i] = '\n'
		}
	}
	return b
}

func TestLogHeadTail(t *testing.T) {
	for _, c := range []struct {
		name     string
		size     int
		writes   int // the output written in that many pieces
		head     int // bytes of the head
		tailFrom int // where the tail starts (-1: no tail)
	}{
		{"small", 100, 3, 100, -1},
		{"exactly the head", logKeep, 1, logKeep, -1},
		{"past the head", logKeep + 10, 4, logKeep, logKeep},
		{"head and tail meet", 2 * logKeep, 7, logKeep, logKeep},
		{"past both", 5*logKeep + 123, 13, logKeep, 4*logKeep + 123},
		{"one big write", 5*logKeep + 123, 1, logKeep, 4*logKeep + 123},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := spillFile(t)
			l := NewLog(f, 1<<30)
			out := pattern(c.size)
			step := (c.size + c.writes - 1) / c.writes
			for b := out; len(b) > 0; {
				n := min(step, len(b))
				if m, err := l.Write(b[:n]); m != n || err != nil {
					t.Fatalf("Write = %d, %v", m, err)
				}
				b = b[n:]
			}
			s := l.Summary()
			if s.Head != string(out[:c.head]) {
				t.Errorf("head: %d bytes, want the first %d", len(s.Head), c.head)
			}
			wantTail := ""
			if c.tailFrom >= 0 {
				wantTail = string(out[c.tailFrom:])
			}
			if s.Tail != wantTail {
				t.Errorf("tail: %d bytes, want %d from %d", len(s.Tail), len(wantTail), c.tailFrom)
			}
			if s.Bytes != int64(c.size) || s.Kept != int64(c.size) || s.Truncated {
				t.Errorf("counts: %+v", s)
			}
			if got, _ := os.ReadFile(f.Name()); !bytes.Equal(got, out) {
				t.Errorf("spill: %d bytes, want the %d written", len(got), len(out))
			}
		})
	}
}

func TestLogTruncated(t *testing.T) {
	f := spillFile(t)
	l := NewLog(f, 50_000)
	out := pattern(100_000)
	for b := out; len(b) > 0; b = b[min(7000, len(b)):] {
		l.Write(b[:min(7000, len(b))])
	}
	s := l.Summary()
	if s.Bytes != 100_000 || s.Kept != 50_000 || !s.Truncated || l.Kept() != 50_000 {
		t.Errorf("counts: %+v", s)
	}
	if s.Tail != string(out[100_000-logKeep:]) {
		t.Error("the tail is not the last 32 KiB written (past the cap)")
	}
	if got, _ := os.ReadFile(f.Name()); !bytes.Equal(got, out[:50_000]) {
		t.Errorf("spill: %d bytes, want the first 50000", len(got))
	}
}

func TestLogSpillError(t *testing.T) {
	f := spillFile(t)
	ro, err := os.Open(f.Name()) // writes fail
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	l := NewLog(ro, 1<<20)
	if n, err := l.Write([]byte("hello")); n != 5 || err != nil {
		t.Fatalf("Write = %d, %v: the command's write must not fail", n, err)
	}
	if l.Err() == nil {
		t.Error("the spill's error is not reported")
	}
	if s := l.Summary(); s.Head != "hello" || s.Kept != 0 || !s.Truncated {
		t.Errorf("summary %+v", s)
	}
}

func TestLogInvalidUTF8(t *testing.T) {
	l := NewLog(nil, 0)
	l.Write([]byte("ok \xff\xfe done"))
	if s := l.Summary(); s.Head != "ok \uFFFD done" {
		t.Errorf("head %q", s.Head)
	}
}

// TestLogConcurrent writes from two writers at once, as stdout and
// stderr do (run with -race): every write lands whole.
func TestLogConcurrent(t *testing.T) {
	f := spillFile(t)
	l := NewLog(f, 1<<30)
	const n = 2000
	var wg sync.WaitGroup
	for _, line := range []string{"out out out\n", "err\n"} {
		wg.Go(func() {
			for range n {
				l.Write([]byte(line))
			}
		})
	}
	wg.Wait()
	l.Close()
	want := int64(n * (len("out out out\n") + len("err\n")))
	if s := l.Summary(); s.Bytes != want || s.Kept != want {
		t.Errorf("counts %+v, want %d", s, want)
	}
	got, _ := os.ReadFile(f.Name())
	lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	if len(lines) != 2*n {
		t.Fatalf("%d lines, want %d", len(lines), 2*n)
	}
	for _, ln := range lines {
		if ln != "out out out" && ln != "err" {
			t.Fatalf("a torn line: %q", ln)
		}
	}
}

func TestLogWait(t *testing.T) {
	l := NewLog(spillFile(t), 1<<20)
	ctx := context.Background()

	// Nothing yet: Wait blocks until its context ends.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, ended, err := l.Wait(done, 0); !errors.Is(err, context.Canceled) || ended {
		t.Fatalf("Wait on an empty log = %v, %v; want it to block until ctx ends", ended, err)
	}

	type res struct {
		kept  int64
		ended bool
		err   error
	}
	wait := func(past int64) chan res {
		ch := make(chan res, 1)
		go func() {
			k, e, err := l.Wait(ctx, past)
			ch <- res{k, e, err}
		}()
		return ch
	}

	ch := wait(0)
	l.Write([]byte("hello"))
	if r := <-ch; r.kept != 5 || r.ended || r.err != nil {
		t.Errorf("Wait after a write = %+v", r)
	}
	if k, ended, err := l.Wait(ctx, 0); k != 5 || ended || err != nil {
		t.Errorf("Wait behind the log = %d, %v, %v; want it at once", k, ended, err)
	}

	ch = wait(5)
	l.Close()
	if r := <-ch; r.kept != 5 || !r.ended || r.err != nil {
		t.Errorf("Wait after Close = %+v", r)
	}
	l.Write([]byte("late"))
	if s := l.Summary(); s.Bytes != 5 {
		t.Errorf("a write after Close counted: %+v", s)
	}
}
