package linux

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
	"github.com/moat-sandbox/moat/output"
	"github.com/moat-sandbox/moat/sandbox"
)

// Limits on what one process request may carry.
const (
	maxSecrets     = 16
	maxSecretBytes = 64 << 10
)

// validSecretName accepts an environment-variable-like name: a letter or
// underscore, then letters, digits and underscores, at most 64 bytes.
func validSecretName(name string) bool {
	if name == "" || len(name) > 64 || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for _, c := range name {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// call is one process being run: its request, streams and outcome.
type call struct {
	s     *linuxSandbox
	p     *sandbox.Process
	start time.Time
	id    uint64
	ch    chan *msgWithFDs

	secrets  map[string][]byte
	streams  []*stream
	stdin    io.WriteCloser // the process's input: a pipe, or a framed stream
	pty      *os.File       // the pty master (descriptor passing only)
	firstOut atomic.Int64   // ns since start of the first output byte

	cc *callCgroup // the call's own cgroup (long-lived sandboxes), or nil

	timedOut, cancelled bool
	// killed: SIGKILL was sent through Signal; the call's whole tree (in
	// its cgroup, other sessions included) goes once the process ends.
	killed    atomic.Bool
	exit      *guest.Exit
	execErr   *guest.ErrInfo
	oomBefore uint64

	started   chan struct{} // closed when the agent says started, or failed
	startOnce sync.Once
	done      chan struct{} // closed when res and err are set
	res       *sandbox.Result
	err       error
}

// stream is one output stream being copied from the sandbox.
type stream struct {
	r io.ReadCloser
	// pipe is r when it is a pipe (descriptor passing), whose draining
	// after the exit is the host's (see drain); nil for a framed stream,
	// which the agent drains and ends.
	pipe    *os.File
	w       io.Writer // the caller's writer or capture, behind redaction
	capture *output.Capture
	spill   *spillFile
	n       atomic.Int64
	done    chan struct{}
	// owed, set once the process has exited (drain), is the count n
	// must reach before the read deadline may end the copy: n at the
	// exit, plus the most the pipe can have held then, plus one read in
	// flight. Until then a deadline that passes while bytes wait in the
	// pipe does not end it (see copy). 0 means not set.
	owed atomic.Int64
}

// exec runs p to completion and builds its Result; start is when the call
// began. Cancelling ctx (or its deadline) kills the process.
func (s *linuxSandbox) exec(ctx context.Context, p *sandbox.Process, start time.Time) (*sandbox.Result, error) {
	c, err := s.launch(p, start)
	if err != nil {
		return c.setupFail(err)
	}
	c.run(ctx)
	return c.res, c.err
}

// Start starts p in the background and returns once it runs or has failed
// to start (its Wait then reports why: 126, 127 or a setup error). ctx
// bounds only the start; the process then lives until it exits, is
// signalled, or reaches p.Timeout.
func (s *linuxSandbox) Start(ctx context.Context, p *sandbox.Process) (sandbox.Proc, error) {
	c, err := s.launch(p, time.Now())
	if err != nil {
		_, err = c.setupFail(err)
		return nil, err
	}
	go c.run(context.Background())
	select {
	case <-c.started:
		return c, nil
	case <-ctx.Done():
		s.signal(c.id, int(unix.SIGKILL))
		<-c.done
		return nil, ctx.Err()
	}
}

// launch validates p, registers it and hands it to the agent.
func (s *linuxSandbox) launch(p *sandbox.Process, start time.Time) (*call, error) {
	c := &call{s: s, p: p, start: start, started: make(chan struct{}), done: make(chan struct{})}
	if s.closing.Load() {
		return c, sandbox.ErrClosed
	}
	ex, err := c.request()
	if err != nil {
		return c, err
	}
	if c.id, c.ch, err = s.register(); err != nil {
		return c, s.sendFailure(err)
	}
	if !s.oneShot {
		c.oomBefore = s.cg.oomKills()
		if s.cg.callCgroupsOK() {
			if c.cc, err = s.cg.newCall(c.id); err != nil {
				s.unregister(c.id)
				return c, &sandbox.SetupError{Stage: "call cgroup", Err: err}
			}
			ex.CallCgroup = true
		}
	}
	err = c.send(ex)
	c.cc.closeFD()
	if err != nil {
		s.unregister(c.id)
		c.closeStreams()
		s.cg.releaseCall(c.cc)
		return c, err
	}
	return c, nil
}

// run follows a launched call to its end and sets c.res and c.err.
func (c *call) run(ctx context.Context) {
	defer close(c.done)
	defer c.markStarted()
	defer c.s.unregister(c.id)
	if c.p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.p.Timeout)
		defer cancel()
	}
	if err := c.wait(ctx); err != nil {
		c.closeStreams()
		c.res, c.err = c.setupFail(err)
		c.s.cg.releaseCall(c.cc)
		return
	}
	if c.timedOut || c.cancelled || c.killed.Load() {
		// The process may have ended at SIGTERM (or SIGKILL); what it left
		// running (descendants in other sessions too) goes with it.
		if err := c.cc.kill(c.s.proc.pid); err != nil {
			c.s.r.log.Warn("killing a call's tree", "sandbox", c.s.id, "err", err)
		}
	}
	c.drain()
	c.res, c.err = c.result()
	c.s.cg.releaseCall(c.cc)
}

