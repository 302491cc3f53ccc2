package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/workflow"
)

// Labels of every step's sandbox.
const (
	LabelRun     = "moat.workflow.run"
	LabelStep    = "moat.workflow.step"
	LabelAttempt = "moat.workflow.attempt"
)

// AttemptInterrupted is the state of an attempt that was running when its
// daemon stopped (WorkflowAttempt.State); the step runs again.
const AttemptInterrupted = "interrupted"

// sandboxMargin is added to a step's timeout to bound its sandbox's life:
// time to create it, snapshot it and collect its outputs.
const sandboxMargin = time.Minute

// spec is everything one attempt needs, prepared under the run's lock so
// the attempt's goroutine reads nothing of the run's state.
type spec struct {
	step     string
	group    string
	attempt  int
	create   CreateRequest
	exec     ExecRequest
	snapshot string // workflow.SnapshotNone, Light or Full
	outputs  []string
	outDir   string
	// budget is the innermost budget around the step (nil: none), of
	// group budgetGroup.
	budget      *budgetSlot
	budgetGroup string
	// stdout is where the attempt's stdout is kept for its consumers;
	// stdin is the producer's stdout this attempt reads.
	stdout *tee
	stdin  *tee
	// build is the build of a build step's attempt (build.go), which
	// then has no create and no exec; nil for a run step.
	build *BuildRequest
	// agent is the agent run of an agent step's attempt (agent.go),
	// which then has no create and no exec, and timeout bounds it; nil
	// for other steps.
	agent   *AgentRequest
	timeout time.Duration
	// err, when set, fails the attempt before it makes a sandbox (a
	// precondition the scheduler could not check).
	err error
}

// outcome is how an attempt ended.
type outcome struct {
	ok        bool
	result    *sandbox.Result
	err       error
	snapshot  string
	artifacts []api.WorkflowArtifact
	// sandbox is the attempt's sandbox, deleted once the attempt's end
	// is recorded; budget the budget it ran in (nil for none), whose
	// hold is let go after that delete.
	sandbox string
	budget  *budgetSlot
	// build is the build a build step's attempt ran ("" for none).
	build string
	// agent is the agent run an agent step's attempt ran ("" for none).
	agent string
}

// start begins the next attempt of a ready step: it records the attempt
// and starts its goroutine. Called with mu held, by the scheduler.
func (r *run) start(rt *stepRT, now time.Time) {
	ps := rt.ps
	st := r.step(ps.ID)
	st.Attempt++
	n := st.Attempt
	if st.State == api.StepPending {
		st.Started = &now
	}
	st.State = api.StepRunning
	st.Ended = nil
	st.Error = ""
	st.Result = nil
	rt.order = 0
	var startSnap string
	if ps.From != "" {
		startSnap = r.step(ps.From).Snapshot
	}
	st.Attempts = append(st.Attempts, api.WorkflowAttempt{
		Attempt: n, StartSnapshot: startSnap, Template: ps.Template,
		State: api.StepRunning, Started: now,
	})
	if r.rec.Run.State == api.RunPending {
		r.rec.Run.State = api.RunRunning
	}
	for _, g := range ps.Groups {
		r.busy[g]++
	}
	r.active++
	sp := r.spec(ps, n, startSnap)
	msg := "a fresh sandbox"
	if ps.Template != "" {
		msg += " of template " + ps.Template
	}
	if startSnap != "" {
		msg = "the snapshot of step " + ps.From
	}
	if ps.Build != nil {
		msg = buildFrom(ps.Build)
	}
	if ps.Agent != nil {
		msg = agentFrom(ps.Agent)
	}
	r.emit(api.WorkflowEvent{
		Type: api.WfStepStarted, Step: ps.ID, Group: ps.Group, Attempt: n,
		Snapshot: startSnap, Message: fmt.Sprintf("attempt %d from %s", n, msg),
	})
	ctx, cancel := context.WithCancel(r.ctx)
	rt.cancel = cancel
	r.e.wg.Add(1)
	r.attempts.Add(1)
	go r.attempt(ctx, sp)
}

