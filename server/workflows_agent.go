package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/workflow/engine"
)

// A workflow's agent step (engine.Agenter) is an agent.create of the run's
// owner through the dispatcher, as an agent run started through the API:
// its document compiled and checked, its model calls made by the daemon's
// model client, its tool calls made as API calls of the owner (judged,
// approved, recorded, audited), its record and events kept. The step
// waits for its end by following its events (agent.events, follow); a
// step stopped first (the run cancelled, its timeout, the daemon
// stopping) cancels it (agent.cancel) and waits for that end, boundedly.
//
// What the step adds to the run's sandboxes the API cannot say: while the
// run is under way the step is registered (agentSteps) under the labels
// the engine gives the run (engine.LabelRun, LabelStep, LabelAttempt),
// which the run gives its sandboxes, and the agent runs' Backend makes
// its sandbox.create and sandbox.delete through agentSandboxCall: a
// create for a registered step, of the same tenant, gets the step's
// inputs as read-only binds of the engine's artifact directories (checked
// as a run step's: stepSandbox); the long-lived sandbox of the step's own
// agent (label agentLabelName), when the step has outputs, is kept from
// the run's delete and handed to the engine, which collects the outputs
// and deletes it. A forged label reaches only a registered step of the
// caller's own tenant, and adds no more than that step's read-only
// inputs.

var _ engine.Agenter = wfBackend{}

// agentLabelName is the label an agent run gives each of its sandboxes:
// the name of the agent it is for (package agent sets it, with
// moat.agent.run).
const agentLabelName = "moat.agent"

// agentWaitAfterCancel bounds the wait for the end of an agent run
// cancelled because its step was stopped.
const agentWaitAfterCancel = time.Minute

// Agent runs one agent run of an agent step: see the comment above.
func (b wfBackend) Agent(ctx context.Context, o engine.Owner, req engine.AgentRequest) (*api.AgentRun, error) {
	s, c := b.s, ownerCaller(o)
	if req.Previous != "" {
		s.stopAgentRun(ctx, c, req.Previous)
	}
	var step *agentStep
	if len(req.Inputs) > 0 || req.Keep {
		for _, in := range req.Inputs {
			if err := checkArtifactDir(s.wf.dir, in.Source); err != nil {
				return nil, fmt.Errorf("the input at %s: %w", in.Target, err)
			}
		}
		key, ok := agentStepKeyOf(c.Tenant, req.Run.Labels)
		if !ok {
			return nil, errors.New("the run's labels do not name its workflow step's attempt")
		}
		step = &agentStep{key: key, agent: req.Run.Agent, inputs: slices.Clone(req.Inputs), keep: req.Keep}
		s.wf.agentSteps.add(step)
	}
	resp, err := s.call(ctx, c, api.OpAgentCreate, internalInput(req.Run))
	if err != nil {
		s.endAgentStep(ctx, c, step)
		return nil, capacityError(err)
	}
	run, ok := resp.(*api.AgentRun)
	if !ok || run == nil {
		s.endAgentStep(ctx, c, step)
		return nil, fmt.Errorf("agent.create answered %T", resp)
	}
	if req.Started != nil {
		req.Started(run.ID)
	}
	final, err := s.awaitAgentRun(ctx, c, run.ID)
	kept := s.endAgentStep(ctx, c, step)
	if final == nil {
		if kept != "" {
			s.deleteOwn(ctx, c, kept)
		}
		return nil, err
	}
	return withKept(final, kept), err
}

// withKept is run with kept ("" for none) as the sandbox of its first
// agent: a copy, the answers' records left as they are.
func withKept(run *api.AgentRun, kept string) *api.AgentRun {
	out := *run
	out.Agents = slices.Clone(run.Agents)
	i := slices.IndexFunc(out.Agents, func(a api.AgentState) bool { return a.Name == run.Agent })
	switch {
	case i >= 0:
		out.Agents[i].Sandbox = kept
	case kept != "":
		out.Agents = append(out.Agents, api.AgentState{Name: run.Agent, Sandbox: kept})
	}
	return &out
}

// awaitAgentRun waits for the end of c's agent run id and returns its
// record. When ctx ends first, or following the run fails, the run is
// cancelled (a step that failed leaves no run going) and its record
// returned, once it ended, with that error.
func (s *Service) awaitAgentRun(ctx context.Context, c Caller, id string) (*api.AgentRun, error) {
	run, err := s.followAgentRun(ctx, c, id)
	if err == nil {
		return run, nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), agentWaitAfterCancel)
	defer cancel()
	s.stopAgentRun(wctx, c, id)
	final, werr := s.followAgentRun(wctx, c, id)
	if werr != nil {
		return nil, err
	}
	return final, err
}

// followAgentRun follows the events of c's agent run id (agent.events,
// follow) to the run's end, and returns its record.
func (s *Service) followAgentRun(ctx context.Context, c Caller, id string) (*api.AgentRun, error) {
	in := internalInput(api.AgentEvents{Run: id, Follow: true})
	in.emit = func(api.Event) error { return nil }
	resp, err := s.call(ctx, c, api.OpAgentEvents, in)
	if err != nil {
		return nil, err
	}
	run, ok := resp.(*api.AgentRun)
	if !ok || run == nil {
		return nil, fmt.Errorf("agent.events answered %T", resp)
	}
	return run, nil
}

