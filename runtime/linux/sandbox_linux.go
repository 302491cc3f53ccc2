package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
	"github.com/moat-sandbox/moat/output"
	"github.com/moat-sandbox/moat/sandbox"
)

// drainTimeout bounds how long output is read after a process of a
// long-lived sandbox has exited while a background child still holds its
// pipes.
const drainTimeout = 100 * time.Millisecond

// linuxSandbox is the host's handle on one sandbox: its init process and
// the control socket to it.
type linuxSandbox struct {
	r           *Runtime
	id          string
	proc        *os.Process
	conn        *guest.Conn
	slot        *uidSlot
	cg          *sandboxCgroup
	oneShot     bool
	enforcement sandbox.Enforcement
	created     time.Time

	initErr *boundedBuffer // the init's own stderr, for diagnostics
	exited  chan struct{}  // closed when the init has exited
	readEnd chan struct{}  // closed when the init's socket is closed
	ready   chan error     // setup outcome, buffered

	mu      sync.Mutex
	waiters map[uint64]chan *msgWithFDs
	nextID  uint64
	closed  bool

	shutdown sync.Once
}

type msgWithFDs struct {
	m   *guest.Message
	fds []int
}

func newSandbox(r *Runtime, proc *os.Process, conn *guest.Conn, initErr *os.File, slot *uidSlot, cg *sandboxCgroup, oneShot bool) *linuxSandbox {
	sb := &linuxSandbox{
		r: r, id: "sb-" + itoa(slot.slot), proc: proc, conn: conn, slot: slot, cg: cg, oneShot: oneShot,
		initErr: &boundedBuffer{max: 8 << 10},
		exited:  make(chan struct{}),
		readEnd: make(chan struct{}),
		ready:   make(chan error, 1),
		waiters: map[uint64]chan *msgWithFDs{},
	}
	go func() {
		_, _ = io.Copy(sb.initErr, initErr)
		initErr.Close()
	}()
	return sb
}

// ID names the sandbox on this host.
func (s *linuxSandbox) ID() string { return s.id }

// start launches the goroutines that watch the init and its messages.
func (s *linuxSandbox) start() {
	go func() {
		_, _ = s.proc.Wait()
		close(s.exited)
	}()
	go s.readLoop()
}

// readLoop dispatches the init's messages: setup outcome to ready,
// process messages to their waiter. When the socket closes, every waiter
// is told.
func (s *linuxSandbox) readLoop() {
	defer close(s.readEnd)
	for {
		m, fds, err := s.conn.Recv()
		if err != nil {
			s.mu.Lock()
			s.closed = true
			for id, ch := range s.waiters {
				close(ch)
				delete(s.waiters, id)
			}
			s.mu.Unlock()
			select {
			case s.ready <- s.agentGone():
			default:
			}
			return
		}
		if m.ID == 0 {
			closeFDs(fds)
			switch m.Type {
			case guest.MsgReady:
				s.logPhases(m.Phases)
				s.ready <- nil
			case guest.MsgError:
				s.ready <- setupErr(m.Error)
			}
			continue
		}
		s.mu.Lock()
		ch := s.waiters[m.ID]
		s.mu.Unlock()
		if ch == nil {
			closeFDs(fds)
			continue
		}
		ch <- &msgWithFDs{m: m, fds: fds}
	}
}

// logPhases logs the init's setup timings at debug level, relative to
// when the host created the sandbox.
func (s *linuxSandbox) logPhases(phases []guest.Phase) {
	if !s.r.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := []any{"sandbox", s.id}
	for _, p := range phases {
		attrs = append(attrs, p.Name, time.UnixMicro(p.At).Sub(s.created).String())
	}
	s.r.log.Debug("sandbox ready", attrs...)
}

func setupErr(e *guest.ErrInfo) error {
	if e == nil {
		return &sandbox.SetupError{Stage: "setup", Err: errors.New("unknown error")}
	}
	return &sandbox.SetupError{Stage: e.Stage, Err: errors.New(e.Message)}
}