// spec prepares attempt n of ps.
func (r *run) spec(ps *workflow.PlanStep, n int, startSnap string) *spec {
	sp := &spec{step: ps.ID, group: ps.Group, attempt: n, snapshot: ps.Snapshot, outputs: ps.Outputs}
	if ps.From != "" && startSnap == "" {
		sp.err = fmt.Errorf("the snapshot of step %s, which this step starts from, is gone", ps.From)
	}
	env := stepEnv(ps.Env, r.id, ps.ID, n)
	labels := maps.Clone(r.rec.Run.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelRun] = r.id
	labels[LabelStep] = ps.ID
	labels[LabelAttempt] = strconv.Itoa(n)
	if ps.Build != nil {
		r.buildSpec(sp, ps, labels)
		return sp
	}
	if ps.Agent != nil {
		r.agentSpec(sp, ps, labels)
		return sp
	}
	limits := ps.Limits
	limits.CPUWeight = cmp.Or(limits.CPUWeight, cpuWeight(ps.Priority))
	sp.create = CreateRequest{
		Template: ps.Template, Snapshot: startSnap, Limits: limits, Env: env,
		Policy: ps.Policy, Network: ps.Network, Labels: labels,
	}
	if ps.Timeout > 0 {
		sp.create.Timeout = ps.Timeout + sandboxMargin
	}
	sp.exec = ExecRequest{Args: slices.Clone(ps.Args), Env: env, Timeout: ps.Timeout}
	for _, id := range slices.Sorted(maps.Keys(ps.Inputs)) {
		dir, err := r.stepDir(id)
		if err != nil {
			sp.err = cmp.Or(sp.err, err)
			continue
		}
		sp.create.Inputs = append(sp.create.Inputs, sandbox.Bind{Source: outDir(dir), Target: ps.Inputs[id]})
	}
	if len(ps.Outputs) > 0 {
		dir, err := r.stepDir(ps.ID)
		sp.err = cmp.Or(sp.err, err)
		sp.outDir = outDir(dir)
	}
	for _, g := range ps.Groups { // innermost first
		if gr := r.groups[g]; gr != nil && gr.budget != nil {
			gr.used = true
			sp.budget, sp.budgetGroup = gr.budget, g
			sp.create.Budget = gr.budget.id
			break
		}
	}
	rt := r.steps[ps.ID]
	rt.tee = nil
	if r.producer(ps.ID) {
		dir, err := r.stepDir(ps.ID)
		sp.err = cmp.Or(sp.err, err)
		rt.tee = newTee(stdoutFile(dir, n))
		sp.stdout = rt.tee
	}
	if ps.StdinFrom != "" {
		t, err := r.stdinOf(ps.StdinFrom)
		sp.err = cmp.Or(sp.err, err)
		sp.stdin = t
	}
	return sp
}

// stepEnv is a step's environment with the engine's variables, which
// replace any of the same name the document set.
func stepEnv(env []string, run, step string, attempt int) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !workflow.ReservedEnv(k) {
			out = append(out, kv)
		}
	}
	return append(out,
		workflow.EnvRun+"="+run,
		workflow.EnvStep+"="+step,
		workflow.EnvAttempt+"="+strconv.Itoa(attempt))
}

// producer reports whether some step of the run reads id's stdout.
func (r *run) producer(id string) bool {
	return slices.ContainsFunc(r.plan.Steps, func(ps *workflow.PlanStep) bool { return ps.StdinFrom == id })
}

// stdinOf returns the stdout of producer's latest attempt for a consumer
// that starts now. A producer that succeeded under an earlier engine has
// no tee in memory: its file is read as it is.
func (r *run) stdinOf(producer string) (*tee, error) {
	if t := r.steps[producer].tee; t != nil {
		return t, nil
	}
	st := r.step(producer)
	if st.State != api.StepSucceeded {
		return nil, fmt.Errorf("step %s started before a step read its stdout: its stdout was not kept", producer)
	}
	dir, err := r.stepDir(producer)
	if err != nil {
		return nil, err
	}
	t := endedTee(stdoutFile(dir, st.Attempt))
	r.steps[producer].tee = t
	return t, nil
}

// stepDir is the artifact directory of one of the run's steps.
func (r *run) stepDir(step string) (string, error) {
	if r.e.o.ArtifactDir == "" {
		return "", errors.New("the engine has no artifact directory (outputs, inputs and stdin_from need one)")
	}
	if step == "" || step == "." || step == ".." || strings.ContainsAny(step, "/\\\x00") {
		return "", fmt.Errorf("step id %q cannot name a directory", step)
	}
	return r.e.o.ArtifactDir + "/" + r.id + "/" + step, nil
}

