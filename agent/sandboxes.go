package agent

import (
	"context"
	"maps"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// Labels of every sandbox of a run (with the run's own labels).
const (
	LabelRun   = "moat.agent.run"
	LabelAgent = "moat.agent"
)

// Bounds of the engine's own calls.
const (
	// perCallMargin is added to a per_call sandbox's tool timeout to bound
	// its life: a sandbox a crash left behind ends by itself.
	perCallMargin = time.Minute
	// cleanupTimeout bounds a sandbox's delete.
	cleanupTimeout = time.Minute
)

// sandboxFor returns the sandbox a tool call of ag runs in: its
// long-lived sandbox (made at its first tool call and recorded, to be
// journalled with the call), or, with per_call, a fresh one that the
// caller deletes after the call.
func (r *run) sandboxFor(ctx context.Context, ag *Agent) (id string, perCall bool, err error) {
	if ag.Sandbox.PerCall {
		id, err := r.createSandbox(ctx, ag, true)
		return id, true, err
	}
	r.mu.Lock()
	id = r.state(ag.Name).Sandbox
	r.mu.Unlock()
	if id != "" {
		return id, false, nil
	}
	id, err = r.createSandbox(ctx, ag, false)
	if err != nil {
		return "", false, err
	}
	r.mu.Lock()
	r.state(ag.Name).Sandbox = id
	r.mu.Unlock()
	return id, false, nil
}

// createSandbox makes a sandbox of ag's config (sandbox.create as the
// run's owner): its template, limits, network and policy, the run's
// labels and the agent's.
func (r *run) createSandbox(ctx context.Context, ag *Agent, perCall bool) (string, error) {
	r.mu.Lock()
	labels := maps.Clone(r.rec.Run.Labels)
	o := r.rec.Owner
	r.mu.Unlock()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelRun] = r.id
	labels[LabelAgent] = ag.Name
	nw := ag.Sandbox.Network
	req := api.CreateSandbox{
		Template: ag.Sandbox.Template,
		Limits:   ag.Sandbox.Limits,
		Labels:   labels,
		Network:  &nw,
	}
	if ag.Policy != nil {
		p := *ag.Policy
		req.Policy = &p
	}
	if perCall {
		req.TimeoutMs = (ag.Sandbox.Timeout + perCallMargin).Milliseconds()
	}
	sb, err := callAs[api.Sandbox](ctx, toolEnv{b: r.e.b, o: o}, api.OpSandboxCreate, req, nil, nil)
	if err != nil {
		return "", err
	}
	return sb.ID, nil
}

// alive reports whether sandbox id is still running (sandbox.get).
func (r *run) alive(ctx context.Context, o Owner, id string) bool {
	sb, err := callAs[api.Sandbox](ctx, toolEnv{b: r.e.b, o: o}, api.OpSandboxGet, api.SandboxRef{Sandbox: id}, nil, nil)
	return err == nil && sb.State == api.StateRunning
}

// replaceSandbox makes ag a new long-lived sandbox when old is gone (a
// call failed for it: it idled out, or was deleted), and journals it.
func (r *run) replaceSandbox(ctx context.Context, ag *Agent, old string) (string, bool) {
	r.mu.Lock()
	o := r.rec.Owner
	r.mu.Unlock()
	if r.alive(ctx, o, old) {
		return "", false
	}
	r.deleteSandbox(old)
	id, err := r.createSandbox(ctx, ag, false)
	if err != nil {
		return "", false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state(ag.Name).Sandbox = id
	return id, r.commit() == nil
}

// deleteSandbox deletes a sandbox of the run (errors logged: a gone
// sandbox is no error worth more).
func (r *run) deleteSandbox(id string) {
	r.mu.Lock()
	o := r.rec.Owner
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), cleanupTimeout)
	defer cancel()
	if _, err := r.e.b.Call(ctx, o, api.OpSandboxDelete, api.SandboxRef{Sandbox: id}, nil, nil); err != nil {
		if ae := api.AsError(err); ae.Code != api.CodeNotFound && ae.Code != api.CodeGone {
			r.e.log.Warn("agent sandbox delete", "run", r.id, "sandbox", id, "err", err)
		}
	}
}

// deleteAll deletes every sandbox of the run and forgets them (the next
// commit journals that).
func (r *run) deleteAll() {
	r.mu.Lock()
	var ids []string
	for i := range r.rec.Run.Agents {
		if id := r.rec.Run.Agents[i].Sandbox; id != "" {
			ids = append(ids, id)
		}
	}
	for _, p := range r.rec.Progress {
		if p.CallSandbox != "" {
			ids = append(ids, p.CallSandbox)
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.deleteSandbox(id)
	}
	r.mu.Lock()
	for i := range r.rec.Run.Agents {
		r.rec.Run.Agents[i].Sandbox = ""
	}
	for _, p := range r.rec.Progress {
		p.CallSandbox = ""
	}
	r.mu.Unlock()
}
