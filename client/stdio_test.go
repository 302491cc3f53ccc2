package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// newStdio starts the test binary as a fake `moat serve --stdio`.
func newStdio(t *testing.T, mode string, opts ...Option) *Client {
	t.Helper()
	t.Setenv(fakeEnv, mode)
	if os.Getenv("GORACE") == "" {
		// A race-enabled child would linger a second at exit.
		t.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	c, err := New(append([]Option{WithStdio(osArgs0()), WithStderr(io.Discard)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStdioDefaultArgs(t *testing.T) {
	c := newStdio(t, "stdio")
	var args []string
	if err := c.t.call(testCtx(t), api.Op{Name: "test.args"}, nil, &args); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(args, []string{"serve", "--stdio"}) {
		t.Fatalf("child args %q", args)
	}
}

// TestStdioConcurrent: many calls in flight at once, answered in whatever
// order the fake's goroutines reach stdout, each get their own answer.
func TestStdioConcurrent(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Go(func() {
			id := fmt.Sprintf("sb-%d", i)
			info, err := c.Sandbox(id).Info(ctx)
			if err != nil {
				errs <- err
			} else if info.ID != id {
				errs <- fmt.Errorf("asked for %s, got %s", id, info.ID)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestStdioOutOfOrder: a stream stays open while another call, made from
// inside its loop, is answered; the stream then goes on and ends.
func TestStdioOutOfOrder(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx := testCtx(t)
	var texts []string
	for ev, err := range c.Sandbox("slow").Process(1).Output(ctx, 0, true) {
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, ev.Type+":"+ev.Text)
		if ev.Text == "waiting\n" {
			// The fake holds the stream until this call arrives, and
			// answers it first.
			info, err := c.Sandbox("release").Info(ctx)
			if err != nil || info.ID != "release" {
				t.Fatalf("call during a stream: %v %v", info, err)
			}
		}
	}
	want := []string{"stdout:waiting\n", "stdout:released\n", "exit:"}
	if !slices.Equal(texts, want) {
		t.Fatalf("events %q, want %q", texts, want)
	}
}

func TestStdioExecStream(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx := testCtx(t)
	for _, arg := range []string{"with-exit", "no-exit"} {
		var got []api.Event
		for ev, err := range c.Sandbox("sb").ExecStream(ctx, api.Exec{Args: []string{arg}}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev)
		}
		if len(got) != 3 || got[0].Text != "hello\n" || !bytes.Equal(got[1].Output(), []byte{0xff, 0xfe}) ||
			got[2].Type != api.EventExit || got[2].Result == nil || got[2].Result.ExitCode != 3 {
			t.Fatalf("%s: events %+v", arg, got)
		}
	}
	// A refusal after some events: the last pair carries it.
	var last api.Event
	var lastErr error
	n := 0
	for ev, err := range c.Sandbox("sb").ExecStream(ctx, api.Exec{Args: []string{"busy"}}) {
		last, lastErr = ev, err
		n++
	}
	if n != 3 || last.Type != api.EventError || !IsBusy(lastErr) || last.Error.Code != api.CodeBusy {
		t.Fatalf("busy stream: %d events, last %+v, %v", n, last, lastErr)
	}
}

func TestStdioExecAndWait(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx := testCtx(t)
	res, err := c.Sandbox("sb-1").Exec(ctx, api.Exec{Args: []string{"echo", "hi"}, Stream: true})
	if err != nil || res.Stdout != "sb-1: echo hi" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	p, err := c.Sandbox("sb-1").Process(4).Wait(ctx)
	if err != nil || p.State != api.ProcExited || p.Result.ExitCode != 1 || p.ID != 4 {
		t.Fatalf("wait: %+v %v", p, err)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandbox{Labels: map[string]string{"a": "b"}})
	if err != nil || sb.ID() != "sb-new" || sb.Snapshot().Labels["a"] != "b" {
		t.Fatalf("create: %v %v", sb, err)
	}
}

// TestStdioOutput: a lost event passes through; an exit that came only as
// the call's answer is yielded as the last event.
func TestStdioOutput(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx := testCtx(t)
	for _, proc := range []uint64{1, 2} {
		var got []string
		for ev, err := range c.Sandbox("sb").Process(proc).Output(ctx, 10, true) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev.Type)
			if ev.Type == api.EventExit && (ev.Result == nil || ev.Result.ExitCode != 7) {
				t.Fatalf("exit event %+v", ev)
			}
		}
		if !slices.Equal(got, []string{"lost", "stdout", "exit"}) {
			t.Fatalf("process %d: %q", proc, got)
		}
	}
	// Without follow no exit is made up.
	n := 0
	for _, err := range c.Sandbox("sb").Process(2).Output(ctx, 0, false) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d events without follow", n)
	}
	// The channel variant.
	events, errs := c.Sandbox("sb").Process(1).Events(ctx, 0)
	var types []string
	for ev := range events {
		types = append(types, ev.Type)
	}
	if err := <-errs; err != nil || !slices.Equal(types, []string{"lost", "stdout", "exit"}) {
		t.Fatalf("Events: %q %v", types, err)
	}
}

func TestStdioCancel(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var lastErr error
	for ev, err := range c.Sandbox("hang").Process(1).Output(ctx, 0, true) {
		if ev.Text == "tick\n" {
			cancel()
		}
		lastErr = err
	}
	if !errors.Is(lastErr, context.Canceled) {
		t.Fatalf("after cancel: %v", lastErr)
	}
	// The connection still works.
	if _, err := c.Sandbox("x").Info(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestStdioFiles(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx := testCtx(t)
	sb := c.Sandbox("sb")
	data := []byte{0, 1, 2, 0xff, '\n'}
	if err := sb.WriteFile(ctx, "/workspace/bin", data, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := sb.ReadFile(ctx, "/workspace/bin")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %q %v", got, err)
	}
	var w api.Written
	if err := c.t.writeRaw(ctx, op(api.OpFileWrite), &api.WriteFile{Sandbox: "sb", Path: "/m", Mode: "0600"}, strings.NewReader(""), &w); err != nil || w.Path != "/m#0600" || w.Size != 0 {
		t.Fatalf("written %+v %v", w, err)
	}
	if err := sb.Upload(ctx, "/workspace/dir", strings.NewReader("tar bytes")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := sb.Download(ctx, "/workspace/dir", &buf); err != nil || buf.String() != "tar bytes" {
		t.Fatalf("download %q %v", buf.String(), err)
	}
	_, err = sb.ReadFile(ctx, "/nope")
	var ae *api.Error
	if !IsNotFound(err) || !errors.As(err, &ae) || ae.Errno != "ENOENT" {
		t.Fatalf("missing file: %v", err)
	}
}

func TestStdioErrors(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx := testCtx(t)
	_, err := c.Sandbox("missing").Info(ctx)
	if !IsNotFound(err) || !errors.Is(err, &api.Error{Code: api.CodeNotFound}) || err.Error() != "not_found: no sandbox missing" {
		t.Fatalf("missing sandbox: %v", err)
	}
	err = c.t.call(ctx, api.Op{Name: "bogus.method"}, struct{}{}, nil)
	if Code(err) != api.CodeUnimplemented || !strings.Contains(err.Error(), "no method bogus.method") {
		t.Fatalf("unknown method: %v", err)
	}
}

func TestStdioChildDies(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx := testCtx(t)
	_, err := c.Sandbox("die").Info(ctx)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("child died: %v", err)
	}
	if _, err2 := c.Sandbox("x").Info(ctx); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("after the child died: %v", err2)
	}
	if err := c.Close(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Close: %v", err)
	}
}

func TestStdioClose(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx := testCtx(t)
	if _, err := c.Sandbox("x").Info(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	st := c.t.(*stdioTransport)
	select {
	case <-st.exited:
	default:
		t.Fatal("Close returned before the child exited")
	}
	if st.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("child exit %v", st.cmd.ProcessState)
	}
	if _, err := c.Sandbox("x").Info(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, err := range c.Sandbox("x").ExecStream(ctx, api.Exec{Args: []string{"x"}}) {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("stream after Close: %v", err)
		}
	}
}

// TestStdioCloseKills: a child that does not exit when its stdin closes
// is killed after the grace period.
func TestStdioCloseKills(t *testing.T) {
	c := newStdio(t, "stuck")
	if _, err := c.Sandbox("x").Info(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	c.t.(*stdioTransport).closeGrace = 50 * time.Millisecond
	err := c.Close()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Close of a stuck child: %v", err)
	}
}

func TestStdioStartFailure(t *testing.T) {
	_, err := New(WithStdio("/nonexistent/moat"))
	if err == nil || !strings.Contains(err.Error(), "starting /nonexistent/moat serve --stdio") {
		t.Fatalf("New: %v", err)
	}
}

// osArgs0 is the test binary, started again as the fake daemon.
func osArgs0() string {
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
}
