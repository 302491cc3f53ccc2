package server

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/output"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/store"
)

// Bounds on the background processes of one sandbox, so that a tenant
// cannot make the daemon hold output without limit: at most
// maxProcsRunning run at once; ended ones are remembered (with their
// output) up to maxProcsKept and maxEndedOutput bytes, oldest forgotten
// first.
const (
	maxProcsRunning = 32
	maxProcsKept    = 256
	maxEndedOutput  = 16 << 20
)

// proc is a background process of a sandbox.
type proc struct {
	id      uint64
	callID  string
	args    []string
	started time.Time
	p       sandbox.Proc
	log     *output.Log
	stdin   *stdinBuffer

	mu     sync.Mutex
	result *sandbox.Result
	ended  *time.Time
	done   chan struct{}
}

func (p *proc) isDone() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) snapshot(sandboxID string) api.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := api.Process{ID: p.id, Sandbox: sandboxID, Args: p.args, State: api.ProcRunning, StartedAt: p.started, Result: p.result, EndedAt: p.ended}
	if p.ended != nil {
		out.State = api.ProcExited
	}
	return out
}

// processOf builds the runtime's Process from a request; stdin, stdout
// and stderr are the caller's to set.
func (s *Service) processOf(req *api.Exec) (*sandbox.Process, error) {
	if len(req.Args) == 0 {
		return nil, api.Errorf(api.CodeInvalidArgument, "args must name a command")
	}
	for _, a := range append(append([]string{req.Cwd}, req.Args...), req.Env...) {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, api.Errorf(api.CodeInvalidArgument, "args, env and cwd must not contain NUL bytes")
		}
	}
	timeout, err := durationField("timeout_ms", req.TimeoutMs, 0, s.cfg.MaxTimeout)
	if err != nil {
		return nil, err
	}
	if req.OutputLimit < 0 {
		return nil, api.Errorf(api.CodeInvalidArgument, "output_limit must not be negative")
	}
	if err := s.out.checkLimit(req.OutputLimit); err != nil {
		return nil, err
	}
	p := &sandbox.Process{Args: req.Args, Env: req.Env, Cwd: req.Cwd, Timeout: timeout, OutputLimit: req.OutputLimit}
	// The runtime's own checks, before the policy and the sandbox are
	// involved: argv and environment over sandbox.MaxArgvEnv are
	// too_large (413) for exec and start alike.
	if err := p.Validate(); err != nil {
		return nil, apiError(err)
	}
	return p, nil
}

