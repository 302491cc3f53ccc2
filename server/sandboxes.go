package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/store"
	"github.com/moat-sandbox/moat/templates"
)

// managed is one live sandbox of the service.
type managed struct {
	tenant string
	pol    *sandboxPolicy
	// spec is what the sandbox was created with (after its policy), for
	// a restore; netMode its network mode.
	spec    *sandbox.Spec
	netMode sandbox.NetMode
	// netb is the egress proxy's endpoint of a sandbox in mode proxy
	// (under rootMu).
	netb *netBinding

	// rootMu serializes snapshots and restores of the sandbox; lineage
	// (under it) is what its next snapshot is relative to.
	rootMu  sync.Mutex
	lineage *templates.Lineage

	mu         sync.Mutex
	sb         sandbox.Sandbox // replaced by a restore: read it with box()
	info       api.Sandbox
	lastActive time.Time
	active     int // calls in flight
	busy       bool
	procs      map[uint64]*proc
	calls      uint64
	ended      bool
	endOnce    sync.Once
	endDone    chan struct{}
}

// view returns the sandbox's description.
func (m *managed) view() api.Sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	info := m.info
	info.LastActiveAt = m.lastActive
	info.Running = 0
	for _, p := range m.procs {
		if !p.isDone() {
			info.Running++
		}
	}
	return info
}

// box is the sandbox's current runtime instance.
func (m *managed) box() sandbox.Sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sb
}

// enter marks a call in flight; the sandbox is not idle while one runs.
// It fails once the sandbox has ended.
func (m *managed) enter() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return api.Errorf(api.CodeNotRunning, "sandbox %s is not running (%s)", m.info.ID, m.info.EndReason)
	}
	m.active++
	m.lastActive = time.Now()
	return nil
}

func (m *managed) leave() {
	m.mu.Lock()
	m.active--
	m.lastActive = time.Now()
	m.mu.Unlock()
}

// expired says why the sandbox should be pruned at now, or "".
func (m *managed) expired(now time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.ended:
		return ""
	case now.Sub(m.info.CreatedAt) >= time.Duration(m.info.TimeoutMs)*time.Millisecond:
		return api.EndTimeout
	case m.active == 0 && now.Sub(m.lastActive) >= time.Duration(m.info.IdleTimeoutMs)*time.Millisecond:
		return api.EndIdle
	}
	return ""
}

// cutShort rewrites the result of a call that its sandbox's end cut
// short. The runtime sees only the sandbox's init go (exit 125,
// setup_error, "init: sandbox init exited"); when the pruner ended the
// sandbox at its maximum age the call was ended by the sandbox's
// timeout: exit 124, exit_reason sandbox_timeout, with what the call
// wrote until then. end marks the sandbox ended before it kills it, so a
// call the kill ended always finds the reason set. A result that is not a
// setup_error (the process ended first) is kept, and so is an error that
// says nothing ran (the sandbox already closing: 409 sandbox_not_running).
func (m *managed) cutShort(res *sandbox.Result, err error) (*sandbox.Result, error) {
	if res == nil || res.ExitReason != sandbox.ReasonSetupError || err != nil && !isSetupOnly(err) {
		return res, err
	}
	m.mu.Lock()
	ended, reason, maxAge, enf := m.ended, m.info.EndReason, m.info.TimeoutMs, m.info.Enforcement
	m.mu.Unlock()
	if !ended || reason != api.EndTimeout {
		return res, err
	}
	res.ExitCode, res.ExitReason, res.Signal = sandbox.ExitTimeout, sandbox.ReasonSandboxTimeout, 0
	res.Error = fmt.Sprintf("the sandbox reached its maximum age (timeout_ms %d) and was ended; the process tree was killed", maxAge)
	if res.Enforcement == nil {
		res.Enforcement = enf
	}
	return res, nil
}

// lookup finds a running sandbox of the caller's tenant. Another tenant's
// sandbox is reported exactly like a missing one.
func (s *Service) lookup(c Caller, id string) (*managed, error) {
	if id == "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "sandbox id is required")
	}
	s.mu.Lock()
	m := s.sandboxes[id]
	s.mu.Unlock()
	if m == nil || m.tenant != c.Tenant {
		return nil, api.Errorf(api.CodeNotFound, "no sandbox %q", id)
	}
	return m, nil
}

