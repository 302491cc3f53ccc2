package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/workflow/engine"
)

// The workflow engine's Backend over the Service.
//
// Every method is a call of the run's owner (its tenant and actor) through
// the dispatcher (Service.call, Service.dispatch): the create of a step's
// sandbox is a sandbox.create (quotas, template or snapshot, policy
// admission, network, store row, audit), its process a process.exec
// (judged by the sandbox's policy, held by an ask rule until an approver
// answers, recorded, audited), its snapshot a snapshot.create, each
// collected output a file.download, and the sandbox's and snapshot's
// removal a sandbox.delete and a snapshot.delete. They count against the
// tenant's quotas like the calls the tenant makes itself. The create and
// the process go together (CreateExec) as an API create that carries its
// first exec does (createexec.go): the process queued behind the
// sandbox's setup where the runtime and the policy allow, and still a
// sandbox.create and then a process.exec.
//
// What a step needs that the API cannot say is added by the daemon alone
// (stepSandbox): the read-only binds of the artifact directories of the
// steps it takes inputs from (host paths the engine made under the
// artifact directory: checked, and allowed even when Config.AllowHostPaths
// is off, for these binds only), the budget it runs in and its
// environment.

// stepOutputLimit caps each stream of a step's process kept in its result
// (and so in the run's record); the whole stdout goes to the engine's
// writer, when it gives one.
const stepOutputLimit = 64 << 10

// wfBackend implements engine.Backend.
type wfBackend struct{ s *Service }

var (
	_ engine.Backend      = wfBackend{}
	_ engine.CreateExecer = wfBackend{}
)

// ownerCaller is the caller of a run's calls.
func ownerCaller(o engine.Owner) Caller { return Caller{Tenant: o.Tenant, Actor: o.Actor} }

// internalInput is the input of a call the daemon makes itself, with its
// request already made: decode hands over a copy of req (a struct value
// of the operation's request type).
func internalInput(req any) *input {
	return &input{decode: func(v any) error {
		dst := reflect.ValueOf(v).Elem()
		src := reflect.ValueOf(req)
		if src.Type() != dst.Type() {
			return api.Errorf(api.CodeInternal, "request of type %s, want %s", src.Type(), dst.Type())
		}
		dst.Set(src)
		return nil
	}}
}

// millisCeil is d in whole milliseconds, rounded up (0 stays 0).
func millisCeil(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// isCode reports whether err is an API error of code.
func isCode(err error, code string) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == code
}

// stepSandbox is what a sandbox the daemon makes for its own work (a
// workflow step's, a build's) has that a sandbox.create cannot say.
type stepSandbox struct {
	// inputs are read-only binds of directories under the engine's
	// artifact directory (checked by checkStep).
	inputs []sandbox.Bind
	// budget is the id of a live budget of the caller's (checked).
	budget string
	// env is added to the sandbox's environment (KEY=VALUE; a key already
	// there takes the new value).
	env []string
	// layers are directories the daemon made (a build's source layer),
	// put on top of the root's read-only lower layers, top first; a
	// sandbox of the host template gets them over the host's system
	// directories (sandbox.RootFS{Host: true}).
	layers []string
	// workdir, when set, is the processes' default working directory.
	workdir string
}

// apply adds what st says to spec, made for the create by its policy. A
// nil st changes nothing.
func (st *stepSandbox) apply(spec *sandbox.Spec) {
	if st == nil {
		return
	}
	binds := slices.Clone(spec.Binds)
	for _, b := range st.inputs {
		b.Writable = false
		binds = append(binds, b)
	}
	spec.Binds = binds
	spec.Budget = st.budget
	spec.Env = mergeEnv(spec.Env, st.env)
	if len(st.layers) > 0 {
		root := sandbox.RootFS{Host: true}
		if spec.Root != nil {
			root = *spec.Root
		}
		root.Layers = append(slices.Clone(st.layers), root.Layers...)
		spec.Root = &root
	}
	if st.workdir != "" {
		spec.Workdir = st.workdir
	}
}