// outDir is where a step's outputs are collected, in its directory dir
// (stepDir).
func outDir(dir string) string { return dir + "/out" }

// stdoutFile is the kept stdout of a step's attempt n, in its directory
// dir (stepDir).
func stdoutFile(dir string, attempt int) string {
	return dir + "/stdout." + strconv.Itoa(attempt)
}

// attempt runs one attempt and reports how it ended. The sandbox is
// deleted after the report, off the path of the steps that wait for this
// one (a chain's next step starts meanwhile); a budget is released only
// once every sandbox that ran in it is deleted (budgetSlot.close waits).
func (r *run) attempt(ctx context.Context, sp *spec) {
	defer r.e.wg.Done()
	defer r.attempts.Done()
	out := r.execute(ctx, sp)
	r.report(sp, out)
	if out.sandbox != "" {
		r.deleteSandbox(ctx, out.sandbox)
	}
	if out.budget != nil {
		out.budget.let()
	}
}

// execute runs the attempt: budget, sandbox and process (createExec),
// snapshot, outputs. The sandbox it made is in the outcome, for attempt
// to delete; a snapshot taken by an attempt that failed after taking it
// is deleted here.
func (r *run) execute(ctx context.Context, sp *spec) (out outcome) {
	fail := func(err error) outcome {
		out.err = err
		return out
	}
	if sp.stdout != nil {
		defer sp.stdout.end()
	}
	if sp.err != nil {
		return fail(sp.err)
	}
	o := r.rec.Owner // never changes once the run exists
	if sp.build != nil {
		return r.executeBuild(ctx, o, sp)
	}
	if sp.agent != nil {
		return r.executeAgent(ctx, o, sp)
	}
	if sp.stdout != nil {
		if err := sp.stdout.create(); err != nil {
			return fail(fmt.Errorf("keep stdout: %w", err))
		}
	}
	if sp.budget != nil {
		made, err := sp.budget.ensure(ctx, r.e.b, o)
		if err != nil {
			return fail(fmt.Errorf("budget of group %s: %w", sp.budgetGroup, err))
		}
		out.budget = sp.budget
		if made {
			r.note(func() {
				r.emit(api.WorkflowEvent{Type: api.WfGroupBudget, Group: sp.budgetGroup, Message: describeBudget(sp.budget.id, sp.budget.limits)})
			})
		}
	}
	req := sp.exec
	if sp.stdin != nil {
		f := sp.stdin.follow(ctx)
		defer f.Close()
		req.Stdin = f
	}
	if sp.stdout != nil {
		req.Stdout = sp.stdout
	}
	id, res, err := r.createExec(ctx, o, sp, req)
	out.sandbox = id
	if sp.stdout != nil {
		sp.stdout.end()
	}
	out.result = res
	if err != nil {
		return fail(err)
	}
	if res == nil {
		return fail(errors.New("exec: no result"))
	}
	if res.ExitCode != 0 {
		return fail(exitError(res))
	}
	if sp.snapshot != workflow.SnapshotNone {
		snap, err := r.e.b.Snapshot(ctx, o, id)
		if err != nil {
			return fail(fmt.Errorf("snapshot: %w", err))
		}
		out.snapshot = snap
		r.note(func() {
			r.step(sp.step).Snapshot = snap
			r.emit(api.WorkflowEvent{Type: api.WfStepSnapshot, Step: sp.step, Group: sp.group, Attempt: sp.attempt, Snapshot: snap, Message: sp.snapshot})
		})
	}
	if len(sp.outputs) > 0 {
		arts, err := r.collect(ctx, o, id, sp)
		if err != nil {
			if out.snapshot != "" {
				r.deleteSnapshots([]string{out.snapshot})
				out.snapshot = ""
			}
			return fail(err)
		}
		out.artifacts = arts
		r.note(func() {
			r.emit(api.WorkflowEvent{Type: api.WfStepArtifacts, Step: sp.step, Group: sp.group, Attempt: sp.attempt, Artifacts: arts})
		})
	}
	out.ok = true
	return out
}

