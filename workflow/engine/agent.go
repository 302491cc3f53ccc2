package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/workflow"
)

// An agent step's attempt is one agent run of the daemon (agent.create),
// run through the Backend's optional Agenter to its end: its inputs are
// bound into the agent's sandbox as into a run step's, its outputs are
// collected from that sandbox (kept for it by the backend) with
// Backend.Collect, as a run step's are, and the sandbox is then deleted
// with Backend.Delete. The run's id is journalled in the attempt
// (WorkflowAttempt.Agent) as soon as it exists; its answer is the
// attempt's stdout.

// agentAnswerLimit caps the answer kept in an attempt's result (and so in
// the run's record); agent.get has all of it.
const agentAnswerLimit = 64 << 10

// agentSpec prepares attempt sp of ps, an agent step: its run, inputs and
// out directory.
func (r *run) agentSpec(sp *spec, ps *workflow.PlanStep, labels map[string]string) {
	a := ps.Agent
	req := &AgentRequest{
		Run:  api.CreateAgentRun{Document: a.Document, Agent: a.Name, Task: a.Task, Labels: labels},
		Keep: len(ps.Outputs) > 0,
	}
	if a.Document == "" {
		sp.err = cmp.Or(sp.err, errors.New("agent: the step has no agents document"))
	}
	for _, id := range slices.Sorted(maps.Keys(ps.Inputs)) {
		dir, err := r.stepDir(id)
		if err != nil {
			sp.err = cmp.Or(sp.err, err)
			continue
		}
		req.Inputs = append(req.Inputs, sandbox.Bind{Source: outDir(dir), Target: ps.Inputs[id]})
	}
	if len(ps.Outputs) > 0 {
		dir, err := r.stepDir(ps.ID)
		sp.err = cmp.Or(sp.err, err)
		sp.outDir = outDir(dir)
	}
	// The attempt before, if a stop of the daemon interrupted it, may
	// have left its run going.
	st := r.step(ps.ID)
	if prev := attemptOf(st, sp.attempt-1); prev != nil && prev.State == AttemptInterrupted {
		req.Previous = prev.Agent
	}
	sp.agent = req
	sp.timeout = ps.Timeout
}

// agentFrom is what an agent step's attempt starts from, for its
// step.started event.
func agentFrom(a *workflow.Agent) string {
	return "a run of agent " + a.Name
}

// executeAgent runs an agent step's attempt: the run to its end (waiting
// out ErrCapacity), then its outputs from the kept sandbox, which the
// outcome names for attempt to delete.
func (r *run) executeAgent(ctx context.Context, o Owner, sp *spec) (out outcome) {
	fail := func(err error) outcome {
		out.err = err
		return out
	}
	ag, ok := r.e.b.(Agenter)
	if !ok {
		return fail(errors.New("agent: this workflow backend cannot run agents"))
	}
	actx := ctx
	if sp.timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, sp.timeout)
		defer cancel()
	}
	req := *sp.agent
	req.Started = func(id string) { r.agentStarted(sp, id) }
	var run *api.AgentRun
	_, _, err := r.e.waitRoom(actx, func() (string, *sandbox.Result, error) {
		var err error
		run, err = ag.Agent(actx, o, req)
		return "", nil, err
	})
	if run != nil {
		// Its sandboxes are gone (but a kept one): a create waiting for
		// room may try again, and so may an agent run.
		r.e.capacity.freed()
		out.agent = run.ID
		out.result = agentResult(run)
		if req.Keep {
			out.sandbox = keptSandbox(run)
		}
	}
	timedOut := sp.timeout > 0 && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded)
	switch {
	case timedOut:
		if out.result != nil {
			out.result.ExitReason = sandbox.ReasonTimeout
		}
		return fail(fmt.Errorf("agent: the step's timeout (%s) ran out", sp.timeout))
	case err != nil:
		return fail(fmt.Errorf("agent: %w", err))
	case run == nil:
		return fail(errors.New("agent: no record"))
	case run.State != api.AgentSucceeded:
		return fail(agentError(run))
	}
	if len(sp.outputs) > 0 {
		if out.sandbox == "" {
			return fail(fmt.Errorf("agent run %s: its agent made no sandbox (no tool call), so it has no outputs to collect", run.ID))
		}
		arts, err := r.collect(ctx, o, out.sandbox, sp)
		if err != nil {
			return fail(err)
		}
		out.artifacts = arts
		r.note(func() {
			r.emit(api.WorkflowEvent{Type: api.WfStepArtifacts, Step: sp.step, Group: sp.group, Attempt: sp.attempt,
				Artifacts: arts, Message: "agent run " + run.ID})
		})
	}
	out.ok = true
	return out
}

// agentStarted journals the attempt's agent run (a step.agent event), at
// once but without waiting for the write: a stop of the daemon meanwhile
// leaves it named for the next attempt (AgentRequest.Previous).
func (r *run) agentStarted(sp *spec, id string) {
	r.noteSoon(func() {
		if a := attemptOf(r.step(sp.step), sp.attempt); a != nil {
			a.Agent = id
		}
		r.emit(api.WorkflowEvent{Type: api.WfStepAgent, Step: sp.step, Group: sp.group, Attempt: sp.attempt, Agent: id})
	})
}

// keptSandbox is the sandbox of run's first agent ("" for none).
func keptSandbox(run *api.AgentRun) string {
	for _, a := range run.Agents {
		if a.Name == run.Agent {
			return a.Sandbox
		}
	}
	return ""
}

// agentError says why agent run run did not succeed.
func agentError(run *api.AgentRun) error {
	msg := fmt.Sprintf("agent run %s %s", run.ID, run.State)
	if run.Error != "" {
		msg += ": " + run.Error
	}
	return errors.New(msg)
}

// agentResult is the result of an agent step's attempt: exit code 0 when
// its run succeeded (1 otherwise), the run's answer as stdout (its first
// agentAnswerLimit bytes), its duration, its error. nil when the run has
// not ended.
func agentResult(run *api.AgentRun) *sandbox.Result {
	if run.Ended == nil {
		return nil
	}
	res := &sandbox.Result{ExitReason: sandbox.ReasonExited, DurationMs: run.Ended.Sub(run.Created).Milliseconds(),
		StdoutBytes: int64(len(run.Answer)), Error: run.Error}
	if run.State != api.AgentSucceeded {
		res.ExitCode = 1
	}
	res.Stdout = run.Answer
	if len(res.Stdout) > agentAnswerLimit {
		cut := agentAnswerLimit
		for cut > 0 && !utf8.RuneStart(res.Stdout[cut]) {
			cut--
		}
		res.Stdout, res.Truncated = res.Stdout[:cut], true
	}
	return res
}