// use looks up a running sandbox and marks a call in flight; the caller
// must call the returned func when done. A sandbox of the caller's that
// has stopped is sandbox_not_running (409), one never seen (or another
// tenant's) not_found.
func (s *Service) use(c Caller, id string) (*managed, func(), error) {
	m, err := s.lookup(c, id)
	if err != nil {
		if id != "" {
			if rec, serr := s.cfg.Store.GetSandbox(context.Background(), c.Tenant, id); serr == nil {
				return nil, nil, api.Errorf(api.CodeNotRunning, "sandbox %s has stopped (%s)", id, rec.EndReason)
			}
		}
		return nil, nil, err
	}
	if err := m.enter(); err != nil {
		return nil, nil, err
	}
	return m, m.leave, nil
}

func millis(d time.Duration) int64 { return d.Milliseconds() }

func (s *Service) createSandbox(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.CreateSandbox](in)
	if err != nil {
		return nil, err
	}
	if req.Exec != nil {
		return s.createWithExec(ctx, c, in, req)
	}
	sb, err := s.doCreate(ctx, c, req)
	if err != nil {
		return nil, err
	}
	in.rec.ev.Sandbox = sb.ID
	in.rec.ev.Result = mustJSON(map[string]any{"id": sb.ID, "limits": sb.Enforcement.Limits, "policy": sb.Policy})
	return sb, nil
}

func (s *Service) doCreate(ctx context.Context, c Caller, req *api.CreateSandbox) (*api.Sandbox, error) {
	return s.doCreateFirst(ctx, c, req, nil)
}

// doCreateFirst is doCreate for a create that carries its first exec
// (first not nil), which it may start ahead (createFor).
func (s *Service) doCreateFirst(ctx context.Context, c Caller, req *api.CreateSandbox, first *firstExec) (*api.Sandbox, error) {
	return s.doCreateStep(ctx, c, req, first, nil)
}

// doCreateStep is doCreateFirst for the sandbox of a workflow step (step
// not nil): what step adds is put into the spec after the policy made it
// (stepSandbox.apply, workflows_backend.go).
func (s *Service) doCreateStep(ctx context.Context, c Caller, req *api.CreateSandbox, first *firstExec, step *stepSandbox) (*api.Sandbox, error) {
	if !s.cfg.AllowHostPaths && (req.Workspace != "" || len(req.Binds) > 0) {
		s.metrics.denied("host_paths")
		return nil, api.Errorf(api.CodePermissionDenied, "this server does not bind host paths (workspace, binds); use the file and archive operations")
	}
	// The paths are checked before a quota slot is taken (named checks,
	// sandbox.Spec.Validate: absolute, clean, bounded, no system tree).
	if err := (&sandbox.Spec{Workspace: req.Workspace, Binds: req.Binds}).Validate(); err != nil {
		return nil, err
	}
	timeout, err := durationField("timeout_ms", req.TimeoutMs, s.cfg.DefaultTimeout, s.cfg.MaxTimeout)
	if err != nil {
		return nil, err
	}
	idle, err := durationField("idle_timeout_ms", req.IdleTimeoutMs, s.cfg.DefaultIdleTimeout, s.cfg.MaxTimeout)
	if err != nil {
		return nil, err
	}
	if err := validLabels(req.Labels); err != nil {
		return nil, err
	}
	// Reserve a place under the quotas before the (slow) create.
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, api.Errorf(api.CodeUnavailable, "the server is shutting down")
	}
	total, mine := s.pendingTotal, s.pending[c.Tenant]
	for _, m := range s.sandboxes {
		total++
		if m.tenant == c.Tenant {
			mine++
		}
	}
	if total >= s.cfg.MaxSandboxes || mine >= s.cfg.MaxPerTenant {
		s.mu.Unlock()
		s.metrics.denied("quota")
		return nil, api.Errorf(api.CodeTooMany, "sandbox quota reached (%d of %d for this tenant, %d of %d on this server)", mine, s.cfg.MaxPerTenant, total, s.cfg.MaxSandboxes)
	}
	s.pending[c.Tenant]++
	s.pendingTotal++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.pending[c.Tenant]--; s.pending[c.Tenant] == 0 {
			delete(s.pending, c.Tenant)
		}
		s.pendingTotal--
		s.mu.Unlock()
	}()

	b, err := s.buildSpec(c, req)
	if err != nil {
		return nil, err
	}
	step.apply(b.spec)
	return s.launch(ctx, c, req, b, timeout, idle, first)
}