// mergeEnv is base with add's KEY=VALUE pairs, a key of add replacing the
// same key of base in place.
func mergeEnv(base, add []string) []string {
	if len(add) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(add))
	at := map[string]int{}
	for _, kv := range append(append([]string(nil), base...), add...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := at[k]; ok {
			out[i] = kv
			continue
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// checkStep checks what st asks for, for caller c: the inputs are
// read-only binds of directories under the artifact directory (no symlink
// on the way), at targets a sandbox may have; the budget is a live one of
// c's tenant.
func (s *Service) checkStep(c Caller, st *stepSandbox) error {
	if len(st.inputs) > 0 {
		if err := (&sandbox.Spec{Binds: st.inputs}).Validate(); err != nil {
			return err
		}
	}
	for _, b := range st.inputs {
		if b.Writable {
			return api.Errorf(api.CodeInvalidArgument, "the input at %s must be read-only", b.Target)
		}
		if err := checkArtifactDir(s.wf.dir, b.Source); err != nil {
			return api.Errorf(api.CodeInvalidArgument, "the input at %s: %v", b.Target, err)
		}
	}
	if st.budget != "" {
		if _, err := s.wf.budget(c.Tenant, st.budget); err != nil {
			return err
		}
	}
	return nil
}

// createStep is the handler of a step's sandbox.create: the handler of the
// API's, with st put into the spec, and first (nil: none) the process
// createFor may start with the sandbox (CreateExec).
func (s *Service) createStep(st *stepSandbox, first *firstExec) handler {
	return func(ctx context.Context, c Caller, in *input) (any, error) {
		start := time.Now()
		req, err := decode[api.CreateSandbox](in)
		if err != nil {
			return nil, err
		}
		if err := s.checkStep(c, st); err != nil {
			return nil, err
		}
		sb, err := s.doCreateStep(ctx, c, req, first, st)
		if err != nil {
			return nil, err
		}
		res := map[string]any{"id": sb.ID, "limits": sb.Enforcement.Limits, "policy": sb.Policy}
		if len(st.inputs) > 0 {
			ins := make([]map[string]string, len(st.inputs))
			for i, b := range st.inputs {
				// Relative to the artifact directory: the daemon's data
				// directory is not the tenant's business.
				src, _ := underDir(s.wf.dir, b.Source)
				ins[i] = map[string]string{"source": src, "target": b.Target}
			}
			res["inputs"] = ins
		}
		if st.budget != "" {
			res["budget"] = st.budget
		}
		in.rec.ev.Sandbox = sb.ID
		in.rec.ev.Result = mustJSON(res)
		if first != nil && first.run != nil {
			// The step's process runs: the create's record is written
			// meanwhile, ahead of the exec's, which waits for it.
			first.recorded = s.recordAside(c, in, time.Since(start))
			first.run.before = first.recorded
		}
		return sb, nil
	}
}

// recordAside writes the record of sandbox.create call in, which took
// took, in a goroutine, in place of the dispatcher, and returns a func
// that waits for the write (as createWithExec does for a create that
// carries its exec).
func (s *Service) recordAside(c Caller, in *input, took time.Duration) func() {
	rin := &input{req: in.req, rec: in.rec, verdicts: in.verdicts}
	in.rec.instead() // the record is written below
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.recordCall(c, api.OpSandboxCreate, rin, nil, took)
	}()
	return func() { <-done }
}

// Create makes the sandbox of one attempt of a step, as a sandbox.create
// of the run's owner.
func (b wfBackend) Create(ctx context.Context, o engine.Owner, req engine.CreateRequest) (string, error) {
	return b.create(ctx, o, req, nil)
}

// create is Create with first (nil: none), the step's process, which
// createFor may start with the sandbox.
func (b wfBackend) create(ctx context.Context, o engine.Owner, req engine.CreateRequest, first *firstExec) (string, error) {
	creq, st := stepCreate(req)
	sb, err := b.s.createOwn(ctx, ownerCaller(o), creq, st, first)
	if err != nil {
		return "", capacityError(err)
	}
	return sb.ID, nil
}

// stepCreate is the sandbox.create of a step's sandbox, and what the
// daemon adds to it.
func stepCreate(req engine.CreateRequest) (api.CreateSandbox, *stepSandbox) {
	creq := api.CreateSandbox{Template: req.Template, Snapshot: req.Snapshot, Limits: req.Limits,
		TimeoutMs: millisCeil(req.Timeout), Labels: req.Labels, Policy: req.Policy, Network: req.Network}
	if req.CPUWeight != 0 {
		creq.Limits.CPUWeight = req.CPUWeight
	}
	return creq, &stepSandbox{inputs: req.Inputs, budget: req.Budget, env: req.Env}
}

// capacityError marks a create refused for want of room (a quota or a
// resource of the daemon: room frees up as sandboxes end) as
// engine.ErrCapacity, which the engine waits out.
func capacityError(err error) error {
	if isCode(err, api.CodeTooMany) {
		return fmt.Errorf("%w: %w", engine.ErrCapacity, err)
	}
	return err
}

// createOwn makes a sandbox for the daemon's own work as a sandbox.create
// of c (creq) through the dispatcher, with what st adds, and first (nil:
// none), the process createFor may start with the sandbox.
func (s *Service) createOwn(ctx context.Context, c Caller, creq api.CreateSandbox, st *stepSandbox, first *firstExec) (*api.Sandbox, error) {
	resp, err := s.dispatch(ctx, c, api.OpSandboxCreate, s.createStep(st, first), internalInput(creq))
	if err != nil {
		return nil, err
	}
	return resp.(*api.Sandbox), nil
}

// execStep is the handler of a step's process.exec: the API's, with stdin
// (nil: none) as the process's standard input and its stdout and stderr
// also copied to stdout and stderr (nil: not).
func (s *Service) execStep(stdin io.Reader, stdout, stderr io.Writer) handler {
	return func(ctx context.Context, c Caller, in *input) (any, error) {
		req, err := decode[api.Exec](in)
		if err != nil {
			return nil, err
		}
		p, err := s.execProcess(req)
		if err != nil {
			return nil, err
		}
		if stdin != nil {
			p.Stdin = stdin
		}
		m, done, err := s.useJudged(ctx, c, in, req, api.OpExec, nil)
		if err != nil {
			return nil, err
		}
		defer done()
		return s.runExecWith(ctx, c, in, m, req, nil, func() (*execRun, error) {
			m.mu.Lock()
			callID := fmt.Sprintf("%s/c%d", m.info.ID, m.nextCall())
			m.mu.Unlock()
			x := s.newExecRun(c, callID, req, p, nil)
			teeOutput(p, stdout, stderr)
			return x, nil
		})
	}
}

// teeOutput also copies p's stdout to stdout and its stderr to stderr
// (nil: not).
func teeOutput(p *sandbox.Process, stdout, stderr io.Writer) {
	if stdout != nil {
		p.Stdout = io.MultiWriter(p.Stdout, stdout)
	}
	if stderr != nil {
		p.Stderr = io.MultiWriter(p.Stderr, stderr)
	}
}

// teeWriter passes writes to w until w fails; it never fails itself (the
// process's output is still captured), and keeps w's first error.
type teeWriter struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		if _, err := t.w.Write(p); err != nil {
			t.err = err
		}
	}
	return len(p), nil
}

