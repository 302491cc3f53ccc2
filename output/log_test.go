package output

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestLogOrderAndResume(t *testing.T) {
	l := NewLog(1 << 20)
	out, errw := l.Writer("stdout"), l.Writer("stderr")
	fmt.Fprint(out, "a")
	fmt.Fprint(errw, "b")
	fmt.Fprint(out, "c")
	ctx := context.Background()
	got, done, lost, err := l.Read(ctx, 0)
	if err != nil || done || lost || len(got) != 3 || got[1].Stream != "stderr" || string(got[2].Data) != "c" || got[2].Seq != 3 {
		t.Fatalf("%+v %v %v %v", got, done, lost, err)
	}
	// A reader that saw up to seq 2 resumes with 3 only.
	got, _, _, _ = l.Read(ctx, 2)
	if len(got) != 1 || got[0].Seq != 3 {
		t.Fatalf("resume: %+v", got)
	}
	l.Close()
	got, done, _, _ = l.Read(ctx, 3)
	if len(got) != 0 || !done {
		t.Fatalf("after close: %+v %v", got, done)
	}
	fmt.Fprint(out, "late") // ignored once closed
	if got, _, _, _ := l.Read(ctx, 3); len(got) != 0 {
		t.Fatalf("write after close kept: %+v", got)
	}
}

// TestLogBounded: the oldest chunks go first and a late reader learns it.
func TestLogBounded(t *testing.T) {
	l := NewLog(10)
	w := l.Writer("stdout")
	for i := range 10 {
		fmt.Fprintf(w, "%04d", i) // 4 bytes each
	}
	got, _, lost, _ := l.Read(context.Background(), 0)
	if !lost || len(got) != 2 || got[0].Seq != 9 || string(got[1].Data) != "0009" {
		t.Fatalf("%+v lost=%v", got, lost)
	}
	if _, _, lost, _ := l.Read(context.Background(), 8); lost {
		t.Fatal("a reader that saw seq 8 lost nothing")
	}
	// One chunk larger than the bound is still kept, alone.
	fmt.Fprint(w, strings.Repeat("x", 100))
	got, _, _, _ = l.Read(context.Background(), 0)
	if len(got) != 1 || len(got[0].Data) != 100 {
		t.Fatalf("big chunk: %d chunks", len(got))
	}
}

// TestLogFollow: a waiting reader is woken by writes and by Close; ctx
// ends a wait.
func TestLogFollow(t *testing.T) {
	l := NewLog(1 << 20)
	w := l.Writer("stdout")
	const n = 200
	var wg sync.WaitGroup
	wg.Add(2)
	var seen []string
	go func() {
		defer wg.Done()
		after := uint64(0)
		for {
			got, done, lost, err := l.Read(context.Background(), after)
			if err != nil || lost {
				t.Errorf("read: %v lost=%v", err, lost)
				return
			}
			for _, c := range got {
				seen = append(seen, string(c.Data))
				after = c.Seq
			}
			if done {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range n {
			fmt.Fprintf(w, "%d", i)
		}
		l.Close()
	}()
	wg.Wait()
	if len(seen) != n || seen[n-1] != fmt.Sprint(n-1) {
		t.Fatalf("follower saw %d chunks", len(seen))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := NewLog(10).Read(ctx, 0); err == nil {
		t.Fatal("cancelled wait returned no error")
	}
}

// TestLogReadBatches: one Read returns at most MaxReadBytes (at least one
// chunk); done only comes with the last of them.
func TestLogReadBatches(t *testing.T) {
	l := NewLog(4 * MaxReadBytes)
	w := l.Writer("stdout")
	chunk := strings.Repeat("x", 32<<10)
	const n = 3 * MaxReadBytes / (32 << 10)
	for range n {
		fmt.Fprint(w, chunk)
	}
	l.Close()
	var after uint64
	reads, got := 0, 0
	for {
		cs, done, _, err := l.Read(context.Background(), after)
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, c := range cs {
			size += len(c.Data)
			after = c.Seq
		}
		if size > MaxReadBytes {
			t.Fatalf("one read returned %d bytes", size)
		}
		reads, got = reads+1, got+len(cs)
		if done {
			break
		}
	}
	if got != n || reads < 3 {
		t.Fatalf("%d chunks in %d reads, want %d in 3 or more", got, reads, n)
	}
}
