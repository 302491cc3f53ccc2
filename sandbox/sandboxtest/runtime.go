package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// Cmd is a command the builtins do not know, handed to a Handler.
type Cmd struct {
	Args   []string
	Env    []string
	Cwd    string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Files is the sandbox's in-memory file tree.
	Files sandbox.Files
}

// Handler runs a command the builtins do not know. It returns the exit
// status and true, or false to leave the command not found (127). It
// should return when ctx ends.
type Handler func(ctx context.Context, c *Cmd) (int, bool)

// Option configures a Runtime.
type Option func(*Runtime)

// WithHandler sets the handler of unknown commands.
func WithHandler(h Handler) Option { return func(r *Runtime) { r.handler = h } }

// Runtime is the fake sandbox.Runtime. FOR TESTS ONLY: it isolates
// nothing.
type Runtime struct {
	handler Handler
	created atomic.Int64

	budgetsMu sync.Mutex
	budgets   map[string]*Budget // live budgets by id (budget.go)
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New returns a fake runtime.
func New(opts ...Option) *Runtime {
	r := &Runtime{}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Created counts the sandboxes created so far.
func (r *Runtime) Created() int { return int(r.created.Load()) }

// Enforcement reports that nothing is enforced: the runtime is "fake",
// and its one protection, "fake", says so.
func (r *Runtime) Enforcement() sandbox.Enforcement {
	return sandbox.Enforcement{Runtime: "fake", User: sandbox.UID, Network: "fake", RootFS: "fake (in memory)", CallTree: "fake",
		Protections: []sandbox.Protection{{Name: "fake", Detail: "an in-memory fake for tests: nothing is isolated"}}}
}

// Create makes an in-memory sandbox after validating spec as a real
// runtime does.
func (r *Runtime) Create(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := spec.Limits.Validate(); err != nil {
		return nil, err
	}
	if err := sandbox.CheckHostname(spec.Hostname); err != nil {
		return nil, err
	}
	if err := sandbox.CheckEnv(spec.Env); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var bg *Budget
	if spec.Budget != "" {
		var err error
		if bg, err = r.acquireBudget(spec.Budget); err != nil {
			return nil, err
		}
	}
	r.created.Add(1)
	host := spec.Hostname
	if host == "" {
		host = "sandbox"
	}
	s := &Sandbox{r: r, id: fmt.Sprintf("sb-%016x", rand.Uint64()), fs: newMemFS(host), hostname: host,
		workdir: spec.Workdir, env: spec.Env, done: make(chan struct{}), budget: bg}
	if s.workdir == "" {
		s.workdir = sandbox.WorkspaceDir
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.enf = r.Enforcement()
	s.enf.Limits = spec.Limits
	s.enf.Network = string(spec.Network.Mode)
	if s.enf.Network == "" {
		s.enf.Network = string(sandbox.NetNone)
	}
	s.egress = spec.Network.Egress
	return s, nil
}

// Run creates a sandbox, runs proc in it and shuts it down.
func (r *Runtime) Run(ctx context.Context, spec *sandbox.Spec, proc *sandbox.Process) (*sandbox.Result, error) {
	sb, err := r.Create(ctx, spec)
	if err != nil {
		res := sandbox.SetupResult(err)
		return res, err
	}
	defer sb.Shutdown(context.Background())
	return sb.Exec(ctx, proc)
}

// Sandbox is a fake sandbox: an in-memory file tree and the builtins.
type Sandbox struct {
	r                 *Runtime
	id                string
	fs                *memFS
	hostname, workdir string
	env               []string
	budget            *Budget         // the budget it runs in, referenced until End; nil for none
	ctx               context.Context // ends at Shutdown
	cancel            context.CancelFunc

	mu     sync.Mutex
	enf    sandbox.Enforcement
	egress sandbox.Egress
	nextID uint64
	done   chan struct{}
	closed bool
}

var (
	_ sandbox.Sandbox             = (*Sandbox)(nil)
	_ sandbox.EnforcementReporter = (*Sandbox)(nil)
)

// ID names the sandbox.
func (s *Sandbox) ID() string { return s.id }

// Files gives the in-memory file operations.
func (s *Sandbox) Files() sandbox.Files { return s.fs }

// Done is closed at Shutdown (or End).
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Enforcement reports the (fake) enforcement of this sandbox.
func (s *Sandbox) Enforcement() sandbox.Enforcement {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enf
}

// Shutdown ends every process of the sandbox (their results are setup
// errors, as when a real sandbox's init goes) and closes Done.
func (s *Sandbox) Shutdown(ctx context.Context) error {
	s.End()
	return nil
}

// End ends the sandbox as if its init had died: what runs in it ends
// and Done is closed.
func (s *Sandbox) End() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.cancel()
	if s.egress != nil {
		_ = s.egress.Close()
	}
	s.budget.release()
	close(s.done)
}

// Exec runs proc to completion.
func (s *Sandbox) Exec(ctx context.Context, proc *sandbox.Process) (*sandbox.Result, error) {
	c, err := s.launch(proc)
	if err != nil {
		return c.setupFail(err)
	}
	c.run(ctx)
	return c.res, c.err
}

// Start runs proc in the background.
func (s *Sandbox) Start(ctx context.Context, proc *sandbox.Process) (sandbox.Proc, error) {
	c, err := s.launch(proc)
	if err != nil {
		_, err = c.setupFail(err)
		return nil, err
	}
	go c.run(context.Background())
	return c, nil
}

func (s *Sandbox) launch(p *sandbox.Process) (*call, error) {
	c := &call{s: s, p: p, start: time.Now(), done: make(chan struct{}), sig: make(chan syscall.Signal, 4)}
	s.mu.Lock()
	closed := s.closed
	s.nextID++
	c.id = s.nextID
	s.mu.Unlock()
	if closed {
		return c, sandbox.ErrClosed
	}
	if err := p.Validate(); err != nil {
		return c, err
	}
	if p.OutputLimit < 0 {
		return c, fmt.Errorf("%w: output limit must not be negative", sandbox.ErrInvalidSpec)
	}
	if p.Cwd != "" && !strings.HasPrefix(p.Cwd, "/") {
		return c, fmt.Errorf("%w: cwd %q is not absolute", sandbox.ErrInvalidSpec, p.Cwd)
	}
	return c, sandbox.CheckEnv(p.Env)
}

// call is one process; it is the sandbox.Proc of Start.
type call struct {
	s     *Sandbox
	p     *sandbox.Process
	id    uint64
	start time.Time
	sig   chan syscall.Signal
	done  chan struct{}
	res   *sandbox.Result
	err   error
	first atomic.Int64 // ns to the first output + 1
}

// ID names the process within its sandbox.
func (c *call) ID() uint64 { return c.id }

// Signal delivers sig; ErrExited once the process has ended.
func (c *call) Signal(sig syscall.Signal) error {
	select {
	case <-c.done:
		return sandbox.ErrExited
	default:
	}
	select {
	case c.sig <- sig:
	default:
	}
	return nil
}

// Wait waits for the process to end.
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

// ignored are the signals whose default action is not to end a process.
func ignored(sig syscall.Signal) bool {
	switch sig {
	case 0, syscall.SIGCHLD, syscall.SIGWINCH, syscall.SIGURG, syscall.SIGCONT:
		return true
	}
	return false
}

// outStream counts (and, with no writer, captures) one stream.
type outStream struct {
	c     *call
	mu    sync.Mutex
	w     io.Writer
	buf   bytes.Buffer
	limit int
	n     int64
	trunc bool
}

func (o *outStream) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o.c.first.CompareAndSwap(0, int64(time.Since(o.c.start))+1)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n += int64(len(b))
	if o.w != nil {
		if _, err := o.w.Write(b); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	keep := min(len(b), o.limit-o.buf.Len())
	if keep < len(b) {
		o.trunc = true
	}
	o.buf.Write(b[:max(keep, 0)])
	return len(b), nil
}

// run follows the call to its end and sets res and err.
func (c *call) run(ctx context.Context) {
	defer close(c.done)
	p := c.p
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	// The sandbox's end ends the call.
	unhook := context.AfterFunc(c.s.ctx, func() { stop(sandbox.ErrClosed) })
	defer unhook()
	// Signals, from Proc.Signal and from Process.Signals.
	var gotSig atomic.Int32
	sigDone := make(chan struct{})
	defer close(sigDone)
	fwd := p.Signals
	go func() {
		for {
			var sig syscall.Signal
			select {
			case sig = <-c.sig:
			case s, ok := <-fwd:
				if !ok {
					fwd = nil
					continue
				}
				sig, _ = s.(syscall.Signal)
			case <-sigDone:
				return
			}
			if !ignored(sig) && gotSig.CompareAndSwap(0, int32(sig)) {
				stop(errSignaled)
			}
		}
	}()
	limit := p.OutputLimit
	if limit == 0 {
		limit = 2_000_000
	}
	stdout := &outStream{c: c, w: c.p.Stdout, limit: limit}
	stderr := &outStream{c: c, w: c.p.Stderr, limit: limit}
	var stdin io.Reader = eofReader{}
	if c.p.Stdin != nil {
		pr, pw := io.Pipe()
		go func() {
			_, err := io.Copy(pw, c.p.Stdin)
			pw.CloseWithError(err)
		}()
		context.AfterFunc(runCtx, func() { pr.CloseWithError(errInterrupted) })
		stdin = pr
	}
	env := append(append([]string{"HOME=/home/user", "PATH=/usr/local/bin:/usr/bin:/bin", "USER=user"}, c.s.env...), c.p.Env...)
	cwd := c.p.Cwd
	if cwd == "" {
		cwd = c.s.workdir
	}
	sh := &shell{s: c.s, ctx: runCtx, env: env, vars: map[string]string{}}
	if n, err := c.s.fs.lookupLocked(cwd); err != nil || n.typ != "dir" {
		res := sandbox.SetupResult(fmt.Errorf("cwd: chdir %s: %s", cwd, msgNoEnt))
		res.Enforcement = c.enforcement()
		res.DurationMs = time.Since(c.start).Milliseconds()
		c.res = res
		return
	}
	sh.cwd = cwd
	code, errMsg := sh.top(c.p.Args, stdin, stdout, stderr)
	res := &sandbox.Result{Enforcement: c.enforcement(), TimeToFirstOutputMs: -1}
	cause := context.Cause(runCtx)
	switch {
	case runCtx.Err() == nil:
		res.ExitCode, res.ExitReason, res.Error = code, sandbox.ReasonExited, errMsg
	case errors.Is(cause, sandbox.ErrClosed):
		r, err := c.setupFail(&sandbox.SetupError{Stage: "sandbox", Err: errors.New("sandbox init exited")})
		r.Stdout, r.StdoutBytes, r.Stderr, r.StderrBytes = stdout.buf.String(), stdout.n, stderr.buf.String(), stderr.n
		c.res, c.err = r, err
		return
	case errors.Is(cause, errSignaled):
		sig := int(gotSig.Load())
		res.ExitCode, res.ExitReason, res.Signal = sandbox.ExitSignalBase+sig, sandbox.ReasonSignaled, sig
	case errors.Is(cause, context.DeadlineExceeded):
		res.ExitCode, res.ExitReason = sandbox.ExitTimeout, sandbox.ReasonTimeout
		res.Error = "timed out; the process tree was killed"
	default:
		res.ExitCode, res.ExitReason = sandbox.ExitSignalBase+int(syscall.SIGKILL), sandbox.ReasonKilled
		res.Error = "cancelled; the process tree was killed"
	}
	res.DurationMs = time.Since(c.start).Milliseconds()
	if f := c.first.Load(); f > 0 {
		res.TimeToFirstOutputMs = time.Duration(f - 1).Milliseconds()
	}
	res.Stdout, res.StdoutBytes = stdout.buf.String(), stdout.n
	res.Stderr, res.StderrBytes = stderr.buf.String(), stderr.n
	res.Truncated = stdout.trunc || stderr.trunc
	c.res = res
}

func (c *call) enforcement() *sandbox.Enforcement {
	e := c.s.Enforcement()
	return &e
}

var (
	errSignaled    = errors.New("signaled")
	errInterrupted = errors.New("interrupted")
)

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// lookupLocked finds p (made absolute) following symlinks.
func (f *memFS) lookupLocked(p string) (*node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lookup("stat", abs(p), true)
}