func (t *teeWriter) failed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Exec runs one process in a step's sandbox to its end, as a process.exec
// of the run's owner. Its result keeps at most stepOutputLimit bytes of
// each stream; req.Stdout gets the whole stdout. A failure to write to
// req.Stdout is an error, returned with the result.
func (b wfBackend) Exec(ctx context.Context, o engine.Owner, sandboxID string, req engine.ExecRequest) (*sandbox.Result, error) {
	ereq := stepExec(sandboxID, req)
	tee, stdout := stepStdout(req.Stdout)
	resp, err := b.s.dispatch(ctx, ownerCaller(o), api.OpExec, b.s.execStep(req.Stdin, stdout, nil), internalInput(ereq))
	return stepResult(resp, err, tee, nil)
}

// stepExec is the process.exec of a step's process in sandbox id.
func stepExec(id string, req engine.ExecRequest) api.Exec {
	return api.Exec{Sandbox: id, Args: req.Args, Env: req.Env, TimeoutMs: millisCeil(req.Timeout), OutputLimit: stepOutputLimit}
}

// stepStdout is the writer a step's stdout is copied to, w (nil: none)
// behind a teeWriter, and that teeWriter (nil when w is).
func stepStdout(w io.Writer) (*teeWriter, io.Writer) {
	if w == nil {
		return nil, nil
	}
	tee := &teeWriter{w: w}
	return tee, tee
}

