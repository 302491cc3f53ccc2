package linux

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/sandbox"
)

// TestInitStderrAfterReady: once the init is ready, the host's end of its
// stderr pipe is closed (the init's stderr is the file at the root of its
// scratch tmpfs), and what the init writes there later explains its
// death to a call that was running. Control: the words are not in the
// file before they are written.
func TestInitStderrAfterReady(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	sb, err := r.Create(ctx, &sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Shutdown(ctx)
	ls := sb.(*linuxSandbox)
	<-ls.errDone // the pipe reads end of file: the init let go of it
	const words = "moat init: a test's last words"
	if tail := string(initStderrTail(ls.scratch, 1<<10)); strings.Contains(tail, words) {
		t.Fatalf("control: %q already in the init's stderr file", tail)
	}
	p, err := ls.Start(ctx, &sandbox.Process{Args: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	// Written through the init's own fd 2.
	f, err := os.OpenFile("/proc/"+strconv.Itoa(ls.proc.pid)+"/fd/2", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(words + "\n")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ls.kill()
	res, err := p.Wait(ctx)
	msg := res.Error
	if err != nil {
		msg += " " + err.Error()
	}
	if !strings.Contains(msg, "sandbox init exited") || !strings.Contains(msg, words) {
		t.Errorf("a call whose init died: %q (%v); want the init's words %q", res.Error, err, words)
	}
	// A long tail is cut to its end.
	if got := initStderrTail(ls.scratch, 5); string(got) != "ords\n" {
		t.Errorf("tail of 5 bytes: %q", got)
	}
}