// requestSummary is what the audit keeps of an exec: the command, not the
// values of the environment (they may hold credentials).
func requestSummary(req *api.Exec) map[string]any {
	keys := make([]string, 0, len(req.Env))
	for _, kv := range req.Env {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	args, cut := auditStrings(req.Args, maxAuditArgs)
	sum := map[string]any{"args": args}
	if cut {
		sum["args_truncated"] = true
	}
	if len(keys) > 0 {
		keys, cut = auditStrings(keys, maxAuditArgs/4)
		sum["env_keys"] = keys
		if cut {
			sum["env_keys_truncated"] = true
		}
	}
	if req.Cwd != "" {
		cwd, _ := auditStrings([]string{req.Cwd}, sandbox.MaxPathBytes)
		sum["cwd"] = cwd[0]
	}
	if req.TimeoutMs != 0 {
		sum["timeout_ms"] = req.TimeoutMs
	}
	return sum
}

// maxAuditArgs bounds the bytes of argv an audit event keeps, so that an
// event stays well within audit.MaxEventBytes even when every byte is
// escaped in JSON (six bytes for one): a larger request is kept cut.
const maxAuditArgs = 64 << 10

// auditStrings keeps list up to max bytes: a string past the budget is
// cut (with a marker of its length), the rest dropped with a count.
func auditStrings(list []string, max int) ([]string, bool) {
	n := 0
	for _, s := range list {
		n += len(s)
	}
	if n <= max {
		return list, false
	}
	out := make([]string, 0, min(len(list), 64))
	left := max
	for i, s := range list {
		if left <= 0 {
			out = append(out, fmt.Sprintf("…(%d more, %d bytes in all)", len(list)-i, n))
			break
		}
		if len(s) > left {
			s = strings.ToValidUTF8(s[:left], "") + fmt.Sprintf("…(%d bytes)", len(s))
		}
		left -= len(s)
		out = append(out, s)
	}
	return out, true
}

// auditText is a request's text as the audit keeps it: at most
// maxAuditArgs bytes.
func auditText(s string) string {
	out, _ := auditStrings([]string{s}, maxAuditArgs)
	return out[0]
}

func resultSummary(r *sandbox.Result) map[string]any {
	if r == nil {
		return nil
	}
	sum := map[string]any{"exit_code": r.ExitCode, "exit_reason": r.ExitReason, "duration_ms": r.DurationMs,
		"stdout_bytes": r.StdoutBytes, "stderr_bytes": r.StderrBytes, "truncated": r.Truncated, "error": r.Error}
	if r.OOMKills > 0 {
		sum["oom_kills"] = r.OOMKills
	}
	return sum
}

// newCall records the start of a call in the store, once the data disk
// can take its records (durable.go).
func (s *Service) newCall(ctx context.Context, c Caller, m *managed, id, kind string, args []string) error {
	if err := s.writable(); err != nil {
		return err
	}
	return s.putCall(ctx, c, m, id, kind, args, time.Now())
}

// putCall writes the start of a call to the store and waits for its commit.
func (s *Service) putCall(ctx context.Context, c Caller, m *managed, id, kind string, args []string, at time.Time) error {
	defer s.slow("store put call", time.Now())
	return s.cfg.Store.PutCall(ctx, &store.Call{ID: id, Sandbox: m.info.ID, Tenant: c.Tenant, Kind: kind, Args: args, StartedAt: at})
}

// callStart is the start of a call's store row, committed while the call
// runs (beginCall): its fsync overlaps the call instead of preceding it.
// The call is answered only after wait, and its end is written after its
// start (recordEnd), so a call answered as done still has both records on
// disk.
type callStart struct {
	done chan struct{}
	err  error
	// put writes the row again: for the backlog, when the disk refused it.
	put func(context.Context) error
}

// beginCall checks that the data disk can take the call's records
// (durable.go; an error refuses the call before it runs) and starts
// writing its start to the store.
func (s *Service) beginCall(ctx context.Context, c Caller, m *managed, id, kind string, args []string) (*callStart, error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	at := time.Now()
	cs := &callStart{done: make(chan struct{})}
	cs.put = func(ctx context.Context) error { return s.putCall(ctx, c, m, id, kind, args, at) }
	// Once queued, the write waits for its commit whatever happens to
	// the request.
	wctx := context.WithoutCancel(ctx)
	go func() {
		defer close(cs.done)
		cs.err = cs.put(wctx)
	}()
	return cs, nil
}

// wait returns the start's write error once it is known.
func (cs *callStart) wait() error {
	<-cs.done
	return cs.err
}

// finishCall records the end of a call in the store and the audit tape;
// an error says the record is not on disk yet (recordEnd). The store's
// row keeps the result without its output, and of the output only counts
// and previews (callOutput).
func (s *Service) finishCall(c Caller, m *managed, id, kind string, req *api.Exec, vs []verdict, res *sandbox.Result, err error, took time.Duration) error {
	return s.finishCallRef(c, m, id, kind, req, vs, res, err, took, "", nil, nil)
}

// finishCallRef is finishCall for a call whose output files are ref
// ("": none), and whose previews are pv when its text is not in res.
// redo, when not nil, is the call's start, which the disk refused: it is
// written before the end (recordEnd).
func (s *Service) finishCallRef(c Caller, m *managed, id, kind string, req *api.Exec, vs []verdict, res *sandbox.Result, err error, took time.Duration, ref string, pv *previews,
	redo func(context.Context) error) error {
	ev := audit.Event{Kind: kind, Tenant: c.Tenant, Actor: c.Actor, Sandbox: m.info.ID, Call: id,
		Decision: audit.DecisionAllow, Request: mustJSON(requestSummary(req)), DurationMs: took.Milliseconds()}
	code, reason := sandbox.ExitSetupFailed, string(sandbox.ReasonSetupError)
	if res != nil {
		code, reason = res.ExitCode, string(res.ExitReason)
		ev.Result = mustJSON(resultSummary(res))
	}
	if err != nil {
		ev.Error = err.Error()
	}
	withVerdicts(&ev, vs)
	row, out := callOutput(res, ref, pv)
	return s.recordEnd(id, time.Now(), code, reason, mustJSON(row), out, ev, redo)
}

func (s *Service) exec(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.Exec](in)
	if err != nil {
		return nil, err
	}
	p, err := s.execProcess(req)
	if err != nil {
		return nil, err
	}
	var st *eventSink
	if req.Stream && in.emit != nil {
		st = &eventSink{emit: in.emit}
	}
	// The decision (and an approval's wait) comes before the sandbox is
	// marked busy: a call waiting for an approver holds no other exec.
	m, done, err := s.useJudged(ctx, c, in, req, api.OpExec, st)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.runExec(ctx, c, in, m, req, p, st)
}