// stepResult is the result of a step's exec that answered resp or err,
// which it releases; a failure of tee or teeErr (the copies of stdout and
// stderr, nil: none) is an error, returned with the result.
func stepResult(resp any, err error, tee, teeErr *teeWriter) (*sandbox.Result, error) {
	defer releaseAnswer(resp)
	if err != nil {
		return nil, err
	}
	res, err := answerResult(resp)
	if err != nil {
		return nil, err
	}
	if tee != nil {
		if err := tee.failed(); err != nil {
			return res, fmt.Errorf("copying the stdout of the step's process: %w", err)
		}
	}
	if teeErr != nil {
		if err := teeErr.failed(); err != nil {
			return res, fmt.Errorf("copying the stderr of the process: %w", err)
		}
	}
	return res, nil
}

// CreateExec makes a step's sandbox and runs its process in it: a
// sandbox.create and then a process.exec of the run's owner, each judged,
// recorded and audited as its own call, as Create then Exec. When the
// runtime can hand out a sandbox before its setup has finished
// (sandbox.EarlyCreator) and the sandbox's policy allows the command
// outright, the process is sent to the sandbox with its setup (createFor)
// and runs as soon as the sandbox is ready, while the daemon records the
// create; its process.exec then takes up the decision made at that time
// (earlyExec). Otherwise (an ask or a deny, a sandbox from a warm pool, a
// runtime without it) the exec is judged and run after the create, as
// Exec. Both ways stdin and stdout are as Exec's.
func (b wfBackend) CreateExec(ctx context.Context, o engine.Owner, c engine.CreateRequest, x engine.ExecRequest, created func(string)) (string, *sandbox.Result, error) {
	creq, st := stepCreate(c)
	sb, res, err := b.s.createExec(ctx, ownerCaller(o), ownExec{create: creq, step: st, exec: stepExec("", x), stdin: x.Stdin, stdout: x.Stdout},
		func(sb *api.Sandbox) { created(sb.ID) })
	if sb == nil {
		return "", nil, capacityError(err)
	}
	return sb.ID, res, err
}

// ownExec is a sandbox the daemon makes for its own work and the process
// it runs in it (a workflow step's, a build's).
type ownExec struct {
	create api.CreateSandbox
	step   *stepSandbox
	// exec is the process's process.exec, its Sandbox empty.
	exec api.Exec
	// stdin (nil: none) is the process's standard input; stdout and
	// stderr (nil: not) also get what it writes there, all of it.
	stdin          io.Reader
	stdout, stderr io.Writer
}

