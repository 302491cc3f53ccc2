package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/store"
)

// Durability on a full disk.
//
// A call is answered as done only once its records (the call's row in the
// store, its event on the audit tape) are on disk. When the data disk is
// full:
//
//   - new work is refused before anything runs (gate): 507
//     insufficient_storage naming the full path, or 503 unavailable when
//     the store or tape cannot write for another reason;
//   - a call that was already running when the disk filled, and whose end
//     cannot be written, is answered 507 (or 503) with its result attached
//     (api.Error.Result): it ran, but its record is not durable. The
//     record is kept in memory, in the backlog, and written as soon as
//     space returns;
//   - reads keep working (their audit events join the backlog);
//   - the backlog is retried with a bounded back-off, and once it is empty
//     and the disk has room again, new calls are taken: the daemon
//     recovers without a restart.
//
// What the backlog holds when the daemon stops is logged: those calls
// were never answered as done, and the next start marks them lost.

// minFreeBytes is the free space of the data disk below which new calls
// are refused: room for the records of the calls already admitted.
const minFreeBytes = 1 << 20

// maxBacklogEvents bounds the audit events of reads and refusals kept in
// memory while the disk is full; the ends of calls are always kept (new
// calls are refused meanwhile, so they are bounded by the calls in flight).
const maxBacklogEvents = 10000

// Bounds of the back-off between two attempts to write the backlog.
const (
	retryFirst = 20 * time.Millisecond
	retryMax   = time.Second
)

// pendingWrite is a record not yet on disk: a store write, or an audit
// event, or both (store first).
type pendingWrite struct {
	store func(context.Context) error
	ev    *audit.Event
	// call says the record ends a call or a sandbox: it is never
	// dropped, however long the backlog. what names it in logs.
	call bool
	what string
}

// backlog is the records waiting for space, oldest first.
type backlog struct {
	mu       sync.Mutex
	items    []pendingWrite
	events   int   // items that are audit events only
	err      error // why the last write failed
	retrying bool
	dropped  int64
}

// retryable says whether err is the disk's (full, or failing) rather than
// the record's: only those are kept for another attempt.
func retryable(err error) bool {
	var pe *fs.PathError
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		errors.Is(err, store.ErrUnavailable) || errors.Is(err, audit.ErrBroken) || errors.As(err, &pe)
}

// keep puts p in the backlog after it failed with err, and starts the
// retrier. A failure that another attempt cannot fix is logged and
// counted instead. It reports whether p was kept.
func (s *Service) keep(p pendingWrite, err error) bool {
	if !retryable(err) {
		if p.ev != nil {
			s.metrics.auditErrors.Inc()
		}
		s.log.Error("a record could not be written", "what", p.what, "err", err)
		return false
	}
	b := &s.durable
	b.mu.Lock()
	defer b.mu.Unlock()
	if !p.call {
		if b.events >= maxBacklogEvents {
			b.dropped++
			s.metrics.auditErrors.Inc()
			s.log.Error("audit backlog full: event dropped", "what", p.what, "err", err)
			return false
		}
		b.events++
	}
	if len(b.items) == 0 {
		s.log.Error("the data disk cannot take records: keeping them in memory and refusing new calls until it can",
			"err", err)
	}
	b.items = append(b.items, p)
	b.err = err
	if !b.retrying {
		b.retrying = true
		go s.retryBacklog()
	}
	return true
}

// retryBacklog writes the backlog in order until it is empty, backing off
// between attempts while the disk refuses. It ends when the backlog is
// empty, or when the store or tape is closed (the daemon stops).
func (s *Service) retryBacklog() {
	b := &s.durable
	wait := retryFirst
	for {
		t := time.NewTimer(wait)
		<-t.C
		wait = min(2*wait, retryMax)
		done, err := s.writeBacklog()
		if done {
			return
		}
		if errors.Is(err, store.ErrClosed) || errors.Is(err, audit.ErrClosed) {
			b.mu.Lock()
			b.retrying = false
			b.mu.Unlock()
			return
		}
	}
}