func (c *call) markStarted() { c.startOnce.Do(func() { close(c.started) }) }

// ID names the process within its sandbox.
func (c *call) ID() uint64 { return c.id }

// Signal delivers sig to the process's group. SIGKILL ends the call's
// whole tree: once the process has died, whatever it left in the call's
// cgroup (setsid descendants included) is killed too.
func (c *call) Signal(sig syscall.Signal) error {
	select {
	case <-c.done:
		return sandbox.ErrExited
	default:
	}
	if sig == syscall.SIGKILL {
		c.killed.Store(true)
	}
	c.s.signal(c.id, int(sig))
	return nil
}

// Wait waits for the process to end and its output to drain.
func (c *call) Wait(ctx context.Context) (*sandbox.Result, error) {
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *call) setupFail(err error) (*sandbox.Result, error) {
	r := sandbox.SetupResult(err)
	r.DurationMs = time.Since(c.start).Milliseconds()
	return r, err
}

// request validates the process and builds the agent's exec message.
func (c *call) request() (*guest.Exec, error) {
	p := c.p
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.OutputLimit < 0 {
		return nil, fmt.Errorf("%w: output limit must not be negative", sandbox.ErrInvalidSpec)
	}
	base := defaultEnv()
	c.s.mu.Lock()
	netMode := c.s.netMode
	c.s.mu.Unlock()
	if netMode == sandbox.NetProxy {
		base = append(base, sandbox.ProxyEnv()...)
	}
	base, err := mergeEnv(base, c.s.env)
	if err != nil {
		return nil, err
	}
	env, err := mergeEnv(base, p.Env)
	if err != nil {
		return nil, err
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = c.s.workdir
	}
	if !filepath.IsAbs(cwd) {
		return nil, fmt.Errorf("%w: cwd %q is not absolute", sandbox.ErrInvalidSpec, cwd)
	}
	if p.SpillDir != "" {
		fd, err := openSpillDir(p.SpillDir)
		if err != nil {
			return nil, fmt.Errorf("%w: spill directory %s: %v", sandbox.ErrInvalidSpec, p.SpillDir, err)
		}
		unix.Close(fd)
	}
	ex := &guest.Exec{Args: p.Args, Cwd: filepath.Clean(cwd), TTY: p.TTY}
	if len(p.Secrets) > maxSecrets {
		return nil, fmt.Errorf("%w: %d secrets, at most %d", sandbox.ErrInvalidSpec, len(p.Secrets), maxSecrets)
	}
	c.secrets = map[string][]byte{}
	var secretEnv []string
	for i, sec := range p.Secrets {
		switch {
		case !validSecretName(sec.Name):
			return nil, fmt.Errorf("%w: secret name %q must be letters, digits and _ (not starting with a digit), at most 64", sandbox.ErrInvalidSpec, sec.Name)
		case len(sec.Value) == 0 || len(sec.Value) > maxSecretBytes:
			return nil, fmt.Errorf("%w: secret %s must hold 1 to %d bytes", sandbox.ErrInvalidSpec, sec.Name, maxSecretBytes)
		case c.secrets[sec.Name] != nil:
			return nil, fmt.Errorf("%w: secret %s given twice", sandbox.ErrInvalidSpec, sec.Name)
		}
		c.secrets[sec.Name] = sec.Value
		ex.Secrets = append(ex.Secrets, guest.SecretFile{Name: sec.Name, Value: sec.Value})
		secretEnv = append(secretEnv, fmt.Sprintf("%s_FILE=/dev/fd/%d", sec.Name, guest.SecretFD(i)))
	}
	// The secrets' paths go last so that --env cannot point them elsewhere.
	if ex.Env, err = mergeEnv(env, secretEnv); err != nil {
		return nil, err
	}
	if p.InitialSize != nil {
		ex.Rows, ex.Cols = p.InitialSize.Rows, p.InitialSize.Cols
	}
	return ex, nil
}

