package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/moat-sandbox/moat/admit"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// A sandbox.create that carries its first exec (api.CreateSandbox.Exec).
//
// The call is two calls in one request: a create, then an exec in the new
// sandbox, each judged, approved, recorded, counted and limited as if it
// had come alone. The exec's body is checked before anything is made (a
// bad one is 400 and leaves no sandbox); once the sandbox exists, a
// refused or failed exec does not undo it: the answer is the sandbox with
// the exec's error in its exec field, which says the sandbox was created.
// The audit tape gets the create's sandbox.create event first, then the
// exec's process.exec event, as for two calls.
//
// Pipelining: when the runtime can hand out a sandbox before it is ready
// (sandbox.EarlyCreator), the policy allows the command outright (no ask,
// no deny) and the exec does not stream, the process is sent to the
// sandbox right after its setup (createFor), as moat run does: it runs
// as soon as the sandbox is ready, while the daemon records the create.
// The decision is the one made then, recorded with the exec as judge
// records it. A create that then fails (its store row cannot be written,
// the daemon is closing) shuts the sandbox down with the process in it;
// what the process did to a writable host bind stays done. Otherwise the
// create and then the exec run one after the other.
//
// A workflow step's sandbox and process, and a build's, take the same
// path (Service.createExec, workflows_backend.go), as two calls of the
// run's or the build's owner: firstExec then also carries the process's
// stdin and copies of its stdout and stderr.

// createWithExec is sandbox.create with req.Exec set.
func (s *Service) createWithExec(ctx context.Context, c Caller, in *input, req *api.CreateSandbox) (any, error) {
	// The create is recorded (store and audit) without its exec: the
	// exec's environment may hold credentials, and its own record
	// follows.
	creq := *req
	creq.Exec = nil
	in.req = &creq
	ereq := *req.Exec
	if ereq.Sandbox != "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "exec.sandbox must be empty: the exec runs in the sandbox being created")
	}
	if _, err := parseRules(ereq.Policy, "exec"); err != nil {
		return nil, execField(err)
	}
	p, err := s.execProcess(&ereq)
	if err != nil {
		return nil, execField(err)
	}
	// The exec may last as long as a process.exec may: without the
	// create's request timeout.
	ectx := ctx
	if in.long != nil {
		ectx = in.long
	}
	first := &firstExec{req: &ereq, p: p, ctx: ectx, stream: ereq.Stream && in.emit != nil}
	start := time.Now()
	info, err := s.doCreateFirst(ctx, c, &creq, first)
	if err != nil {
		first.abandon()
		return nil, err
	}
	in.rec.ev.Sandbox = info.ID
	in.rec.ev.Result = mustJSON(map[string]any{"id": info.ID, "limits": info.Enforcement.Limits, "policy": info.Policy})
	// The create's record, before its exec's (createRecorded), as its
	// own answer would have waited for it; the dispatcher writes nothing
	// more. A pipelined exec's records are written meanwhile.
	ctook := time.Since(start)
	rin := &input{req: in.req, rec: in.rec, verdicts: in.verdicts}
	recorded := make(chan struct{})
	createRecorded := func() { <-recorded }
	go func() {
		defer close(recorded)
		s.recordCall(c, api.OpSandboxCreate, rin, nil, ctook)
	}()
	in.rec.instead()
	if first.run == nil {
		createRecorded()
	}

	ereq.Sandbox = info.ID
	ein := &input{emit: in.emit, open: in.open, req: &ereq}
	var st *eventSink
	if first.stream {
		st = &eventSink{emit: in.emit}
		ev := *info
		st.send(api.Event{Type: api.EventSandbox, Sandbox: &ev})
	}
	estart := time.Now()
	var resp any
	var eerr error
	if first.run != nil {
		first.run.before = createRecorded
		resp, eerr = s.earlyExec(ectx, c, ein, &ereq, first)
		createRecorded() // the exec failed before its record
	} else {
		resp, eerr = s.carriedExec(ectx, c, ein, &ereq, p, st)
	}
	eerr = apiError(eerr)
	took := time.Since(estart)
	s.metrics.observeCall(api.OpExec, eerr, took)
	s.recordCall(c, api.OpExec, ein, eerr, took)

	out := &createdAnswer{sb: *info}
	if eerr != nil {
		releaseAnswer(resp)
		ae := *api.AsError(eerr)
		ae.Message = "sandbox " + info.ID + " was created; its exec failed: " + ae.Message
		out.err = &ae
		if st != nil {
			st.send(api.Event{Type: api.EventError, Error: &ae})
		}
		return out, nil
	}
	out.ans = resp
	return out, nil
}

// carriedExec judges and runs the exec of a create in its new sandbox, as
// Service.exec does after decoding.
func (s *Service) carriedExec(ctx context.Context, c Caller, in *input, req *api.Exec, p *sandbox.Process, st *eventSink) (any, error) {
	m, done, err := s.useJudged(ctx, c, in, req, api.OpExec, st)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.runExec(ctx, c, in, m, req, p, st)
}

// earlyExec finishes the exec that createFor started with the sandbox:
// the decision made then, the call's records, its answer.
func (s *Service) earlyExec(ctx context.Context, c Caller, in *input, req *api.Exec, first *firstExec) (any, error) {
	m, done, err := s.use(c, req.Sandbox)
	if err != nil {
		first.abandon()
		return nil, err
	}
	defer done()
	s.metrics.decisions.Inc(first.verdict.Effect)
	in.verdicts = append(in.verdicts, first.verdict)
	return s.runExecWith(ctx, c, in, m, req, nil, func() (*execRun, error) { return first.run, nil })
}