// execProcess checks an exec's body and makes its process, with its
// standard input; the output is runExec's to set.
func (s *Service) execProcess(req *api.Exec) (*sandbox.Process, error) {
	p, err := s.processOf(req)
	if err != nil {
		return nil, err
	}
	if len(req.StdinBase64) > 0 {
		p.Stdin = bytes.NewReader(req.StdinBase64)
	} else if req.Stdin != "" {
		p.Stdin = strings.NewReader(req.Stdin)
	}
	return p, nil
}

// runExec runs the judged exec req (process p) in sandbox m, which the
// caller holds (use), and answers it: the result, an execAnswer, or (st
// not nil) the stream's exit event and the result. It writes the call's
// store rows and its audit record (in.rec.durable).
func (s *Service) runExec(ctx context.Context, c Caller, in *input, m *managed, req *api.Exec, p *sandbox.Process, st *eventSink) (any, error) {
	return s.runExecWith(ctx, c, in, m, req, st, func() (*execRun, error) {
		m.mu.Lock()
		callID := fmt.Sprintf("%s/c%d", m.info.ID, m.nextCall())
		m.mu.Unlock()
		return s.newExecRun(c, callID, req, p, st), nil
	})
}

// execRun is an exec's process with the destinations of its output, and,
// once it has run, its outcome.
type execRun struct {
	callID string
	p      *sandbox.Process
	// capOut and capErr capture the output (nil when it streams); ans
	// is the answer made of them.
	capOut, capErr *callCapture
	ans            *execAnswer
	start          time.Time
	// done, when not nil, is closed once a process started ahead of its
	// call (runEarly) has ended with res and err.
	done chan struct{}
	// before, when not nil, runs before the call's record is written (a
	// carried exec's: the create's record goes first).
	before func()
	res    *sandbox.Result
	err    error
}

// newExecRun gives process p of call callID its output: the stream's
// events, or captures.
//
// The output is captured here, not by the runtime: charged to the output
// budget, spilling to a file past it (output.go). The runtime redacts
// secrets before it writes to these writers. The answer is written from
// the captures (execAnswer), which stay charged to the budget until then;
// runExecWith releases them unless the answer is handed over, to be
// released once written.
func (s *Service) newExecRun(c Caller, callID string, req *api.Exec, p *sandbox.Process, st *eventSink) *execRun {
	x := &execRun{callID: callID, p: p}
	if st != nil {
		p.Stdout, p.Stderr = st.writer(api.EventStdout), st.writer(api.EventStderr)
		return x
	}
	limit := cmp.Or(req.OutputLimit, s.cfg.OutputLimit)
	x.capOut = s.out.newCapture(c.Tenant, callID, "stdout", limit)
	x.capErr = s.out.newCapture(c.Tenant, callID, "stderr", limit)
	p.Stdout, p.Stderr = x.capOut.c, x.capErr.c
	x.ans = &execAnswer{stdout: x.capOut, stderr: x.capErr}
	return x
}

// runEarly starts x's process in sb ahead of its call's bookkeeping (a
// create's carried exec); runExecWith collects its outcome.
func (x *execRun) runEarly(ctx context.Context, sb sandbox.Sandbox) {
	x.start, x.done = time.Now(), make(chan struct{})
	go func() {
		defer close(x.done)
		x.res, x.err = sb.Exec(ctx, x.p)
	}()
}

// wait runs x's process in m, or waits for the one runEarly started.
func (x *execRun) wait(ctx context.Context, m *managed) (*sandbox.Result, error) {
	if x.done == nil {
		x.start = time.Now()
		return m.box().Exec(ctx, x.p)
	}
	<-x.done
	return x.res, x.err
}