// newStream sets up the copy of one output stream to w, or into a capture
// (and spill file) when w is nil, with secrets redacted either way.
func (c *call) newStream(r io.ReadCloser, w io.Writer, name string) (*stream, error) {
	st := &stream{r: r, done: make(chan struct{})}
	st.pipe, _ = r.(*os.File)
	if w == nil {
		st.capture = output.NewCapture(c.p.OutputLimit)
		w = st.capture
		if c.p.SpillDir != "" {
			sp, err := newSpill(c.p.SpillDir, name)
			if err != nil {
				return nil, err
			}
			st.spill = sp
			w = io.MultiWriter(st.capture, sp)
		}
	}
	st.w = output.NewRedactor(w, c.secrets)
	c.streams = append(c.streams, st)
	return st, nil
}

// send creates the stdio pipes, or opens the framed streams, and hands
// the request to the agent.
func (c *call) send(ex *guest.Exec) error {
	msg := &guest.Message{Type: guest.MsgExec, ID: c.id, Exec: ex}
	var callFDs []int
	if c.cc != nil {
		callFDs = []int{c.cc.fd}
	}
	if c.s.r.framed {
		return c.sendFramed(ex, callFDs)
	}
	if c.p.TTY {
		if err := c.s.conn.Send(msg, callFDs...); err != nil {
			return c.s.sendFailure(err)
		}
		return nil
	}
	stdinR, stdinW, err := stdinFor(c.p.Stdin)
	if err != nil {
		return err
	}
	defer stdinR.Close()
	if stdinW != nil {
		c.stdin = stdinW
	}
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	for _, out := range []struct {
		w    io.Writer
		name string
	}{{c.p.Stdout, "stdout"}, {c.p.Stderr, "stderr"}} {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		childEnds = append(childEnds, w)
		if _, err := c.newStream(r, out.w, out.name); err != nil {
			r.Close()
			return err
		}
	}
	if err := c.s.conn.Send(msg, append([]int{int(stdinR.Fd()), int(childEnds[0].Fd()), int(childEnds[1].Fd())}, callFDs...)...); err != nil {
		return c.s.sendFailure(err)
	}
	for _, st := range c.streams {
		go st.copy(c.mark)
	}
	if c.stdin != nil {
		go copyStdin(c.stdin, c.p.Stdin)
	}
	return nil
}

func (c *call) mark() { c.firstOut.CompareAndSwap(0, int64(time.Since(c.start))) }

// wait follows the process until it exits or fails to start, applying
// timeouts, cancellation and forwarded signals. An error means the sandbox
// itself failed (setup error, init gone).
func (c *call) wait(ctx context.Context) error {
	s := c.s
	var grace <-chan time.Time
	done := ctx.Done()
	readyCh := s.ready
	for {
		select {
		case mf, ok := <-c.ch:
			if !ok {
				return nil // the init is gone; result() decides why
			}
			switch mf.m.Type {
			case guest.MsgStarted:
				if c.p.TTY && len(mf.fds) == 1 {
					c.attachPTY(mf.fds[0])
					mf.fds = nil
				}
				closeFDs(mf.fds)
				c.markStarted()
			case guest.MsgExit:
				closeFDs(mf.fds)
				c.exit = mf.m.Exit
				return nil
			case guest.MsgError:
				closeFDs(mf.fds)
				c.execErr = mf.m.Error
				return nil
			default:
				closeFDs(mf.fds)
			}
		case err := <-readyCh:
			readyCh = nil
			if err != nil {
				s.kill()
				return err
			}
		case sig := <-c.p.Signals:
			if ss, ok := sig.(syscall.Signal); ok {
				s.signal(c.id, int(ss))
			}
		case <-done:
			done = nil
			c.timedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
			c.cancelled = !c.timedOut
			s.signal(c.id, int(unix.SIGTERM))
			grace = time.After(s.r.killGrace)
		case <-grace:
			grace = nil
			s.signal(c.id, int(unix.SIGKILL))
			if s.oneShot {
				s.kill()
			} else if err := c.cc.kill(s.proc.pid); err != nil {
				s.r.log.Warn("killing a call's tree", "sandbox", s.id, "err", err)
			}
		}
	}
}