// createExec makes x's sandbox and runs its process in it, as c: a
// sandbox.create and then a process.exec, each judged, recorded and
// audited as its own call (see CreateExec), the process started with the
// sandbox's setup where the runtime and the policy allow. created is
// called with the sandbox once it exists. The sandbox is nil when the
// create failed (its error returned); a failure of the exec, or of a copy
// of its output (x.stdout, x.stderr), is returned with the sandbox.
func (s *Service) createExec(ctx context.Context, c Caller, x ownExec, created func(*api.Sandbox)) (*api.Sandbox, *sandbox.Result, error) {
	ereq := x.exec
	p, err := s.execProcess(&ereq)
	if err != nil {
		// A body the exec refuses is refused by the exec's own call,
		// in the sandbox made first, as a create then an exec would.
		sb, err := s.createOwn(ctx, c, x.create, x.step, nil)
		if err != nil {
			return nil, nil, err
		}
		created(sb)
		ereq.Sandbox = sb.ID
		tee, stdout := stepStdout(x.stdout)
		teeErr, stderr := stepStdout(x.stderr)
		resp, err := s.dispatch(ctx, c, api.OpExec, s.execStep(x.stdin, stdout, stderr), internalInput(ereq))
		res, err := stepResult(resp, err, tee, teeErr)
		return sb, res, err
	}
	if x.stdin != nil {
		p.Stdin = x.stdin
	}
	tee, stdout := stepStdout(x.stdout)
	teeErr, stderr := stepStdout(x.stderr)
	first := &firstExec{req: &ereq, p: p, ctx: ctx, stdout: stdout, stderr: stderr}
	sb, err := s.createOwn(ctx, c, x.create, x.step, first)
	if err != nil {
		first.abandon()
		return nil, nil, err
	}
	created(sb)
	eq := x.exec
	eq.Sandbox = sb.ID
	in := internalInput(eq)
	var resp any
	if first.run == nil {
		resp, err = s.dispatch(ctx, c, api.OpExec, s.execStep(x.stdin, stdout, stderr), in)
	} else {
		taken := false
		resp, err = s.dispatch(ctx, c, api.OpExec, s.earlyStep(first, &taken), in)
		if !taken {
			first.abandon()
		}
		if first.recorded != nil {
			first.recorded() // written already, unless the exec failed before its record
		}
	}
	res, err := stepResult(resp, err, tee, teeErr)
	return sb, res, err
}

// earlyStep is the handler of the process.exec of a step whose process
// createFor started with its sandbox: earlyExec, which records it with the
// decision made then. taken is set once the handler has the process (the
// caller abandons it otherwise: the call was refused before it ran).
func (s *Service) earlyStep(first *firstExec, taken *bool) handler {
	return func(ctx context.Context, c Caller, in *input) (any, error) {
		req, err := decode[api.Exec](in)
		if err != nil {
			return nil, err
		}
		*taken = true
		return s.earlyExec(ctx, c, in, req, first)
	}
}

// answerResult is the result an exec answered: the result itself, or an
// execAnswer with its output read from its captures (which the caller
// releases after).
func answerResult(resp any) (*sandbox.Result, error) {
	switch r := resp.(type) {
	case *sandbox.Result:
		return r, nil
	case *execAnswer:
		res := *r.res
		res.Stdout, res.Stderr = r.stdout.c.String(), r.stderr.c.String()
		return &res, nil
	case nil:
		return nil, errors.New("the exec answered no result")
	}
	return nil, fmt.Errorf("the exec answered a %T", resp)
}

// Snapshot captures a step's sandbox, as a snapshot.create of the run's
// owner.
func (b wfBackend) Snapshot(ctx context.Context, o engine.Owner, sandboxID string) (string, error) {
	resp, err := b.s.call(ctx, ownerCaller(o), api.OpSnapshotCreate, internalInput(api.CreateSnapshot{Sandbox: sandboxID}))
	if err != nil {
		return "", err
	}
	return resp.(*api.Snapshot).ID, nil
}

// Collect copies paths out of a step's sandbox into dir, each a
// file.download of the run's owner: see Service.collect.
func (b wfBackend) Collect(ctx context.Context, o engine.Owner, sandboxID string, paths []string, dir string) ([]api.WorkflowArtifact, error) {
	return b.s.collect(ctx, ownerCaller(o), sandboxID, paths, dir)
}