// stopAgentRun cancels c's agent run id if it still runs (an ended or
// gone run is left as it is).
func (s *Service) stopAgentRun(ctx context.Context, c Caller, id string) {
	_, err := s.call(ctx, c, api.OpAgentCancel, internalInput(api.AgentRunRef{Run: id}))
	if err != nil && !isCode(err, api.CodeNotFound) && !isCode(err, api.CodeConflict) {
		s.log.Warn("workflow: cancel an agent step's run", "tenant", c.Tenant, "run", id, "err", err)
	}
}

// endAgentStep unregisters step (nil: none) and returns the sandbox kept
// for its outputs ("" for none); the sandboxes its agent made before that
// one (a run taken up again makes a new one) are deleted.
func (s *Service) endAgentStep(ctx context.Context, c Caller, step *agentStep) string {
	if step == nil {
		return ""
	}
	kept := s.wf.agentSteps.remove(step)
	if len(kept) == 0 {
		return ""
	}
	for _, id := range kept[:len(kept)-1] {
		s.deleteOwn(ctx, c, id)
	}
	return kept[len(kept)-1]
}

// deleteOwn deletes c's sandbox id as a sandbox.delete of c, even when
// ctx has ended.
func (s *Service) deleteOwn(ctx context.Context, c Caller, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), agentWaitAfterCancel)
	defer cancel()
	if _, err := s.call(ctx, c, api.OpSandboxDelete, internalInput(api.SandboxRef{Sandbox: id})); err != nil && !isCode(err, api.CodeNotFound) {
		s.log.Warn("workflow: delete an agent step's sandbox", "tenant", c.Tenant, "sandbox", id, "err", err)
	}
}

// agentSandboxCall makes op with req (a value of the operation's request
// type, or a pointer to one) for c when it is the sandbox.create of a
// sandbox of a registered agent step's run, or the sandbox.delete of a
// sandbox kept for such a step's outputs, and reports handled; any other
// call it leaves to the caller (handled false). The agent runs' Backend
// calls it before Service.call for each of its calls.
func (s *Service) agentSandboxCall(ctx context.Context, c Caller, op string, req any) (resp any, handled bool, err error) {
	switch op {
	case api.OpSandboxCreate:
		creq, ok := valueOf[api.CreateSandbox](req)
		if !ok {
			return nil, false, nil
		}
		key, ok := agentStepKeyOf(c.Tenant, creq.Labels)
		if !ok {
			return nil, false, nil
		}
		step := s.wf.agentSteps.get(key)
		if step == nil {
			return nil, false, nil
		}
		sb, err := s.createOwn(ctx, c, creq, &stepSandbox{inputs: step.inputs}, nil)
		if err != nil {
			return nil, true, err
		}
		if step.keep && creq.Labels[agentLabelName] == step.agent {
			s.wf.agentSteps.keep(step, sb.ID)
		}
		return sb, true, nil
	case api.OpSandboxDelete:
		ref, ok := valueOf[api.SandboxRef](req)
		if !ok || !s.wf.agentSteps.kept(c.Tenant, ref.Sandbox) {
			return nil, false, nil
		}
		// Kept for the step's outputs: the engine deletes it once they
		// are collected.
		resp, err := s.call(ctx, c, api.OpSandboxGet, internalInput(api.SandboxRef{Sandbox: ref.Sandbox}))
		return resp, true, err
	}
	return nil, false, nil
}

// valueOf is req as a T, given as a T or a non-nil *T.
func valueOf[T any](req any) (T, bool) {
	switch v := req.(type) {
	case T:
		return v, true
	case *T:
		if v != nil {
			return *v, true
		}
	}
	var zero T
	return zero, false
}

// agentSteps are the agent steps whose runs are under way, by the
// labels of their attempts. The zero value is ready to use.
type agentSteps struct {
	mu sync.Mutex
	m  map[agentStepKey]*agentStep
}

// agentStepKey names one attempt of a step of a tenant's workflow run.
type agentStepKey struct {
	tenant, run, step, attempt string
}

// agentStep is one agent step's attempt whose run is under way.
type agentStep struct {
	key agentStepKey
	// agent is the step's agent, whose sandbox is kept when keep.
	agent  string
	inputs []sandbox.Bind
	keep   bool
	// sandboxes are those kept, oldest first (guarded by agentSteps.mu).
	sandboxes []string
}

// agentStepKeyOf is the key that labels give, for tenant; false when
// they do not name a workflow step's attempt.
func agentStepKeyOf(tenant string, labels map[string]string) (agentStepKey, bool) {
	k := agentStepKey{tenant: tenant, run: labels[engine.LabelRun], step: labels[engine.LabelStep], attempt: labels[engine.LabelAttempt]}
	return k, k.tenant != "" && k.run != "" && k.step != "" && k.attempt != ""
}

// add registers st (replacing an earlier registration of its attempt).
func (a *agentSteps) add(st *agentStep) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = make(map[agentStepKey]*agentStep)
	}
	a.m[st.key] = st
}

// get returns the step registered under k, or nil.
func (a *agentSteps) get(k agentStepKey) *agentStep {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[k]
}

// keep records sandbox id as kept for st.
func (a *agentSteps) keep(st *agentStep, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st.sandboxes = append(st.sandboxes, id)
}

// kept reports whether tenant's sandbox id is kept for a registered step.
func (a *agentSteps) kept(tenant, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, st := range a.m {
		if k.tenant == tenant && slices.Contains(st.sandboxes, id) {
			return true
		}
	}
	return false
}

// remove unregisters st (if it still is) and returns the sandboxes kept
// for it, oldest first.
func (a *agentSteps) remove(st *agentStep) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m[st.key] == st {
		delete(a.m, st.key)
	}
	return slices.Clone(st.sandboxes)
}