// testHookDrain, when set (by tests), runs in drain of a long-lived
// sandbox's call once the read deadlines are set.
var testHookDrain func(*call)

// drain waits for the output copies to end. A one-shot sandbox ends with
// its process, so every holder of the pipes is gone and the copies reach
// EOF; in a long-lived one a background child may keep them open, so
// reading stops once the pipe is empty drainTimeout after the exit. It
// never stops while the pipe still holds what the process wrote before
// it exited: a copy that is slow (a loaded host, a writer that takes its
// time) finishes reading first (see stream.copy), so every byte the
// process wrote is read and counted. Framed streams are drained by the
// agent, by the same rule, and end with FrameEnd (or with the
// connection).
func (c *call) drain() {
	s := c.s
	s.r.log.Debug("process ended", "sandbox", s.id, "after", time.Since(s.created).String())
	if c.execErr != nil {
		// The process never ran: the agent has no streams of it.
		for _, st := range c.streams {
			if st.pipe == nil {
				st.r.Close()
			}
		}
	}
	switch {
	case c.exit == nil && c.execErr == nil, s.oneShot && c.execErr != nil:
		s.kill()
		<-s.exited
	case s.oneShot:
		<-s.exited
	default:
		for _, st := range c.streams {
			if st.pipe != nil {
				st.exited()
				_ = st.pipe.SetReadDeadline(time.Now().Add(drainTimeout))
			}
		}
		if testHookDrain != nil {
			testHookDrain(c)
		}
	}
	for _, st := range c.streams {
		<-st.done
		st.r.Close()
	}
	if c.pty != nil {
		c.pty.Close()
	}
	if c.stdin != nil {
		c.stdin.Close()
	}
	s.r.log.Debug("output drained", "sandbox", s.id, "after", time.Since(s.created).String())
}

// result turns the call's outcome into a Result.
func (c *call) result() (*sandbox.Result, error) {
	s := c.s
	e := s.Enforcement()
	res := &sandbox.Result{Enforcement: &e, TimeToFirstOutputMs: -1}
	res.DurationMs = time.Since(c.start).Milliseconds()
	if f := c.firstOut.Load(); f > 0 {
		res.TimeToFirstOutputMs = time.Duration(f).Milliseconds()
	}
	c.collectOutput(res)
	u := c.accounting()
	// The OOM kills of the call: the memory cgroup's count (memory.events
	// on v2, memory.oom_control's oom_kill on v1) since the call began.
	// The memory cgroup is the sandbox's (call cgroups exist in the pids
	// hierarchy only), so concurrent calls of a long-lived sandbox share it.
	oom := u.oomError == nil && u.oomKills > c.oomBefore
	if oom {
		res.OOMKills = int64(u.oomKills - c.oomBefore)
	}
	switch {
	case c.timedOut:
		res.ExitCode, res.ExitReason = sandbox.ExitTimeout, sandbox.ReasonTimeout
		res.Error = "timed out; the process tree was killed"
	case c.cancelled:
		res.ExitCode, res.ExitReason = sandbox.ExitSignalBase+int(unix.SIGKILL), sandbox.ReasonKilled
		res.Error = "cancelled; the process tree was killed"
	case c.execErr != nil:
		res.ExitCode, res.Error = c.execErr.Code, c.execErr.Message
		res.ExitReason = sandbox.ReasonExited
		if c.execErr.Code == sandbox.ExitSetupFailed {
			res.ExitReason = sandbox.ReasonSetupError
			res.Error = c.execErr.Stage + ": " + c.execErr.Message
		}
	case oom && (c.exit == nil || c.exit.Signal == int(unix.SIGKILL)):
		res.ExitCode, res.ExitReason, res.Signal = sandbox.ExitSignalBase+int(unix.SIGKILL), sandbox.ReasonOOM, int(unix.SIGKILL)
		res.Error = fmt.Sprintf("out of memory: the kernel killed a process at the sandbox's %d-byte limit", s.enforcement.Limits.MemoryBytes)
	case c.exit == nil:
		err := s.agentGone()
		select {
		case e := <-s.ready:
			if e != nil {
				err = e
			}
		default:
		}
		// What the process wrote before the sandbox went is kept.
		r, err := c.setupFail(err)
		r.TimeToFirstOutputMs, r.Truncated = res.TimeToFirstOutputMs, res.Truncated
		r.Stdout, r.StdoutBytes, r.OutputFile = res.Stdout, res.StdoutBytes, res.OutputFile
		r.Stderr, r.StderrBytes, r.StderrFile = res.Stderr, res.StderrBytes, res.StderrFile
		return r, err
	case c.exit.Signal != 0:
		res.ExitCode, res.ExitReason, res.Signal = sandbox.ExitSignalBase+c.exit.Signal, sandbox.ReasonSignaled, c.exit.Signal
	default:
		res.ExitCode, res.ExitReason = c.exit.Code, sandbox.ReasonExited
	}
	if c.exit != nil {
		res.CPUUserMs = c.exit.UserUsec / 1000
		res.CPUSysMs = c.exit.SysUsec / 1000
		res.PeakMemoryBytes = c.exit.MaxRSS
	}
	// A one-shot sandbox is the call: its cgroup's accounting covers
	// every process of it, daemonised children included.
	if s.oneShot && u.statsErr == nil {
		res.CPUUserMs = u.userNs / 1e6
		res.CPUSysMs = u.sysNs / 1e6
		res.PeakMemoryBytes = u.peakMemory
	}
	return res, nil
}

