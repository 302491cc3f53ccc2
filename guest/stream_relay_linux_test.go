package guest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// relayPair starts a pipe relay for process 1 on the agent end of a
// connection and opens the host's halves. The process's ends of the pipes
// (stdin, stdout, stderr) are returned as duplicates, as a forked process
// would hold them.
func relayPair(t *testing.T, stdin bool) (rel *procRelay, proc [3]*os.File, out, errOut *StreamReader, in *StreamWriter) {
	t.Helper()
	hc, ac := pair(t)
	serve(hc)
	serve(ac)
	var err error
	if out, err = hc.Streams().Reader(1, StreamStdout); err != nil {
		t.Fatal(err)
	}
	if errOut, err = hc.Streams().Reader(1, StreamStderr); err != nil {
		t.Fatal(err)
	}
	if stdin {
		if in, err = hc.Streams().Writer(1, StreamStdin); err != nil {
			t.Fatal(err)
		}
	}
	if rel, err = newPipeRelay(ac.Streams(), 1, stdin); err != nil {
		t.Fatal(err)
	}
	for i, fd := range rel.childFDs() {
		d, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		proc[i] = os.NewFile(uintptr(d), "proc")
		t.Cleanup(func() { proc[i].Close() })
	}
	rel.start()
	return rel, proc, out, errOut, in
}

// TestRelayStdio: the host's input reaches the process and ends with
// EOF; its output and errors reach the host and end once it has exited
// and closed them.
func TestRelayStdio(t *testing.T) {
	rel, proc, out, errOut, in := relayPair(t, true)
	go func() {
		_, _ = in.Write([]byte("input\n"))
		in.Close()
	}()
	got, err := io.ReadAll(proc[0])
	if err != nil || string(got) != "input\n" {
		t.Fatalf("the process read %q, %v", got, err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*StreamWindow/16)
	go func() {
		_, _ = proc[1].Write(big)
		_, _ = proc[2].WriteString("oops")
		proc[1].Close()
		proc[2].Close()
	}()
	if got, err := io.ReadAll(out); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("stdout: %d bytes of %d, %v", len(got), len(big), err)
	}
	if got, err := io.ReadAll(errOut); err != nil || string(got) != "oops" {
		t.Fatalf("stderr: %q, %v", got, err)
	}
	rel.exited()
	<-rel.done
}

// TestRelayEmptyStdin: without the host's input, the process reads EOF.
func TestRelayEmptyStdin(t *testing.T) {
	rel, proc, _, _, _ := relayPair(t, false)
	if n, err := proc[0].Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("stdin: %d, %v; want EOF", n, err)
	}
	proc[1].Close()
	proc[2].Close()
	rel.exited()
	<-rel.done
}

// TestRelayDrain: the process writes more than the window and exits
// while the host is not reading, and a background child keeps the pipe
// open. When the host reads again, long after the drain's deadline has
// passed, every byte the process wrote arrives, then the end of the
// stream (the background child does not hold it open).
func TestRelayDrain(t *testing.T) {
	rel, proc, out, errOut, _ := relayPair(t, false)
	const size = StreamWindow + 60<<10
	want := bytes.Repeat([]byte("x"), size)
	// The window goes to the host, one frame waits in the relay, the
	// rest fits in the pipe: the process's writes all return.
	if _, err := proc[1].Write(want); err != nil {
		t.Fatal(err)
	}
	background, err := unix.Dup(int(proc[1].Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(background)
	proc[1].Close()
	proc[2].Close()
	rel.exited()
	// The deadline has passed by the time the relay reads again.
	for _, o := range rel.outs {
		_ = o.f.SetReadDeadline(time.Unix(1, 0))
	}
	got, err := io.ReadAll(out)
	if err != nil || len(got) != size {
		t.Fatalf("the host got %d bytes of %d, %v", len(got), size, err)
	}
	if _, err := io.ReadAll(errOut); err != nil {
		t.Fatal(err)
	}
	<-rel.done
	// Control: the background child's write end is still open, but
	// nobody reads the pipe any more.
	if _, err := unix.Write(background, []byte("late")); err != unix.EPIPE {
		t.Fatalf("a write after the drain: %v, want EPIPE", err)
	}
}

// TestRelayReset: once the host stops reading an output, the process's
// writes to it fail with EPIPE, as with a pipe whose reader went away.
func TestRelayReset(t *testing.T) {
	rel, proc, out, _, _ := relayPair(t, false)
	out.Close()
	var err error
	for range 1000 {
		if _, err = unix.Write(int(proc[1].Fd()), make([]byte, 4096)); err != nil {
			break
		}
	}
	if !errors.Is(err, unix.EPIPE) {
		t.Fatalf("writes after the host's reset: %v, want EPIPE", err)
	}
	proc[2].Close()
	rel.exited()
	<-rel.done
}