// writeBacklog tries to write the backlog, oldest first, and stops at the
// first failure. done says the backlog is empty (and the retrier, if
// running, must end: writeBacklog has cleared its flag).
func (s *Service) writeBacklog() (done bool, err error) {
	b := &s.durable
	for {
		b.mu.Lock()
		if len(b.items) == 0 {
			b.retrying = false
			b.err = nil
			b.mu.Unlock()
			return true, nil
		}
		p := b.items[0]
		b.mu.Unlock()
		if p.store != nil {
			if err := p.store(context.Background()); err != nil {
				if !retryable(err) {
					s.log.Error("a record could not be written", "what", p.what, "err", err)
					p.store = nil
				} else {
					b.mu.Lock()
					b.err = err
					b.mu.Unlock()
					return false, err
				}
			}
		}
		if p.ev != nil {
			if err := s.appendEvent(*p.ev); err != nil && retryable(err) {
				b.mu.Lock()
				b.err = err
				b.items[0].store = nil // written
				b.mu.Unlock()
				return false, err
			} else if err != nil {
				s.metrics.auditErrors.Inc()
				s.log.Error("a record could not be written", "what", p.what, "err", err)
			}
		}
		b.mu.Lock()
		b.items = b.items[1:]
		if !p.call {
			b.events--
		}
		left := len(b.items)
		b.mu.Unlock()
		if left == 0 {
			s.log.Info("the data disk takes records again: backlog written")
		}
	}
}

// flushBacklog makes a last attempt at the backlog when the service stops,
// and logs what stays unwritten.
func (s *Service) flushBacklog() {
	b := &s.durable
	b.mu.Lock()
	n := len(b.items)
	b.mu.Unlock()
	if n == 0 {
		return
	}
	if _, err := s.writeBacklog(); err != nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range b.items {
			s.log.Error("record not written: the data disk stayed full", "what", p.what, "err", err)
		}
	}
}

// writable returns nil when new work may start: nothing waits in the
// backlog, and the file systems of the store and the tape have
// minFreeBytes free. Otherwise it returns the 507 (full disk) or 503
// (another failure) that refuses the call before it runs.
func (s *Service) writable() error {
	b := &s.durable
	b.mu.Lock()
	n, err := len(b.items), b.err
	b.mu.Unlock()
	if n > 0 {
		ae := apiError(err).(*api.Error)
		what := "the store or the audit tape cannot write"
		if ae.Code == api.CodeStorage {
			what = "the data disk is full"
		} else if ae.Code != api.CodeUnavailable {
			ae = &api.Error{Code: api.CodeUnavailable}
		}
		return &api.Error{Code: ae.Code, Message: fmt.Sprintf("%s (%v): %d records wait to be written; new calls are refused until they are",
			what, err, n)}
	}
	for _, dir := range []string{s.cfg.Store.Dir(), s.cfg.Tape.Dir()} {
		if free, ok := freeBytes(dir); ok && free < minFreeBytes {
			return api.Errorf(api.CodeStorage, "%s: %v (%d bytes free, below the %d a call's records need): new calls are refused until space returns",
				dir, syscall.ENOSPC, free, minFreeBytes)
		}
	}
	return nil
}

// freeBytes is the space left on the file system of dir to the daemon
// (root may use the blocks reserved to root).
func freeBytes(dir string) (uint64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	free := st.Bavail
	if os.Geteuid() == 0 {
		free = st.Bfree
	}
	return free * uint64(st.Bsize), true
}

