package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
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
	proc        *child
	conn        *guest.Conn
	slot        *uidSlot
	cg          *sandboxCgroup
	budget      *linuxBudget // the budget the sandbox runs in, referenced until Shutdown; nil for none
	oneShot     bool
	enforcement sandbox.Enforcement
	created     time.Time
	netMode     sandbox.NetMode
	egress      sandbox.Egress // proxy mode: closed at Shutdown
	scratch     *os.File       // the scratch tmpfs (upper layer), detached or the sandbox's
	leases      []*layerLease  // the spec's root layers and the runtime's (/etc, locale, base), until the init is gone
	limits      sandbox.Limits // in force
	root        *sandbox.RootFS
	env         []string     // Spec.Env
	workdir     string       // Spec.Workdir or the workspace
	capture     sync.RWMutex // file operations hold it shared, ExportDiff exclusively
	diff        diffState    // ExportDiff's incremental state, under capture

	initErr *boundedBuffer // the init's own stderr until it is ready (then initStderrTail), for diagnostics
	errDone chan struct{}  // closed when initErr has all of it (the pipe is closed)
	exited  chan struct{}  // closed when the init has exited
	readEnd chan struct{}  // closed when the init's socket is closed
	ready   chan error     // setup outcome, buffered
	// setup is the setup's outcome for CreateEarly's readiness, which
	// the first call's wait may race for the one value of ready.
	setup setupOutcome

	mu       sync.Mutex
	waiters  map[uint64]chan *msgWithFDs
	nextID   uint64
	closed   bool
	restrict *guest.RestrictReport // from the init's ready message

	shutdown sync.Once
	closing  atomic.Bool
}

type msgWithFDs struct {
	m   *guest.Message
	fds []int
}

func newSandbox(r *Runtime, proc *child, conn *guest.Conn, initErr *os.File, slot *uidSlot, cg *sandboxCgroup, oneShot bool) *linuxSandbox {
	sb := &linuxSandbox{
		r: r, id: newID(), proc: proc, conn: conn, slot: slot, cg: cg, oneShot: oneShot,
		exited:  proc.exited,
		initErr: &boundedBuffer{max: 8 << 10},
		readEnd: make(chan struct{}),
		ready:   make(chan error, 1),
		setup:   setupOutcome{done: make(chan struct{})},
		waiters: map[uint64]chan *msgWithFDs{},
		errDone: make(chan struct{}),
	}
	go func() {
		_, _ = io.Copy(sb.initErr, initErr)
		initErr.Close()
		close(sb.errDone)
	}()
	return sb
}

// newID returns a random sandbox id, unique on this host in practice
// (uid slots, which are reused, are not ids).
func newID() string {
	return fmt.Sprintf("sb-%016x", rand.Uint64())
}

// ID names the sandbox on this host.
func (s *linuxSandbox) ID() string { return s.id }

// Enforcement reports the protections in effect for this sandbox. The
// restrictions' outcome is known once the init is ready.
func (s *linuxSandbox) Enforcement() sandbox.Enforcement {
	s.mu.Lock()
	e := s.enforcement
	e.Protections = slices.Clone(e.Protections)
	if r := s.restrict; r != nil {
		e.Restricted = r.Applied
		e.RestrictSkipped = append([]string(nil), r.Skipped...)
	}
	s.mu.Unlock()
	return e
}

// Done is closed once the init has exited.
func (s *linuxSandbox) Done() <-chan struct{} { return s.exited }

// start launches the goroutines that watch the init and its messages.
func (s *linuxSandbox) start() {
	go s.readLoop()
}

