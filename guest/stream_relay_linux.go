package guest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"sync/atomic"

	"golang.org/x/sys/unix"
)

// drainTimeout bounds how long a process's output is still relayed after
// it has exited while a background child keeps its pipes (or the pty)
// open. It never cuts short what the process itself wrote (see
// outRelay.run).
const drainTimeout = 100 * time.Millisecond

// drainFallback bounds what an output whose queue cannot be measured may
// still hold at the exit.
const drainFallback = 1 << 20

// procRelay carries the stdio of one process started with Exec.Streams
// between its pipes (or its pty) and the host's streams.
type procRelay struct {
	outs  []*outRelay
	in    *inRelay   // nil when the host sends no input
	pty   *os.File   // the pty master, or nil
	child []*os.File // the process's ends, closed once it is started
	done  chan struct{}
}

// outRelay copies one output of the process to the host.
type outRelay struct {
	f    *os.File // the agent's end: a pipe's read end, or a pty master
	w    *StreamWriter
	n    atomic.Int64 // bytes read from f
	owed atomic.Int64 // see exited; 0 until the process has exited
	done chan struct{}
}

// inRelay copies the host's input to the process.
type inRelay struct {
	r      *StreamReader
	f      *os.File // a pipe's write end, or the pty master
	closeF bool     // f is the relay's own (a pipe), closed at the end
}

// newPipeRelay makes the pipes of a process's stdin, stdout and stderr
// and opens their streams. Without stdin the process reads an empty
// input.
func newPipeRelay(mux *Mux, id uint64, stdin bool) (rel *procRelay, err error) {
	rel = &procRelay{done: make(chan struct{})}
	defer func() {
		if err != nil {
			rel.abort()
		}
	}()
	inR, inW, err := os.Pipe()
	if err != nil {
		return rel, fmt.Errorf("stdin pipe: %w", err)
	}
	rel.child = append(rel.child, inR)
	if stdin {
		r, err := mux.Reader(id, StreamStdin)
		if err != nil {
			inW.Close()
			return rel, err
		}
		rel.in = &inRelay{r: r, f: inW, closeF: true}
	} else {
		inW.Close()
	}
	for _, s := range []Stream{StreamStdout, StreamStderr} {
		r, w, err := os.Pipe()
		if err != nil {
			return rel, fmt.Errorf("%v pipe: %w", s, err)
		}
		rel.child = append(rel.child, w)
		sw, err := mux.Writer(id, s)
		if err != nil {
			r.Close()
			return rel, err
		}
		rel.outs = append(rel.outs, &outRelay{f: r, w: sw, done: make(chan struct{})})
	}
	return rel, nil
}

// newPTYRelay relays a pty's master: its output on StreamPTY and, with
// stdin, the host's input to it. The relay owns master.
func newPTYRelay(mux *Mux, id uint64, master *os.File, stdin bool) (rel *procRelay, err error) {
	rel = &procRelay{pty: master, done: make(chan struct{})}
	defer func() {
		if err != nil {
			rel.abort()
		}
	}()
	// The output side reads a duplicate, in the poller (non-blocking),
	// so that its read deadline concerns it alone.
	fd, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return rel, fmt.Errorf("pty: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return rel, fmt.Errorf("pty: %w", err)
	}
	out := os.NewFile(uintptr(fd), "pty-out")
	sw, err := mux.Writer(id, StreamPTY)
	if err != nil {
		out.Close()
		return rel, err
	}
	rel.outs = append(rel.outs, &outRelay{f: out, w: sw, done: make(chan struct{})})
	if stdin {
		r, err := mux.Reader(id, StreamPTY)
		if err != nil {
			return rel, err
		}
		rel.in = &inRelay{r: r, f: master}
	}
	return rel, nil
}