// recordEnd writes the end of call id to the store and its event to the
// tape, the two at once (each joins its own group commit, and the two
// fsyncs overlap), and returns nil once both are on disk. When the disk
// refuses, what was not written is kept in the backlog and the error says
// why: the caller must not answer the call as done. A failure that another
// attempt cannot fix (no such call, an event too large) is logged and
// counted, as before, and does not fail the call.
//
// redo, when not nil, writes the call's start, which the disk refused
// while the call ran (callStart): it is written first, once, and kept in
// the backlog with the end until it is.
func (s *Service) recordEnd(id string, at time.Time, code int, reason string, result json.RawMessage, out *store.CallOutput, ev audit.Event,
	redo func(context.Context) error) error {
	if ev.Time.IsZero() {
		ev.Time = at.UTC()
	}
	finish := func(ctx context.Context) error {
		if redo != nil {
			// Never concurrent: recordEnd, then the backlog's retrier.
			if err := redo(ctx); err != nil {
				return err
			}
			redo = nil
		}
		defer s.slow("store finish call", time.Now())
		return s.cfg.Store.FinishCallOutput(ctx, id, at, code, reason, result, out)
	}
	var serr error
	var wg sync.WaitGroup
	wg.Go(func() { serr = finish(context.Background()) })
	aerr := s.appendEvent(ev)
	wg.Wait()
	p := pendingWrite{call: true, what: "end of call " + id}
	if serr != nil && retryable(serr) {
		p.store = finish
	} else if serr != nil {
		s.log.Error("recording the end of a call", "call", id, "err", serr)
	}
	if aerr != nil && retryable(aerr) {
		p.ev = &ev
	} else if aerr != nil {
		s.metrics.auditErrors.Inc()
		s.log.Error("audit append failed", "kind", ev.Kind, "sandbox", ev.Sandbox, "err", aerr)
	}
	if p.store == nil && p.ev == nil {
		return nil
	}
	err := errors.Join(serr, aerr)
	if p.store == nil {
		err = aerr
	} else if p.ev == nil {
		err = serr
	}
	s.keep(p, err)
	return err
}

// recordNow appends an event that must be on disk before the call is
// answered; like recordEnd, a refused event is kept in the backlog and
// the error returned.
func (s *Service) recordNow(ev audit.Event) error {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	err := s.appendEvent(ev)
	if err == nil {
		return nil
	}
	if !retryable(err) {
		s.metrics.auditErrors.Inc()
		s.log.Error("audit append failed", "kind", ev.Kind, "sandbox", ev.Sandbox, "err", err)
		return nil
	}
	s.keep(pendingWrite{ev: &ev, call: true, what: ev.Kind + " " + ev.Call}, err)
	return err
}

// notDurable is the answer to a call that ran but whose record could not
// be written (err, from recordEnd or recordNow): 507 (or 503), with what
// the call would have answered in Result. The record waits in the backlog.
func notDurable(err error, result any) error {
	ae := *apiError(err).(*api.Error)
	if ae.Code != api.CodeStorage {
		ae.Code = api.CodeUnavailable
	}
	ae.Message = "the call ran, but its record is not on disk (" + ae.Message +
		"): it is kept in memory and written when the disk takes it; result holds the call's result"
	ae.Result = mustJSON(result)
	return &ae
}

// gated are the operations that start new work, refused by writable while
// the data disk cannot take their records. Reads (and wait) are always
// answered, and so are the calls that stop work (sandbox.delete,
// process.signal, snapshot.delete) or answer an approval: their records
// join the backlog if the disk refuses them.
var gated = map[string]bool{
	api.OpSandboxCreate: true, api.OpExec: true, api.OpStart: true, api.OpStdin: true,
	api.OpFileWrite: true, api.OpFileMkdir: true, api.OpFileRemove: true, api.OpFileMove: true, api.OpFileUpload: true,
	api.OpSnapshotCreate: true, api.OpSnapshotFork: true, api.OpSandboxRestore: true, api.OpSandboxNetwork: true,
	api.OpWorkflowCreate: true, api.OpWorkflowResume: true, api.OpWorkflowAdd: true,
	api.OpBuildCreate: true, api.OpAgentCreate: true, api.OpAgentResume: true,
}