// built is a create request made into a spec under its policy.
type built struct {
	spec    *sandbox.Spec
	pol     *sandboxPolicy
	netMode sandbox.NetMode
	network *api.Network // the sandbox's network as it describes it
	tmpl    *templates.Template
	snap    *templates.Snapshot // the sandbox starts from it (a fork), or nil
}

// buildSpec resolves the request's template or snapshot, fills the
// template's defaults and compiles the policy into the spec.
func (s *Service) buildSpec(c Caller, req *api.CreateSandbox) (*built, error) {
	nr, err := netRequest(req.Network)
	if err != nil {
		return nil, err
	}
	tmpl, snap, root, err := s.resolveRoot(c, req.Template, req.Snapshot)
	if err != nil {
		return nil, err
	}
	spec := &sandbox.Spec{Workspace: req.Workspace, Binds: req.Binds, Hostname: req.Hostname,
		Limits: req.Limits.Or(tmpl.Limits), Root: root, Env: tmpl.Env, Workdir: tmpl.Workdir}
	pol, spec, err := s.loadPolicy(req, spec, nr)
	if err == nil {
		var network *api.Network
		if network, err = checkNetAllow(pol.current(), "network.", nr, s.cfg.PolicyManaged); err == nil {
			return &built{spec: spec, pol: pol, netMode: nr.Mode, network: network, tmpl: tmpl, snap: snap}, nil
		}
	}
	if api.AsError(err).Code == api.CodePolicyDenied {
		s.metrics.denied("policy")
	}
	return nil, err
}

// launch starts the sandbox b describes, from a warm pool when one holds
// a sandbox made exactly so, and registers it. A first exec may be started
// with the sandbox's setup (createFor).
func (s *Service) launch(ctx context.Context, c Caller, req *api.CreateSandbox, b *built, timeout, idle time.Duration, first *firstExec) (*api.Sandbox, error) {
	bind, err := s.attachNetwork(b.netMode, b.pol, b.spec)
	if err != nil {
		if api.AsError(err).Code == api.CodePolicyDenied {
			s.metrics.denied("policy")
		}
		return nil, err
	}
	sb, pooled := s.pools.claim(ctx, b)
	if sb == nil {
		if sb, err = s.createFor(ctx, c, b, first); err != nil {
			return nil, err
		}
	}
	now := time.Now()
	enf := sandboxEnforcement(sb, s.cfg.Runtime)
	m := &managed{
		sb: sb, tenant: c.Tenant, pol: b.pol, spec: b.spec, netMode: b.netMode, lineage: templates.NewLineage(b.tmpl, b.snap),
		lastActive: now, procs: map[uint64]*proc{}, endDone: make(chan struct{}),
		info: api.Sandbox{
			ID: sb.ID(), Tenant: c.Tenant, State: api.StateRunning, CreatedAt: now,
			TimeoutMs: millis(timeout), IdleTimeoutMs: millis(idle), Workspace: req.Workspace,
			Hostname: req.Hostname, Labels: req.Labels, Enforcement: enf, Policy: b.pol.report,
			Network: b.network, Template: b.tmpl.Name, Pooled: pooled,
		},
	}
	if b.snap != nil {
		m.info.Snapshot = b.snap.ID
	}
	if first != nil && first.run != nil {
		m.calls = 1 // the first exec's, started with the sandbox
	}
	if bind != nil {
		bind.m.Store(m)
		m.netb = bind
	}
	rec := &store.Sandbox{
		ID: m.info.ID, Tenant: c.Tenant, State: api.StateRunning, CreatedAt: now, LastActiveAt: now,
		TimeoutMs: m.info.TimeoutMs, IdleTimeoutMs: m.info.IdleTimeoutMs, Spec: mustJSON(req), Enforcement: mustJSON(enf),
	}
	if err := s.cfg.Store.PutSandbox(ctx, rec); err != nil {
		_ = sb.Shutdown(context.Background())
		return nil, fmt.Errorf("record sandbox: %w", err)
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = sb.Shutdown(context.Background())
		_ = s.cfg.Store.EndSandbox(context.Background(), m.info.ID, api.EndShutdown, now, time.Now())
		return nil, api.Errorf(api.CodeUnavailable, "the server is shutting down")
	}
	s.sandboxes[m.info.ID] = m
	s.mu.Unlock()
	s.metrics.created.Inc()
	s.tasks.Add(1)
	go s.watch(m)
	info := m.view()
	return &info, nil
}