// sendFailure explains a failed send to the init: usually the init has
// exited because its setup failed, and its own report says why.
func (s *linuxSandbox) sendFailure(err error) error {
	<-s.readEnd
	select {
	case e := <-s.ready:
		if e != nil {
			return e
		}
	default:
	}
	if errors.Is(err, sandbox.ErrClosed) {
		return err
	}
	return &sandbox.SetupError{Stage: "send exec", Err: err}
}

// agentGone describes an init that went away without saying why.
func (s *linuxSandbox) agentGone() error {
	msg := "sandbox init exited"
	if tail := bytes.TrimSpace(s.initErr.Bytes()); len(tail) > 0 {
		msg += ": " + string(tail)
	}
	return &sandbox.SetupError{Stage: "init", Err: errors.New(msg)}
}

func (s *linuxSandbox) waitReady(ctx context.Context) error {
	select {
	case err := <-s.ready:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exec runs one process to completion.
func (s *linuxSandbox) Exec(ctx context.Context, p *sandbox.Process) (*sandbox.Result, error) {
	return s.exec(ctx, p, time.Now())
}

// register allocates a process id and its message channel.
func (s *linuxSandbox) register() (uint64, chan *msgWithFDs, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil, sandbox.ErrClosed
	}
	s.nextID++
	ch := make(chan *msgWithFDs, 4)
	s.waiters[s.nextID] = ch
	return s.nextID, ch, nil
}

func (s *linuxSandbox) unregister(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiters, id)
}

// stream is one output stream being copied from the sandbox.
type stream struct {
	r       *os.File
	w       io.Writer
	capture *output.Capture
	n       atomic.Int64
	done    chan struct{}
}