// runExecWith is runExec for the process prepare gives (made then, or
// already started by runEarly).
func (s *Service) runExecWith(ctx context.Context, c Caller, in *input, m *managed, req *api.Exec, st *eventSink, prepare func() (*execRun, error)) (any, error) {
	if !req.Concurrent {
		m.mu.Lock()
		busy := m.busy
		m.busy = true
		m.mu.Unlock()
		if busy {
			return nil, api.Errorf(api.CodeBusy, "another exec is running in sandbox %s (set concurrent to run beside it)", m.info.ID)
		}
		defer func() {
			m.mu.Lock()
			m.busy = false
			m.mu.Unlock()
		}()
	}
	x, err := prepare()
	if err != nil {
		return nil, err
	}
	callID, capOut, capErr, ans := x.callID, x.capOut, x.capErr, x.ans
	if ans != nil {
		defer func() {
			if ans != nil {
				ans.release()
			}
		}()
	}
	// The call's start is committed while it runs (beginCall): its
	// fsync is not on the call's path.
	cs, err := s.beginCall(ctx, c, m, callID, "exec", req.Args)
	if err != nil {
		if x.done != nil {
			<-x.done // it ran, but cannot be recorded: refused as before
		}
		return nil, fmt.Errorf("record call: %w", err)
	}
	res, err := x.wait(ctx, m)
	res, err = m.cutShort(res, err)
	var redo func(context.Context) error
	if perr := cs.wait(); perr != nil {
		if !retryable(perr) {
			// Not a full disk: no record of the call can be made (the
			// store is closed, say); the call fails, as it would have
			// before running.
			return nil, fmt.Errorf("record call: %w", perr)
		}
		// The disk filled while the call ran: its start goes to the
		// backlog with its end, and the answer is 507 (notDurable).
		redo = cs.put
	}
	ref := ""
	var pv *previews
	if capOut != nil {
		outTrunc, outKept, outPrev := capOut.finish()
		errTrunc, errKept, errPrev := capErr.finish()
		pv = &previews{stdout: outPrev, stderr: errPrev}
		if res != nil {
			res.Stdout, res.Stderr = "", ""
			res.Truncated = res.Truncated || outTrunc || errTrunc
		}
		if outKept || errKept {
			ref = capOut.ref
		}
		ans.res = res
	}
	if x.before != nil {
		x.before()
	}
	rerr := in.rec.durable(func() error {
		return s.finishCallRef(c, m, callID, "process.exec", req, in.verdicts, res, err, time.Since(x.start), ref, pv, redo)
	})
	if err != nil && !isSetupOnly(err) {
		return nil, err
	}
	if ans == nil || res == nil {
		if rerr != nil {
			return nil, notDurable(rerr, res)
		}
		if st != nil {
			st.finish(res)
		}
		return res, nil
	}
	if rerr != nil {
		return nil, notDurable(rerr, ans) // encoded whole, then released
	}
	answer := ans
	ans = nil // the caller releases it once written
	return answer, nil
}

// isSetupOnly reports whether err is a failure to start the process that
// its result already describes (exit 125, setup_error) rather than bad
// input or a sandbox that is gone.
func isSetupOnly(err error) bool {
	ae := apiError(err).(*api.Error)
	return ae.Code == api.CodeSetup
}

// eventSink turns output written by the runtime into numbered events.
type eventSink struct {
	mu   sync.Mutex
	seq  uint64
	emit func(api.Event) error
	err  error
}

func (e *eventSink) writer(stream string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		ev := api.Event{Type: stream}
		ev.SetOutput(append([]byte(nil), p...))
		e.send(ev)
		return len(p), nil
	})
}

// send numbers and emits an event; once the reader has gone, later
// events are dropped (the process still runs to its end or timeout).
func (e *eventSink) send(ev api.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return
	}
	e.seq++
	ev.Seq = e.seq
	e.err = e.emit(ev)
}