// childFDs returns the descriptors the process gets as 0, 1 and 2, in
// blocking mode (the agent's ends stay in the poller).
func (p *procRelay) childFDs() []uintptr {
	fds := make([]uintptr, len(p.child))
	for i, f := range p.child {
		fds[i] = f.Fd()
	}
	return fds
}

// closeChild closes the process's ends of the pipes, once it holds them.
func (p *procRelay) closeChild() {
	for _, f := range p.child {
		f.Close()
	}
	p.child = nil
}

// start begins relaying; done closes once every output has ended.
func (p *procRelay) start() {
	p.closeChild()
	for _, o := range p.outs {
		go o.run()
	}
	if p.in != nil {
		go p.in.run()
	}
	go func() {
		for _, o := range p.outs {
			<-o.done
		}
		if p.pty != nil {
			p.pty.Close()
		}
		close(p.done)
	}()
}

// abort undoes a relay whose process did not start: its streams end at
// once.
func (p *procRelay) abort() {
	p.closeChild()
	for _, o := range p.outs {
		o.f.Close()
		o.w.Close()
	}
	if p.in != nil {
		p.in.stop()
	}
	if p.pty != nil {
		p.pty.Close()
	}
	close(p.done)
}

// exited is called once the process has been reaped: its input stops,
// and its outputs are drained (see outRelay.run).
func (p *procRelay) exited() {
	if p.in != nil {
		p.in.stop()
	}
	for _, o := range p.outs {
		o.exited()
	}
}

// resize sets the pty's size.
func (p *procRelay) resize(ws *WinSize) error {
	if p.pty == nil || ws == nil {
		return errors.New("no terminal")
	}
	// Through the file's own reference: the relay may close it meanwhile.
	rc, err := p.pty.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
	}); err != nil {
		return err
	}
	return ierr
}

// run copies the host's input to the process until either ends.
func (i *inRelay) run() {
	_, _ = io.Copy(i.f, i.r)
	i.stop()
}

// stop ends the input: the host is told to stop sending, and the process
// reads EOF (a pipe's write end is closed; a pty stays open).
func (i *inRelay) stop() {
	i.r.Close()
	if i.closeF {
		i.f.Close()
	}
}

// exited records that the process has exited: every byte it wrote is now
// queued in f, beyond what has been read. From drainTimeout on, the relay
// stops reading once the queue is empty, unless what the process wrote is
// not all read yet.
func (o *outRelay) exited() {
	waiting := drainFallback
	if rc, err := o.f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if n, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ); err == nil { // FIONREAD
				waiting = n
			}
		})
	}
	// Plus one read in flight, counted only once it is sent.
	o.owed.Store(o.n.Load() + int64(waiting) + MaxFrameData)
	_ = o.f.SetReadDeadline(time.Now().Add(drainTimeout))
}

// unread reports whether reading must go on past the deadline: bytes wait
// and they may be ones the process wrote before it exited.
func (o *outRelay) unread() bool {
	owed := o.owed.Load()
	if owed == 0 || o.n.Load() >= owed {
		return false
	}
	rc, err := o.f.SyscallConn()
	if err != nil {
		return false
	}
	waiting := 0
	_ = rc.Control(func(fd uintptr) {
		waiting, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ)
	})
	return waiting > 0
}

// run relays the output until EOF (a pty's EIO at hang-up is its EOF),
// the drain's end, or the host's reset, then ends the stream. Closing f
// gives a writer that remains EPIPE, as when the host closed its end of a
// pipe.
func (o *outRelay) run() {
	defer close(o.done)
	defer o.w.Close()
	defer o.f.Close()
	buf := make([]byte, MaxFrameData)
	for {
		n, err := o.f.Read(buf)
		if n > 0 {
			if _, werr := o.w.Write(buf[:n]); werr != nil {
				return
			}
			o.n.Add(int64(n))
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && o.unread() {
				_ = o.f.SetReadDeadline(time.Now().Add(drainTimeout))
				continue
			}
			return
		}
	}
}