// sandboxEnforcement is what the runtime reports for sb.
func sandboxEnforcement(sb sandbox.Sandbox, rt sandbox.Runtime) *sandbox.Enforcement {
	if e, ok := sb.(sandbox.EnforcementReporter); ok {
		v := e.Enforcement()
		return &v
	}
	v := rt.Enforcement()
	return &v
}

// watch marks the sandbox stopped if its init ends on its own (not the
// instance a restore replaced).
func (s *Service) watch(m *managed) {
	defer s.tasks.Done()
	for {
		sb := m.box()
		select {
		case <-sb.Done():
			if m.box() != sb {
				continue
			}
			s.end(context.Background(), m, api.EndExited, Caller{Actor: "system"})
			return
		case <-m.endDone:
			return
		}
	}
}

// end stops a sandbox once: kills it, records why (sandbox.end, with c's
// actor), and removes it from the live set. Later calls wait for the
// first to finish; ended says whether this call was the first.
func (s *Service) end(ctx context.Context, m *managed, reason string, c Caller) (ended bool) {
	m.endOnce.Do(func() {
		ended = true
		m.mu.Lock()
		m.ended = true
		m.info.State, m.info.EndReason = api.StateStopped, reason
		now := time.Now()
		m.info.EndedAt = &now
		last := m.lastActive
		m.mu.Unlock()
		start := time.Now()
		// The kill and the wait for the init are quick and must finish
		// before the uid range is released, even if the caller has gone.
		err := m.box().Shutdown(context.WithoutCancel(ctx))
		s.mu.Lock()
		delete(s.sandboxes, m.info.ID)
		s.mu.Unlock()
		s.releaseSandboxOutput(m)
		s.approvals.forgetSandbox(m.tenant, m.info.ID)
		if serr := s.cfg.Store.EndSandbox(context.Background(), m.info.ID, reason, last, now); serr != nil {
			s.log.Error("recording the end of a sandbox", "sandbox", m.info.ID, "err", serr)
		}
		ev := audit.Event{Kind: "sandbox.end", Tenant: m.tenant, Actor: c.Actor, Sandbox: m.info.ID,
			Result: mustJSON(map[string]string{"reason": reason}), DurationMs: time.Since(start).Milliseconds()}
		if err != nil {
			ev.Error = err.Error()
		}
		s.record(ev)
		s.metrics.endedFor(reason)
		close(m.endDone)
		if s.cfg.OnEnd != nil {
			s.cfg.OnEnd(m.info.ID, reason)
		}
	})
	<-m.endDone
	return ended
}

func (s *Service) getSandbox(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.SandboxRef](in)
	if err != nil {
		return nil, err
	}
	if m, err := s.lookup(c, req.Sandbox); err == nil {
		info := m.view()
		return &info, nil
	}
	rec, err := s.cfg.Store.GetSandbox(ctx, c.Tenant, req.Sandbox)
	if err != nil {
		return nil, api.Errorf(api.CodeNotFound, "no sandbox %q", req.Sandbox)
	}
	info := fromRecord(rec)
	return &info, nil
}