func (e *eventSink) finish(res *sandbox.Result) {
	e.send(api.Event{Type: api.EventExit, Result: res})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (s *Service) start(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.Exec](in)
	if err != nil {
		return nil, err
	}
	p, err := s.processOf(req)
	if err != nil {
		return nil, err
	}
	if req.Stdin != "" || len(req.StdinBase64) > 0 {
		return nil, api.Errorf(api.CodeInvalidArgument, "a background process takes its input through process.stdin")
	}
	m, done, err := s.useJudged(ctx, c, in, req, api.OpStart, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	keep := s.cfg.OutputBuffer
	if req.OutputLimit > 0 {
		keep = min(req.OutputLimit, 4*s.cfg.OutputBuffer)
	}
	m.mu.Lock()
	running := 0
	for _, p := range m.procs {
		if !p.isDone() {
			running++
		}
	}
	m.mu.Unlock()
	if running >= maxProcsRunning {
		return nil, api.Errorf(api.CodeTooMany, "sandbox %s already runs %d background processes", m.info.ID, running)
	}
	pr := &proc{args: req.Args, started: time.Now(), log: output.NewLog(keep), stdin: newStdinBuffer(maxStdinPending), done: make(chan struct{})}
	pr.log.SetBudget(s.out.budget.Account(c.Tenant))
	p.Stdin, p.Stdout, p.Stderr = pr.stdin, pr.log.Writer(api.EventStdout), pr.log.Writer(api.EventStderr)
	m.mu.Lock()
	pr.callID = fmt.Sprintf("%s/c%d", m.info.ID, m.nextCall())
	m.mu.Unlock()
	if err := s.newCall(ctx, c, m, pr.callID, "start", req.Args); err != nil {
		return nil, fmt.Errorf("record call: %w", err)
	}
	handle, err := m.box().Start(ctx, p)
	if err != nil {
		pr.stdin.Close()
		s.out.releaseLog(pr.log)
		in.rec.durable(func() error {
			return s.finishCall(c, m, pr.callID, "process.start", req, in.verdicts, nil, err, time.Since(pr.started))
		})
		return nil, err
	}
	pr.id, pr.p = handle.ID(), handle
	m.mu.Lock()
	m.procs[pr.id] = pr
	gone := m.forgetOldProcs()
	m.mu.Unlock()
	s.out.releaseProcs(gone)
	startEv := audit.Event{Kind: "process.start", Tenant: c.Tenant, Actor: c.Actor, Sandbox: m.info.ID, Call: pr.callID,
		Decision: audit.DecisionAllow, Request: mustJSON(requestSummary(req)), Result: mustJSON(map[string]uint64{"process": pr.id})}
	withVerdicts(&startEv, in.verdicts)
	rerr := in.rec.durable(func() error { return s.recordNow(startEv) })
	s.tasks.Add(1)
	go func() {
		defer s.tasks.Done()
		res, err := m.cutShort(handle.Wait(context.Background()))
		now := time.Now()
		pr.stdin.Close()
		pr.mu.Lock()
		pr.result, pr.ended = res, &now
		pr.mu.Unlock()
		pr.log.Close()
		close(pr.done)
		m.mu.Lock()
		gone := m.forgetOldProcs()
		m.mu.Unlock()
		s.out.releaseProcs(gone)
		s.finishCall(c, m, pr.callID, "process.exit", req, nil, res, err, now.Sub(pr.started))
	}()
	out := pr.snapshot(m.info.ID)
	if rerr != nil {
		return nil, notDurable(rerr, &out)
	}
	return &out, nil
}

// nextCall numbers the calls of a sandbox; m.mu must be held.
func (m *managed) nextCall() uint64 {
	m.calls++
	return m.calls
}

// forgetOldProcs drops the oldest ended processes past maxProcsKept or
// maxEndedOutput and returns them (their output is the caller's to
// release); m.mu must be held.
func (m *managed) forgetOldProcs() (gone []*proc) {
	ids := make([]uint64, 0, len(m.procs))
	held := 0
	for id, p := range m.procs {
		if p.isDone() {
			ids = append(ids, id)
			held += p.log.Size()
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if len(m.procs) <= maxProcsKept && held <= maxEndedOutput {
			break
		}
		held -= m.procs[id].log.Size()
		gone = append(gone, m.procs[id])
		delete(m.procs, id)
	}
	return gone
}

// releaseSandboxOutput gives back the kept output of every background
// process of an ended sandbox.
func (s *Service) releaseSandboxOutput(m *managed) {
	m.mu.Lock()
	procs := make([]*proc, 0, len(m.procs))
	for _, p := range m.procs {
		procs = append(procs, p)
	}
	m.mu.Unlock()
	s.out.releaseProcs(procs)
}

// releaseProcs gives back the kept output of processes no longer
// remembered.
func (o *outputs) releaseProcs(procs []*proc) {
	for _, p := range procs {
		o.releaseLog(p.log)
	}
}

// releaseLog drops a log's chunks and gives its bytes back.
func (o *outputs) releaseLog(l *output.Log) {
	n := l.Size()
	l.Release()
	o.gaveBack(int64(n))
}

// procRequest decodes a request that names a process and finds the
// process; the caller must call done.
func procRequest[T any](s *Service, c Caller, in *input, ref func(*T) (string, uint64)) (req *T, m *managed, p *proc, done func(), err error) {
	if req, err = decode[T](in); err != nil {
		return nil, nil, nil, nil, err
	}
	sb, id := ref(req)
	m, p, done, err = s.findProc(c, sb, id)
	return req, m, p, done, err
}

func refOf(r *api.ProcessRef) (string, uint64) { return r.Sandbox, r.Process }

// findProc looks up a process of a running sandbox.
func (s *Service) findProc(c Caller, sandboxID string, id uint64) (*managed, *proc, func(), error) {
	m, done, err := s.use(c, sandboxID)
	if err != nil {
		return nil, nil, nil, err
	}
	m.mu.Lock()
	p := m.procs[id]
	m.mu.Unlock()
	if p == nil {
		done()
		return nil, nil, nil, api.Errorf(api.CodeNotFound, "no process %d in sandbox %s", id, sandboxID)
	}
	return m, p, done, nil
}

func (s *Service) listProcs(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.SandboxRef](in)
	if err != nil {
		return nil, err
	}
	m, done, err := s.use(c, req.Sandbox)
	if err != nil {
		return nil, err
	}
	defer done()
	m.mu.Lock()
	procs := make([]*proc, 0, len(m.procs))
	for _, p := range m.procs {
		procs = append(procs, p)
	}
	m.mu.Unlock()
	slices.SortFunc(procs, func(a, b *proc) int { return cmp.Compare(a.id, b.id) })
	out := api.ProcessList{Processes: make([]api.Process, 0, len(procs))}
	for _, p := range procs {
		out.Processes = append(out.Processes, p.snapshot(m.info.ID))
	}
	return &out, nil
}

func (s *Service) getProc(ctx context.Context, c Caller, in *input) (any, error) {
	_, m, p, done, err := procRequest(s, c, in, refOf)
	if err != nil {
		return nil, err
	}
	defer done()
	out := p.snapshot(m.info.ID)
	return &out, nil
}

func (s *Service) waitProc(ctx context.Context, c Caller, in *input) (any, error) {
	req, m, p, done, err := procRequest(s, c, in, refOf)
	if err != nil {
		return nil, err
	}
	defer done()
	limit, err := durationField("timeout_ms", req.TimeoutMs, s.cfg.MaxTimeout, s.cfg.MaxTimeout)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
	case <-m.endDone:
	}
	out := p.snapshot(m.info.ID)
	return &out, nil
}