// firstExec is the exec a create carries, for createFor.
type firstExec struct {
	req    *api.Exec
	p      *sandbox.Process
	ctx    context.Context // the exec's
	stream bool
	// stdout and stderr, when not nil, also get the process's stdout and
	// stderr (a workflow step's, a build's: Service.createExec); p.Stdin
	// is already its stdin.
	stdout, stderr io.Writer
	// recorded, when set (by a workflow step's create, createStep),
	// waits for the create's record, written while the process runs.
	recorded func()
	// Set by createFor when it started the process with the sandbox:
	// the process and the policy's decision on it.
	run     *execRun
	verdict verdict
}

// abandon waits for a process createFor started and gives back its
// captures: its create failed, or its sandbox ended before the exec was
// taken up.
func (f *firstExec) abandon() {
	if f == nil || f.run == nil {
		return
	}
	<-f.run.done
	if f.run.ans != nil {
		f.run.ans.release()
	}
	f.run = nil
}

// createFor creates the sandbox b describes. With a first exec that the
// runtime and the policy let it start at once (see the top of this file),
// it creates the sandbox early, starts the process in it, and returns once
// the sandbox is ready, with first.run and first.verdict set.
func (s *Service) createFor(ctx context.Context, c Caller, b *built, first *firstExec) (sandbox.Sandbox, error) {
	ec, ok := s.cfg.Runtime.(sandbox.EarlyCreator)
	if first == nil || first.stream || !ok {
		return s.cfg.Runtime.Create(ctx, b.spec)
	}
	v, allowed := s.decideNow(b.pol, first.req)
	if !allowed {
		return s.cfg.Runtime.Create(ctx, b.spec)
	}
	sb, ready, err := ec.CreateEarly(ctx, b.spec)
	if err != nil {
		return nil, err
	}
	x := s.newExecRun(c, sb.ID()+"/c1", first.req, first.p, nil)
	teeOutput(first.p, first.stdout, first.stderr)
	x.runEarly(first.ctx, sb)
	first.run, first.verdict = x, v
	if err := ready(ctx); err != nil {
		_ = sb.Shutdown(context.Background())
		first.abandon()
		return nil, err
	}
	return sb, nil
}

// decideNow is the policy's decision on exec req in a sandbox of policy
// pol, made as judge makes it, when it allows the command outright; an
// ask, a deny or an error is left to judge, after the create.
func (s *Service) decideNow(pol *sandboxPolicy, req *api.Exec) (verdict, bool) {
	call, err := parseRules(req.Policy, "exec")
	if err != nil {
		return verdict{}, false
	}
	eff, err := pol.effective(s.log, "(being created)")
	if err != nil {
		return verdict{}, false
	}
	d, err := admit.Decide(eff, call, policy.ExecArgv(req.Args...))
	if err != nil || d.Effect != policy.Allow {
		return verdict{}, false
	}
	v := verdict{Request: auditText(requestText(d)), Decided: d.Effect.String(), Effect: d.Effect.String(), Reason: d.Reason}
	if d.Rule != nil {
		v.Rule, v.Source = d.Rule.String(), d.Rule.Source()
	}
	return v, true
}

// execField names the exec field in a refusal of its content.
func execField(err error) error {
	ae := *api.AsError(apiError(err))
	ae.Message = "exec: " + ae.Message
	return &ae
}

// createdAnswer is the answer of a create that carried an exec: the
// sandbox, and the exec's answer (a result, or an execAnswer still holding
// its output in the captures) or its error.
type createdAnswer struct {
	sb  api.Sandbox
	ans any // *sandbox.Result or *execAnswer
	err *api.Error
}

// outcome is the exec's outcome as the answer carries it, with the output
// of an execAnswer copied out of its captures.
func (a *createdAnswer) outcome() (*api.ExecOutcome, error) {
	o := &api.ExecOutcome{Error: a.err}
	switch r := a.ans.(type) {
	case *execAnswer:
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &o.Result); err != nil {
			return nil, err
		}
	case *sandbox.Result:
		o.Result = r
	}
	return o, nil
}

// encodeJSON writes the answer as encoding/json would write the sandbox
// with its exec field; an exec's captured output is streamed from its
// captures (execAnswer.encodeJSON), never held twice.
func (a *createdAnswer) encodeJSON(w io.Writer) error {
	ea, ok := a.ans.(*execAnswer)
	if !ok {
		o, err := a.outcome()
		if err != nil {
			return err
		}
		sb := a.sb
		sb.Exec = o
		b, err := json.Marshal(&sb)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	b, err := json.Marshal(&a.sb) // Exec is nil: its field is absent
	if err != nil {
		return err
	}
	b = bytes.TrimSuffix(b, []byte("}"))
	for _, step := range []func() error{
		func() error { _, err := w.Write(b); return err },
		func() error { _, err := io.WriteString(w, `,"exec":{"result":`); return err },
		func() error { return ea.encodeJSON(w) },
		func() error { _, err := io.WriteString(w, "}}"); return err },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// MarshalJSON encodes the answer whole (JSON-RPC batches, errors).
func (a *createdAnswer) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := a.encodeJSON(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// release gives back the exec's captures; it may be called more than once.
func (a *createdAnswer) release() { releaseAnswer(a.ans) }