// exec runs p and builds its Result; start is when the call began.
func (s *linuxSandbox) exec(ctx context.Context, p *sandbox.Process, start time.Time) (*sandbox.Result, error) {
	res := &sandbox.Result{Enforcement: s.enforcement, TimeToFirstOutputMs: -1}
	setupFail := func(err error) (*sandbox.Result, error) {
		r := sandbox.SetupResult(err)
		r.Enforcement = s.enforcement
		r.DurationMs = time.Since(start).Milliseconds()
		return r, err
	}
	if len(p.Args) == 0 {
		return setupFail(fmt.Errorf("%w: no command", sandbox.ErrInvalidSpec))
	}
	env, err := mergeEnv(defaultEnv(), p.Env)
	if err != nil {
		return setupFail(err)
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = workspaceDir
	}
	if !filepath.IsAbs(cwd) {
		return setupFail(fmt.Errorf("%w: cwd %q is not absolute", sandbox.ErrInvalidSpec, cwd))
	}
	id, ch, err := s.register()
	if err != nil {
		return setupFail(s.sendFailure(err))
	}
	defer s.unregister(id)

	ex := &guest.Exec{Args: p.Args, Env: env, Cwd: filepath.Clean(cwd), TTY: p.TTY}
	if p.InitialSize != nil {
		ex.Rows, ex.Cols = p.InitialSize.Rows, p.InitialSize.Cols
	}
	var firstOut atomic.Int64 // ns since start of the first output byte
	mark := func() { firstOut.CompareAndSwap(0, int64(time.Since(start))) }
	var streams []*stream
	newStream := func(r *os.File, w io.Writer) *stream {
		st := &stream{r: r, w: w, done: make(chan struct{})}
		if w == nil {
			st.capture = output.NewCapture(p.OutputLimit)
			st.w = st.capture
		}
		streams = append(streams, st)
		return st
	}
	var stdinW *os.File
	if !p.TTY {
		stdinR, w, err := stdinFor(p.Stdin)
		if err != nil {
			return setupFail(err)
		}
		stdinW = w
		outR, outW, err := os.Pipe()
		if err != nil {
			stdinR.Close()
			return setupFail(err)
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			stdinR.Close()
			outR.Close()
			outW.Close()
			return setupFail(err)
		}
		newStream(outR, p.Stdout)
		newStream(errR, p.Stderr)
		err = s.conn.Send(&guest.Message{Type: guest.MsgExec, ID: id, Exec: ex},
			int(stdinR.Fd()), int(outW.Fd()), int(errW.Fd()))
		stdinR.Close()
		outW.Close()
		errW.Close()
		if err != nil {
			closeStreams(streams, stdinW)
			return setupFail(s.sendFailure(err))
		}
	} else if err := s.conn.Send(&guest.Message{Type: guest.MsgExec, ID: id, Exec: ex}); err != nil {
		return setupFail(s.sendFailure(err))
	}
	for _, st := range streams {
		go st.copy(mark)
	}
	if stdinW != nil {
		go copyStdin(stdinW, p.Stdin)
	}

	var (
		timedOut, cancelled bool
		grace               <-chan time.Time
		exit                *guest.Exit
		execErr             *guest.ErrInfo
		ptyMaster           *os.File
	)
	done := ctx.Done()
	readyCh := s.ready
loop:
	for {
		select {
		case mf, ok := <-ch:
			if !ok {
				break loop // the init is gone
			}
			switch mf.m.Type {
			case guest.MsgStarted:
				if p.TTY && len(mf.fds) == 1 {
					ptyMaster = s.attachPTY(mf.fds[0], p, newStream, mark)
					mf.fds = nil
				}
				closeFDs(mf.fds)
			case guest.MsgExit:
				closeFDs(mf.fds)
				exit = mf.m.Exit
				break loop
			case guest.MsgError:
				closeFDs(mf.fds)
				execErr = mf.m.Error
				break loop
			default:
				closeFDs(mf.fds)
			}
		case err := <-readyCh:
			readyCh = nil
			if err != nil {
				s.kill()
				closeStreams(streams, stdinW)
				return setupFail(err)
			}
		case sig := <-p.Signals:
			if ss, ok := sig.(syscall.Signal); ok {
				s.signal(id, int(ss))
			}
		case <-done:
			done = nil
			timedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
			cancelled = !timedOut
			s.signal(id, int(unix.SIGTERM))
			grace = time.After(s.r.killGrace)
		case <-grace:
			grace = nil
			s.signal(id, int(unix.SIGKILL))
			if s.oneShot {
				s.kill()
			}
		case <-s.exited:
			// The init died before reporting; the socket read fails next.
		}
	}
	s.r.log.Debug("process ended", "sandbox", s.id, "after", time.Since(s.created).String())
	if s.oneShot || exit == nil {
		// The init ends the sandbox after the process; every holder of
		// the pipes is then gone and the copies end at EOF.
		if exit != nil {
			<-s.exited
		} else {
			s.kill()
		}
	} else {
		for _, st := range streams {
			_ = st.r.SetReadDeadline(time.Now().Add(drainTimeout))
		}
	}
	for _, st := range streams {
		<-st.done
		st.r.Close()
	}
	if ptyMaster != nil {
		ptyMaster.Close()
	}
	if stdinW != nil {
		stdinW.Close()
	}

	s.r.log.Debug("output drained", "sandbox", s.id, "after", time.Since(s.created).String())
	res.DurationMs = time.Since(start).Milliseconds()
	if f := firstOut.Load(); f > 0 {
		res.TimeToFirstOutputMs = time.Duration(f).Milliseconds()
	}
	for i, st := range streams {
		n := st.n.Load()
		var text string
		if st.capture != nil {
			text = st.capture.String()
			res.Truncated = res.Truncated || st.capture.Truncated()
		}
		if i%2 == 0 {
			res.StdoutBytes, res.Stdout = res.StdoutBytes+n, res.Stdout+text
		} else {
			res.StderrBytes, res.Stderr = res.StderrBytes+n, res.Stderr+text
		}
	}
	switch {
	case timedOut:
		res.ExitCode, res.ExitReason = sandbox.ExitTimeout, sandbox.ReasonTimeout
		res.Error = "timed out; the process tree was killed"
	case cancelled:
		res.ExitCode, res.ExitReason = sandbox.ExitSignalBase+int(unix.SIGKILL), sandbox.ReasonKilled
		res.Error = "cancelled; the process tree was killed"
	case execErr != nil:
		res.ExitCode, res.Error = execErr.Code, execErr.Message
		res.ExitReason = sandbox.ReasonExited
		if execErr.Code == sandbox.ExitSetupFailed {
			res.ExitReason = sandbox.ReasonSetupError
			res.Error = execErr.Stage + ": " + execErr.Message
		}
	case exit == nil:
		err := s.agentGone()
		select {
		case e := <-s.ready:
			if e != nil {
				err = e
			}
		default:
		}
		return setupFail(err)
	case exit.Signal != 0:
		res.ExitCode, res.ExitReason, res.Signal = sandbox.ExitSignalBase+exit.Signal, sandbox.ReasonSignaled, exit.Signal
	default:
		res.ExitCode, res.ExitReason = exit.Code, sandbox.ReasonExited
	}
	if exit != nil {
		res.CPUUserMs = exit.UserUsec / 1000
		res.CPUSysMs = exit.SysUsec / 1000
		res.PeakMemoryBytes = exit.MaxRSS
	}
	return res, nil
}