// accounting reads what result needs of the sandbox's cgroup. A one-shot
// sandbox is the call, so its whole usage is the call's; in a long-lived
// one the call's CPU time and peak memory come from the agent's rusage of
// the process (the cgroup's figures cover every call and the init), and
// only the OOM-kill count is read: one cgroup file per call, not three.
func (c *call) accounting() usage {
	if c.s.oneShot {
		return c.s.cg.usage()
	}
	var u usage
	u.statsErr = errNotRead
	if c.s.cg == nil {
		u.oomError = errNoCgroup
		return u
	}
	u.oomKills, u.oomError = c.s.cg.oomKillCount()
	return u
}

// errNotRead marks usage figures a long-lived sandbox's call does not
// read (accounting).
var errNotRead = errors.New("cgroup usage not read for a call of a long-lived sandbox")

// collectOutput fills the result's stream fields.
func (c *call) collectOutput(res *sandbox.Result) {
	for i, st := range c.streams {
		n := st.n.Load()
		var text, spilled string
		if st.capture != nil {
			text = st.capture.String()
			trunc := st.capture.Truncated()
			res.Truncated = res.Truncated || trunc
			if st.spill != nil {
				spilled = st.spill.finish(trunc)
			}
		}
		if i%2 == 0 {
			res.StdoutBytes, res.Stdout, res.OutputFile = res.StdoutBytes+n, res.Stdout+text, spilled
		} else {
			res.StderrBytes, res.Stderr, res.StderrFile = res.StderrBytes+n, res.Stderr+text, spilled
		}
	}
}

func (c *call) closeStreams() {
	for _, st := range c.streams {
		st.r.Close()
		if st.spill != nil {
			st.spill.finish(false)
		}
	}
	if c.stdin != nil {
		c.stdin.Close()
	}
}

// attachPTY takes the pty master the init sent and bridges it to the
// caller's streams.
func (c *call) attachPTY(fd int) {
	_ = unix.SetNonblock(fd, true)
	master := os.NewFile(uintptr(fd), "pty-master")
	c.pty = master
	// The output side reads a duplicate so that closing the input side
	// does not cut the output short.
	rfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	st, err := c.newStream(os.NewFile(uintptr(rfd), "pty-out"), c.p.Stdout, "stdout")
	if err != nil {
		unix.Close(rfd)
		return
	}
	go st.copy(c.mark)
	if c.p.Stdin != nil {
		go func() { _, _ = io.Copy(master, c.p.Stdin) }()
	}
	if c.p.Resize != nil {
		go func() {
			// Through the file's own reference: drain may close it
			// meanwhile.
			rc, err := master.SyscallConn()
			if err != nil {
				return
			}
			for ws := range c.p.Resize {
				_ = rc.Control(func(fd uintptr) {
					_ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
				})
			}
		}()
	}
}

// copyBuf is the size of one read of an output stream.
const copyBuf = 32 << 10

// maxPipeFallback bounds what a stream whose capacity cannot be read (a
// pty) may still hold at the exit.
const maxPipeFallback = 1 << 20