func (s *Service) signalProc(ctx context.Context, c Caller, in *input) (any, error) {
	req, m, p, done, err := procRequest(s, c, in, func(r *api.Signal) (string, uint64) { return r.Sandbox, r.Process })
	if err != nil {
		return nil, err
	}
	defer done()
	sig, err := parseSignal(req.Signal)
	if err != nil {
		return nil, err
	}
	err = p.p.Signal(sig)
	// The signal was sent, or tried: allowed, whatever came of it.
	in.rec.ev = audit.Event{Sandbox: m.info.ID, Call: p.callID, Decision: audit.DecisionAllow,
		Request: mustJSON(map[string]any{"process": p.id, "signal": unix.SignalName(sig)}), Error: errString(err)}
	if err != nil {
		return nil, err
	}
	return &api.OK{OK: true}, nil
}

// parseSignal accepts "TERM", "SIGTERM", "sigterm" or "15".
func parseSignal(name string) (unix.Signal, error) {
	if n, err := strconv.Atoi(name); err == nil {
		if n < 1 || n > 64 {
			return 0, api.Errorf(api.CodeInvalidArgument, "signal %d is out of range", n)
		}
		return unix.Signal(n), nil
	}
	up := strings.ToUpper(name)
	if !strings.HasPrefix(up, "SIG") {
		up = "SIG" + up
	}
	if sig := unix.SignalNum(up); sig != 0 {
		return sig, nil
	}
	return 0, api.Errorf(api.CodeInvalidArgument, "unknown signal %q", name)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (s *Service) stdinProc(ctx context.Context, c Caller, in *input) (any, error) {
	req, m, p, done, err := procRequest(s, c, in, func(r *api.Stdin) (string, uint64) { return r.Sandbox, r.Process })
	if err != nil {
		return nil, err
	}
	defer done()
	data := req.DataBase64
	if data == nil {
		data = []byte(req.Data)
	}
	if p.isDone() {
		return nil, api.Errorf(api.CodeGone, "process %d has ended", p.id)
	}
	if err := p.stdin.write(data, req.EOF); err != nil {
		return nil, err
	}
	in.rec.ev = audit.Event{Sandbox: m.info.ID, Call: p.callID,
		Request: mustJSON(map[string]any{"process": p.id, "bytes": len(data), "eof": req.EOF})}
	return &api.OK{OK: true}, nil
}

func (s *Service) output(ctx context.Context, c Caller, in *input) (any, error) {
	if in.emit == nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "process.output is a stream")
	}
	req, m, p, done, err := procRequest(s, c, in, func(r *api.ReadOutput) (string, uint64) { return r.Sandbox, r.Process })
	if err != nil {
		return nil, err
	}
	defer done()
	readCtx := ctx
	if !req.Follow {
		// A cancelled context makes Read return what it has at once.
		c, cancel := context.WithCancel(ctx)
		cancel()
		readCtx = c
	}
	after := req.After
	// seen is the offset in the output just past what this reader has
	// had: known from the start, and after every chunk sent; a reader
	// that resumes after output already dropped is told the bytes lost
	// from the start of the output.
	var seen int64
	for {
		chunks, closed, lost, err := p.log.Read(readCtx, after)
		if lost && (len(chunks) > 0 || closed) {
			ev := api.Event{Type: api.EventLost, Process: p.id}
			if len(chunks) > 0 {
				ev.Seq, ev.LostBytes = chunks[0].Seq-1, chunks[0].Off-seen
			} else {
				ev.Seq, ev.LostBytes = p.log.LastSeq(), p.log.LostBefore()-seen
			}
			if err := in.emit(ev); err != nil {
				return nil, err
			}
		}
		for _, ch := range chunks {
			ev := api.Event{Seq: ch.Seq, Type: ch.Stream, Process: p.id}
			ev.SetOutput(ch.Data)
			if err := in.emit(ev); err != nil {
				return nil, err
			}
			after, seen = ch.Seq, ch.Off+int64(len(ch.Data))
		}
		if closed {
			exitSeq := p.log.LastSeq() + 1
			if after < exitSeq {
				pi := p.snapshot(m.info.ID)
				if err := in.emit(api.Event{Seq: exitSeq, Type: api.EventExit, Process: p.id, Result: pi.Result}); err != nil {
					return nil, err
				}
			}
			break
		}
		if err != nil {
			if !req.Follow {
				break
			}
			return nil, err
		}
	}
	out := p.snapshot(m.info.ID)
	return &out, nil
}

// stdinBuffer is a process's standard input: API calls append to it, the
// runtime reads from it. It holds at most max unread bytes, so a process
// that does not read cannot make the daemon buffer without bound.
type stdinBuffer struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	max    int
	closed bool
}

func newStdinBuffer(max int) *stdinBuffer {
	b := &stdinBuffer{max: max}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// write appends data and, with eof, closes the input.
func (b *stdinBuffer) write(data []byte, eof bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		if len(data) == 0 && eof {
			return nil
		}
		return api.Errorf(api.CodeConflict, "standard input is closed")
	}
	if len(b.buf)+len(data) > b.max {
		return api.Errorf(api.CodeBusy, "standard input has %d bytes the process has not read; at most %d may wait", len(b.buf), b.max)
	}
	b.buf = append(b.buf, data...)
	b.closed = eof
	b.cond.Broadcast()
	return nil
}

// Read blocks until there is input or it is closed.
func (b *stdinBuffer) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.buf) == 0 && !b.closed {
		b.cond.Wait()
	}
	if len(b.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

// Close ends the input; unread bytes are dropped.
func (b *stdinBuffer) Close() {
	b.mu.Lock()
	b.closed = true
	b.buf = nil
	b.cond.Broadcast()
	b.mu.Unlock()
}