// attachPTY takes the pty master the init sent and bridges it to the
// caller's streams; it returns the master, which the caller closes.
func (s *linuxSandbox) attachPTY(fd int, p *sandbox.Process, newStream func(*os.File, io.Writer) *stream, mark func()) *os.File {
	_ = unix.SetNonblock(fd, true)
	master := os.NewFile(uintptr(fd), "pty-master")
	// The output side reads a duplicate so that closing the input side
	// does not cut the output short.
	rfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return master
	}
	st := newStream(os.NewFile(uintptr(rfd), "pty-out"), p.Stdout)
	go st.copy(mark)
	if p.Stdin != nil {
		go func() { _, _ = io.Copy(master, p.Stdin) }()
	}
	if p.Resize != nil {
		go func() {
			for ws := range p.Resize {
				_ = pty.Setsize(master, &pty.Winsize{Rows: ws.Rows, Cols: ws.Cols})
			}
		}()
	}
	return master
}

// copy moves the stream to its writer, marking the first byte; a pty's
// EIO at hang-up is its EOF.
func (st *stream) copy(mark func()) {
	defer close(st.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := st.r.Read(buf)
		if n > 0 {
			mark()
			st.n.Add(int64(n))
			_, _ = st.w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func closeStreams(streams []*stream, stdinW *os.File) {
	for _, st := range streams {
		st.r.Close()
	}
	if stdinW != nil {
		stdinW.Close()
	}
}

// stdinFor returns the read end handed to the process and, when the caller
// supplies input, the write end to copy it into.
func stdinFor(in io.Reader) (*os.File, *os.File, error) {
	if in == nil {
		f, err := os.Open(os.DevNull)
		return f, nil, err
	}
	return os.Pipe()
}

func copyStdin(w *os.File, in io.Reader) {
	_, _ = io.Copy(w, in)
	w.Close()
}

// signal asks the init to signal process id's group.
func (s *linuxSandbox) signal(id uint64, sig int) {
	_ = s.conn.Send(&guest.Message{Type: guest.MsgSignal, ID: id, Signal: sig})
}

// kill ends the sandbox at once: SIGKILL to the init takes the whole pid
// namespace with it.
func (s *linuxSandbox) kill() {
	_ = s.proc.Signal(syscall.SIGKILL)
}

// Shutdown kills every process of the sandbox, waits for the init and
// releases the sandbox's host resources.
func (s *linuxSandbox) Shutdown(ctx context.Context) error {
	s.shutdown.Do(func() {
		s.conn.Close()
		s.kill()
		select {
		case <-s.exited:
		case <-ctx.Done():
		}
		s.cg.destroy()
		s.slot.release()
	})
	return nil
}

// boundedBuffer keeps the last max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if len(b.b) > b.max {
		b.b = append(b.b[:0], b.b[len(b.b)-b.max:]...)
	}
	return len(p), nil
}

func (b *boundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.b...)
}