func (s *Service) listSandboxes(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.ListSandboxes](in)
	if err != nil {
		return nil, err
	}
	switch req.State {
	case "", api.StateRunning, api.StateStopped:
	default:
		return nil, api.Errorf(api.CodeInvalidArgument, "state must be %q or %q", api.StateRunning, api.StateStopped)
	}
	if req.Limit < 0 {
		return nil, api.Errorf(api.CodeInvalidArgument, "limit must not be negative")
	}
	out := api.SandboxList{Sandboxes: []api.Sandbox{}}
	if req.State != api.StateStopped {
		s.mu.Lock()
		var mine []*managed
		for _, m := range s.sandboxes {
			if m.tenant == c.Tenant {
				mine = append(mine, m)
			}
		}
		s.mu.Unlock()
		for _, m := range mine {
			out.Sandboxes = append(out.Sandboxes, m.view())
		}
	}
	if req.State != api.StateRunning {
		recs, err := s.cfg.Store.ListSandboxes(ctx, c.Tenant, api.StateStopped, req.Limit)
		if err != nil {
			return nil, err
		}
		for i := range recs {
			out.Sandboxes = append(out.Sandboxes, fromRecord(&recs[i]))
		}
	}
	sortSandboxes(out.Sandboxes)
	if req.Limit > 0 && len(out.Sandboxes) > req.Limit {
		out.Sandboxes = out.Sandboxes[:req.Limit]
	}
	return &out, nil
}

func (s *Service) deleteSandbox(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.SandboxRef](in)
	if err != nil {
		return nil, err
	}
	m, err := s.lookup(c, req.Sandbox)
	if err != nil {
		// Deleting a stopped sandbox again answers its record.
		return s.getSandbox(ctx, c, in)
	}
	if s.end(ctx, m, api.EndDeleted, c) {
		in.rec.instead() // the call's record is the sandbox.end that end wrote
	}
	info := m.view()
	return &info, nil
}

// pruneLoop ends idle and expired sandboxes, a few at a time, and drops
// old stopped ones from the store.
func (s *Service) pruneLoop() {
	defer close(s.pruneEnd)
	t := time.NewTicker(s.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.pruneOnce(now)
		}
	}
}

// pruneOnce ends at most PruneBatch expired sandboxes, in parallel, and
// removes the stopped sandboxes and finished builds past their retention.
func (s *Service) pruneOnce(now time.Time) {
	type victim struct {
		m      *managed
		reason string
	}
	var victims []victim
	s.mu.Lock()
	for _, m := range s.sandboxes {
		if r := m.expired(now); r != "" {
			victims = append(victims, victim{m, r})
			if len(victims) == s.cfg.PruneBatch {
				break
			}
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, v := range victims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.end(context.Background(), v.m, v.reason, Caller{Actor: "pruner"})
		}()
	}
	wg.Wait()
	if n, err := s.cfg.Store.PruneStopped(context.Background(), now.Add(-s.cfg.KeepStopped), s.cfg.PruneBatch); err != nil {
		s.log.Error("pruning stopped sandboxes from the store", "err", err)
	} else if n > 0 {
		s.log.Debug("pruned stopped sandboxes from the store", "count", n)
	}
	s.pruneBuilds(now)
}

// durationField validates a millisecond field: 0 takes def, the rest must
// lie in (0, max].
func durationField(name string, ms int64, def, max time.Duration) (time.Duration, error) {
	if ms == 0 {
		return def, nil
	}
	d := time.Duration(ms) * time.Millisecond
	if ms < 0 || d > max || d/time.Millisecond != time.Duration(ms) {
		return 0, api.Errorf(api.CodeInvalidArgument, "%s must be between 1 and %d", name, max.Milliseconds())
	}
	return d, nil
}

// validLabels bounds the labels a caller attaches.
func validLabels(l map[string]string) error {
	if len(l) > 64 {
		return api.Errorf(api.CodeInvalidArgument, "at most 64 labels")
	}
	for k, v := range l {
		if k == "" || len(k) > 128 || len(v) > 1024 {
			return api.Errorf(api.CodeInvalidArgument, "label keys must be 1 to 128 bytes and values at most 1024")
		}
	}
	return nil
}