// createExec makes the attempt's sandbox and runs its process x in it:
// in one call when the backend is a CreateExecer (the process queued
// behind the sandbox's setup), else Create then Exec. Either way it waits
// out a create refused for room (ErrCapacity), journals the sandbox's id
// as soon as it is known (sandboxMade), and returns that id whenever the
// sandbox was made, with an error or not.
func (r *run) createExec(ctx context.Context, o Owner, sp *spec, x ExecRequest) (string, *sandbox.Result, error) {
	ce, ok := r.e.b.(CreateExecer)
	if !ok {
		id, err := r.e.create(ctx, o, sp.create)
		if err != nil {
			return "", nil, fmt.Errorf("create sandbox: %w", err)
		}
		r.sandboxMade(sp, id)
		res, err := r.e.b.Exec(ctx, o, id, x)
		if err != nil {
			return id, res, fmt.Errorf("exec: %w", err)
		}
		return id, res, nil
	}
	var made string
	id, res, err := r.e.waitRoom(ctx, func() (string, *sandbox.Result, error) {
		return ce.CreateExec(ctx, o, sp.create, x, func(id string) {
			if made == "" && id != "" {
				made = id
				r.sandboxMade(sp, id)
			}
		})
	})
	// A backend that named the sandbox only through created still gets
	// it deleted.
	id = cmp.Or(id, made)
	switch {
	case err != nil && id == "":
		return "", res, fmt.Errorf("create sandbox: %w", err)
	case err != nil:
		return id, res, fmt.Errorf("exec: %w", err)
	}
	return id, res, nil
}

// sandboxMade journals the attempt's sandbox, at once but without waiting
// for the write (noteSoon): Recover deletes it if the daemon stops while
// it lives.
func (r *run) sandboxMade(sp *spec, id string) {
	r.noteSoon(func() {
		if a := attemptOf(r.step(sp.step), sp.attempt); a != nil {
			a.Sandbox = id
		}
		r.emit(api.WorkflowEvent{Type: api.WfStepSandbox, Step: sp.step, Group: sp.group, Attempt: sp.attempt, Sandbox: id})
	})
}

// collect copies the step's outputs into a fresh out directory (the
// previous attempt's is removed).
func (r *run) collect(ctx context.Context, o Owner, id string, sp *spec) ([]api.WorkflowArtifact, error) {
	if err := os.RemoveAll(sp.outDir); err != nil {
		return nil, fmt.Errorf("outputs: clear %s: %w", sp.outDir, err)
	}
	if err := os.MkdirAll(sp.outDir, 0o700); err != nil {
		return nil, fmt.Errorf("outputs: %w", err)
	}
	arts, err := r.e.b.Collect(ctx, o, id, sp.outputs, sp.outDir)
	if err != nil {
		return nil, fmt.Errorf("outputs: %w", err)
	}
	return arts, nil
}

// exitError says why a process that ran did not succeed.
func exitError(res *sandbox.Result) error {
	msg := fmt.Sprintf("exit code %d", res.ExitCode)
	if res.ExitReason != "" && res.ExitReason != sandbox.ReasonExited {
		msg += " (" + string(res.ExitReason) + ")"
	}
	if res.Error != "" {
		msg += ": " + res.Error
	}
	return errors.New(msg)
}

// describeBudget is the message of a group.budget event.
func describeBudget(id string, l sandbox.Limits) string {
	parts := []string{"budget " + id}
	if l.CPUs > 0 {
		parts = append(parts, "cpus="+strconv.FormatFloat(l.CPUs, 'g', -1, 64))
	}
	if l.MemoryBytes > 0 {
		parts = append(parts, "memory="+strconv.FormatInt(l.MemoryBytes, 10))
	}
	if l.Pids > 0 {
		parts = append(parts, "pids="+strconv.FormatInt(l.Pids, 10))
	}
	return strings.Join(parts, " ")
}

// deleteSandbox removes an attempt's sandbox, even when the attempt was
// cancelled.
func (r *run) deleteSandbox(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := r.e.b.Delete(ctx, r.rec.Owner, id); err != nil {
		r.e.log.Warn("workflow: delete sandbox", "run", r.id, "sandbox", id, "err", err)
	}
	r.e.capacity.freed()
}