// Delete removes a step's sandbox, as a sandbox.delete of the run's owner;
// a sandbox already gone is no error.
func (b wfBackend) Delete(ctx context.Context, o engine.Owner, sandboxID string) error {
	_, err := b.s.call(ctx, ownerCaller(o), api.OpSandboxDelete, internalInput(api.SandboxRef{Sandbox: sandboxID}))
	if isCode(err, api.CodeNotFound) {
		return nil
	}
	return err
}

// DeleteSnapshot removes a snapshot of the run, as a snapshot.delete of
// the run's owner; a snapshot already gone is no error.
func (b wfBackend) DeleteSnapshot(ctx context.Context, o engine.Owner, snapshotID string) error {
	_, err := b.s.call(ctx, ownerCaller(o), api.OpSnapshotDelete, internalInput(api.SnapshotRef{Snapshot: snapshotID}))
	if isCode(err, api.CodeNotFound) {
		return nil
	}
	return err
}

// liveBudget is a budget the engine made, and whose.
type liveBudget struct {
	tenant, actor string
	b             sandbox.Budget
	limits        sandbox.Limits
}

// budget returns tenant's live budget id; another tenant's is not_found.
func (w *workflows) budget(tenant, id string) (*liveBudget, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lb := w.budgets[id]
	if lb == nil || lb.tenant != tenant {
		return nil, api.Errorf(api.CodeNotFound, "no budget %q", id)
	}
	return lb, nil
}

// NewBudget makes a group's budget through the runtime (sandbox.Budgeter).
// Its release removes it, and writes a workflow.budget audit event with
// the CPU time its sandboxes used.
func (b wfBackend) NewBudget(ctx context.Context, o engine.Owner, id string, l sandbox.Limits) (func(), error) {
	rt, ok := b.s.cfg.Runtime.(sandbox.Budgeter)
	if !ok {
		return nil, fmt.Errorf("budget %s: this runtime cannot make budgets: %w", id, sandbox.ErrUnsupported)
	}
	w := b.s.wf
	w.mu.Lock()
	if w.budgets[id] != nil {
		w.mu.Unlock()
		return nil, fmt.Errorf("budget %s exists already", id)
	}
	// Reserved while the runtime makes it.
	lb := &liveBudget{tenant: o.Tenant, actor: o.Actor, limits: l}
	w.budgets[id] = lb
	w.mu.Unlock()
	bud, err := rt.NewBudget(id, l)
	if err != nil {
		w.mu.Lock()
		delete(w.budgets, id)
		w.mu.Unlock()
		return nil, fmt.Errorf("budget %s: %w", id, err)
	}
	w.mu.Lock()
	lb.b = bud
	w.mu.Unlock()
	start := time.Now()
	var once sync.Once
	return func() {
		once.Do(func() { b.s.releaseBudget(id, lb, start) })
	}, nil
}

// releaseBudget removes budget id and audits what it used.
func (s *Service) releaseBudget(id string, lb *liveBudget, start time.Time) {
	cpu, cerr := lb.b.CPUTime()
	err := lb.b.Close()
	if err != nil {
		s.log.Error("removing a workflow budget", "budget", id, "err", err)
	}
	s.wf.mu.Lock()
	delete(s.wf.budgets, id)
	s.wf.mu.Unlock()
	res := map[string]any{}
	if cerr == nil {
		res["cpu_ms"] = cpu.Milliseconds()
	}
	ev := audit.Event{Kind: "workflow.budget", Tenant: lb.tenant, Actor: lb.actor,
		Request: mustJSON(map[string]any{"budget": id, "limits": lb.limits}), Result: mustJSON(res),
		DurationMs: time.Since(start).Milliseconds(), Error: errString(errors.Join(cerr, err))}
	s.record(ev)
}