// readLoop dispatches the init's messages: setup outcome to ready,
// process messages to their waiter; Recv delivers the streams' frames on
// the way. Nothing here waits for a consumer, so a slow one never holds
// up another call. When the socket closes, every waiter is told.
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
			gone := s.agentGone()
			s.setup.set(gone)
			select {
			case s.ready <- gone:
			default:
			}
			return
		}
		if m.ID == 0 {
			closeFDs(fds)
			switch m.Type {
			case guest.MsgReady:
				s.logPhases(m.Phases)
				s.mu.Lock()
				s.restrict = m.Restrict
				s.mu.Unlock()
				s.setReady(nil)
			case guest.MsgError:
				s.setReady(setupErr(m.Error))
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
		// A call gets at most two messages (started, then exit or
		// error; file_done): its buffer never fills unless the agent
		// misbehaves, and then the surplus is dropped rather than stall
		// this loop, which also delivers every stream's frames (in
		// Recv).
		select {
		case ch <- &msgWithFDs{m: m, fds: fds}:
		default:
			closeFDs(fds)
		}
	}
}

// setReady reports the setup's outcome; the init says it once, and a
// repeat (a misbehaving agent) is dropped.
func (s *linuxSandbox) setReady(err error) {
	s.setup.set(err)
	select {
	case s.ready <- err:
	default:
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
	// Only a peer that went away explains itself; anything else (a
	// message too large to send, say) is the caller's to report now.
	if !errors.Is(err, sandbox.ErrClosed) && !errors.Is(err, unix.EPIPE) && !errors.Is(err, unix.ECONNRESET) && !errors.Is(err, os.ErrClosed) {
		if errors.Is(err, guest.ErrTooLarge) || errors.Is(err, unix.EMSGSIZE) {
			// The request itself is too big to hand to the agent: the
			// caller's input, not a fault of the sandbox.
			return fmt.Errorf("%w: %w: argv, environment and secrets do not fit in one message to the sandbox (%v)", sandbox.ErrInvalidSpec, sandbox.ErrTooBig, err)
		}
		return &sandbox.SetupError{Stage: "send", Err: err}
	}
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
	// The init's last words may still be in the pipe; a descendant that
	// kept the init's stderr could hold it open, so the wait is bounded.
	select {
	case <-s.errDone:
	case <-time.After(200 * time.Millisecond):
	}
	select {
	case <-s.exited:
	case <-time.After(200 * time.Millisecond):
	}
	if how := s.proc.describe(); how != "" {
		msg += " (" + how + ")"
	}
	words := s.initErr.Bytes()
	if !s.closing.Load() {
		// What it said after it was ready, if it was.
		words = append(words, initStderrTail(s.scratch, int64(s.initErr.max))...)
	}
	if tail := bytes.TrimSpace(words); len(tail) > 0 {
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

// signal asks the init to signal process id's group.
func (s *linuxSandbox) signal(id uint64, sig int) {
	_ = s.conn.Send(&guest.Message{Type: guest.MsgSignal, ID: id, Signal: sig})
}

// kill ends the sandbox at once: SIGKILL to the init takes the whole pid
// namespace with it.
func (s *linuxSandbox) kill() {
	s.proc.kill()
}

// Shutdown kills every process of the sandbox, waits for the init and
// releases the sandbox's host resources.
func (s *linuxSandbox) Shutdown(ctx context.Context) error {
	s.shutdown.Do(func() {
		s.closing.Store(true)
		s.conn.Close()
		s.kill()
		select {
		case <-s.exited:
		case <-ctx.Done():
		}
		s.mu.Lock()
		egress := s.egress
		s.mu.Unlock()
		if egress != nil {
			_ = egress.Close()
		}
		t0 := time.Now()
		s.cg.destroy()
		s.budget.release() // its cgroup is out of the budget's way
		if s.scratch != nil {
			s.scratch.Close()
		}
		// An unused layer is removed: never under a live overlay.
		release := func() { releaseLayers(s.leases) }
		select {
		case <-s.exited:
			release()
		default:
			go func() { <-s.exited; release() }()
		}
		s.r.log.Debug("sandbox removed", "sandbox", s.id, "cgroup_removal", time.Since(t0).String())
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