// exited records that the process has exited (before drain sets the read
// deadline): every byte it wrote is now in the pipe, at most its capacity
// beyond what the copy has counted (and one read in flight).
func (st *stream) exited() {
	capacity := maxPipeFallback
	if rc, err := st.pipe.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if n, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0); err == nil && n > 0 {
				capacity = n
			}
		})
	}
	st.owed.Store(st.n.Load() + int64(capacity) + copyBuf)
}

// unread reports whether the copy must go on past the read deadline:
// bytes wait in the pipe and they may be ones the process wrote before
// it exited (the count has not reached owed). Bytes a background child
// writes after that are not waited for.
func (st *stream) unread() bool {
	owed := st.owed.Load()
	if owed == 0 || st.n.Load() >= owed {
		return false
	}
	rc, err := st.pipe.SyscallConn()
	if err != nil {
		return false
	}
	waiting := 0
	_ = rc.Control(func(fd uintptr) {
		waiting, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
	})
	return waiting > 0
}

// copy moves the stream to its writer, marking the first byte; a pty's
// EIO at hang-up is its EOF. After the exit, the read deadline drain sets
// ends the copy only once the pipe is empty (or all it can have held at
// the exit has been read): a deadline that passed while the copy was
// slow must not leave the process's last bytes unread and uncounted.
func (st *stream) copy(mark func()) {
	defer close(st.done)
	buf := make([]byte, copyBuf)
	for {
		n, err := st.r.Read(buf)
		if n > 0 {
			mark()
			st.n.Add(int64(n))
			_, _ = st.w.Write(buf[:n])
		}
		if err != nil {
			if st.pipe != nil && errors.Is(err, os.ErrDeadlineExceeded) && st.unread() {
				_ = st.pipe.SetReadDeadline(time.Now().Add(drainTimeout))
				continue
			}
			break
		}
	}
	if f, ok := st.w.(*output.Redactor); ok {
		_ = f.Flush()
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

func copyStdin(w io.WriteCloser, in io.Reader) {
	_, _ = io.Copy(w, in)
	w.Close()
}

// spillFile receives the whole of one captured stream.
type spillFile struct {
	dir    int // the spill directory, opened without following symlinks
	path   string
	f      *os.File
	failed bool
}

// openSpillDir opens the spill directory without following a symlink in
// any component: the directory may lie in a workspace a sandbox wrote, and
// moat (root) must not be sent to write elsewhere.
func openSpillDir(dir string) (int, error) {
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err == unix.ELOOP:
			return -1, errors.New("a component is a symlink (moat does not write through symlinks; give the real path)")
		case err == unix.ENOTDIR:
			return -1, errors.New("not a directory")
		}
		return fd, err
	}
}

// newSpill creates a new file of a random name in dir (O_EXCL|O_NOFOLLOW,
// through the directory's descriptor).
func newSpill(dir, name string) (*spillFile, error) {
	dfd, err := openSpillDir(dir)
	if err != nil {
		return nil, fmt.Errorf("spill file: %s: %w", dir, err)
	}
	var rnd [8]byte
	for range 100 {
		if _, err := rand.Read(rnd[:]); err != nil {
			break
		}
		base := fmt.Sprintf("moat-%x.%s", rnd, name)
		fd, err := unix.Openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			unix.Close(dfd)
			return nil, fmt.Errorf("spill file: %w", err)
		}
		p := filepath.Join(dir, base)
		return &spillFile{dir: dfd, path: p, f: os.NewFile(uintptr(fd), p)}, nil
	}
	unix.Close(dfd)
	return nil, errors.New("spill file: no free name")
}

// Write never fails the stream: a spill that cannot be written is dropped.
func (sp *spillFile) Write(p []byte) (int, error) {
	if !sp.failed {
		if _, err := sp.f.Write(p); err != nil {
			sp.failed = true
		}
	}
	return len(p), nil
}

// finish closes the file and returns its path when it holds a stream that
// was truncated in the capture; otherwise (or if writing failed) it is
// removed, by name in the directory it was made in.
func (sp *spillFile) finish(keep bool) string {
	if sp.f == nil {
		return ""
	}
	err := sp.f.Close()
	sp.f = nil
	defer unix.Close(sp.dir)
	if keep && !sp.failed && err == nil {
		return sp.path
	}
	_ = unix.Unlinkat(sp.dir, filepath.Base(sp.path), 0)
	return ""
}