// note applies a change made while an attempt runs (unless the engine is
// closing). Its state and events are journalled with the next commit (the
// attempt's end), so that an attempt costs three durable writes (start,
// sandbox, end) whatever else it does; a crash before the end loses at
// most a snapshot taken just before it (left in the store, unreferenced).
func (r *run) note(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing() {
		return
	}
	f()
}

// noteSoon is note, journalled at once but not waited for: the attempt's
// sandbox, which Recover deletes if the daemon stops while it lives. The
// attempt goes on (its process starts) while the write is made.
func (r *run) noteSoon(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing() {
		return
	}
	f()
	r.e.wg.Add(1)
	go func() {
		defer r.e.wg.Done()
		r.mu.Lock()
		defer r.mu.Unlock()
		// Also when the engine closes meanwhile: the state journalled
		// is still this attempt running, now with its sandbox, which is
		// what Recover needs.
		if len(r.batch) > 0 {
			r.commit()
		}
	}()
}

// report records how an attempt ended: success, a retry (after its
// backoff; from scratch, the step's `from` chain runs again first),
// failure, or cancellation. When the engine is closing, a failed attempt
// is not recorded: the journal keeps it running for Recover.
func (r *run) report(sp *spec, out outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.poke()
	rt := r.steps[sp.step]
	if rt.cancel != nil {
		rt.cancel()
		rt.cancel = nil
	}
	r.active--
	for _, g := range rt.ps.Groups {
		r.busy[g]--
	}
	if !out.ok && r.closing() {
		return
	}
	now := r.e.now()
	st := r.step(sp.step)
	a := attemptOf(st, sp.attempt)
	a.Ended = &now
	a.Result = out.result
	a.Build = out.build
	if out.agent != "" {
		a.Agent = out.agent
	}
	st.Result = out.result
	switch {
	case out.ok:
		a.State = api.StepSucceeded
		st.State = api.StepSucceeded
		st.Ended = &now
		st.Snapshot = out.snapshot
		st.Outputs = out.artifacts
		r.emit(api.WorkflowEvent{Type: api.WfStepSucceeded, Step: sp.step, Group: sp.group, Attempt: sp.attempt, Snapshot: out.snapshot, Result: out.result})
	case r.cancelled:
		a.State = api.StepCancelled
		a.Error = "the run was cancelled"
		st.State = api.StepCancelled
		st.Ended = &now
		st.Snapshot = ""
		r.emit(api.WorkflowEvent{Type: api.WfStepCancelled, Step: sp.step, Group: sp.group, Attempt: sp.attempt, Message: a.Error, Result: out.result})
	default:
		msg := out.err.Error()
		a.State = api.StepFailed
		a.Error = msg
		st.Snapshot = ""
		tries := r.rec.Tries[sp.step] + 1
		r.rec.Tries[sp.step] = tries
		if tries >= rt.ps.Retry.Attempts {
			r.fail(sp.step, msg, now)
			break
		}
		wait := backoff(rt.ps.Retry.Backoff, tries)
		st.State = api.StepRetrying
		st.Error = msg
		rt.readyAt = now.Add(wait)
		how := "from the snapshot it started from"
		switch {
		case rt.ps.Build != nil:
			how = "as a new build"
		case rt.ps.Agent != nil:
			how = "as a new agent run"
		case rt.ps.From == "":
			how = "in a fresh sandbox"
		}
		if rt.ps.Retry.From == workflow.FromScratch && rt.ps.From != "" {
			ids := r.chain(rt.ps)
			for _, id := range ids {
				r.reset(id)
			}
			slices.Reverse(ids)
			how = "from scratch, after " + joinIDs(ids) + " run again"
		}
		r.emit(api.WorkflowEvent{
			Type: api.WfStepRetrying, Step: sp.step, Group: sp.group, Attempt: sp.attempt, Result: out.result,
			Message: fmt.Sprintf("%s; retry %d of %d in %s, %s", msg, tries, rt.ps.Retry.Attempts-1, wait, how),
		})
	}
	if st.State != api.StepFailed && !r.cancelled && r.ctx.Err() == nil {
		// What this end lets start (the next step of a chain, a retry
		// without backoff) starts now, journalled in the same write as
		// the end: a handoff costs no second write and no wake-up of the
		// scheduler.
		ready, _, _ := r.readySteps(now)
		r.startReady(ready, now)
	}
	r.commit()
}
