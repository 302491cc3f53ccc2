package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/fstree"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/templates"
)

// MaxFork caps the sandboxes of one snapshot.fork.
const MaxFork = 64

// errNoLayers: the server runs without a template store.
func errNoLayers() error {
	return api.Errorf(api.CodeUnimplemented, "this server has no template store: only the host template, no snapshots")
}

// rootfsError maps the template store's errors to the API's.
func rootfsError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, templates.ErrNotFound):
		return api.Errorf(api.CodeNotFound, "%v", err)
	case errors.Is(err, templates.ErrInUse), errors.Is(err, templates.ErrExists):
		return api.Errorf(api.CodeConflict, "%v", err)
	case errors.Is(err, templates.ErrInvalid):
		return api.Errorf(api.CodeInvalidArgument, "%v", err)
	case errors.Is(err, templates.ErrQuota): // before ErrLimit, which it may wrap
		return api.Errorf(api.CodeStorage, "%v", err)
	case errors.Is(err, fstree.ErrLimit), errors.Is(err, sandbox.ErrDiffLimit):
		return api.Errorf(api.CodeTooLarge, "%v", err)
	case errors.Is(err, sandbox.ErrNoFreezer):
		return api.Errorf(api.CodeUnimplemented, "%v", err)
	}
	return err
}

// resolveRoot finds the template (or the caller's snapshot) a sandbox
// starts from and the root filesystem that makes.
func (s *Service) resolveRoot(c Caller, template, snapshot string) (*templates.Template, *templates.Snapshot, *sandbox.RootFS, error) {
	st := s.cfg.Layers
	if st == nil {
		if (template != "" && template != templates.HostTemplate) || snapshot != "" {
			return nil, nil, nil, errNoLayers()
		}
		return templates.Host(), nil, nil, nil
	}
	if snapshot != "" {
		sn, err := s.tenantSnapshot(c, snapshot)
		if err != nil {
			return nil, nil, nil, err
		}
		if template != "" && template != sn.Template {
			return nil, nil, nil, api.Errorf(api.CodeInvalidArgument, "snapshot %s is of template %q, not %q", sn.ID, sn.Template, template)
		}
		t, err := st.Template(sn.Template)
		if err != nil {
			return nil, nil, nil, rootfsError(err)
		}
		root, err := st.SnapshotRoot(sn)
		if err != nil {
			return nil, nil, nil, rootfsError(err)
		}
		return t, sn, root, nil
	}
	t, err := st.Template(template)
	if err != nil {
		return nil, nil, nil, rootfsError(err)
	}
	return t, nil, st.Root(t), nil
}

// tenantSnapshot returns the caller's snapshot id; another tenant's is
// reported exactly like a missing one.
func (s *Service) tenantSnapshot(c Caller, id string) (*templates.Snapshot, error) {
	if s.cfg.Layers == nil {
		return nil, errNoLayers()
	}
	if id == "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "snapshot id is required")
	}
	sn, err := s.cfg.Layers.Snapshot(id)
	if err != nil || sn.Tenant != c.Tenant {
		return nil, api.Errorf(api.CodeNotFound, "no snapshot %q", id)
	}
	return sn, nil
}

func apiSnapshot(sn *templates.Snapshot) api.Snapshot {
	return api.Snapshot{ID: sn.ID, Parent: sn.Parent, Template: sn.Template, Sandbox: sn.Sandbox, Created: sn.Created,
		Bytes: sn.Bytes, DiskBytes: sn.DiskBytes, Entries: sn.Entries, Whiteouts: sn.Whiteouts, Depth: sn.Depth, Processes: sn.Processes}
}

func (s *Service) listTemplates(ctx context.Context, c Caller, in *input) (any, error) {
	if _, err := decode[api.ListTemplates](in); err != nil {
		return nil, err
	}
	ts := []*templates.Template{templates.Host()}
	if s.cfg.Layers != nil {
		var err error
		if ts, err = s.cfg.Layers.Templates(); err != nil {
			return nil, err
		}
	}
	out := api.TemplateList{Templates: []api.Template{}}
	for _, t := range ts {
		out.Templates = append(out.Templates, api.Template{Name: t.Name, Source: t.Source, Created: t.Created, Layer: t.Layer,
			Env: t.Env, Workdir: t.Workdir, Limits: t.Limits, ImageUser: t.ImageUser, Bytes: t.Bytes, Entries: t.Entries,
			Pool: s.pools.ready(t.Name)})
	}
	return &out, nil
}

func (s *Service) createSnapshot(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.CreateSnapshot](in)
	if err != nil {
		return nil, err
	}
	if s.cfg.Layers == nil {
		return nil, errNoLayers()
	}
	m, done, err := s.use(c, req.Sandbox)
	if err != nil {
		return nil, err
	}
	defer done()
	exp, ok := m.box().(sandbox.DiffExporter)
	if !ok {
		return nil, api.Errorf(api.CodeUnimplemented, "this runtime cannot capture a sandbox's filesystem")
	}
	if m.spec.Workspace != "" || writableBinds(m.spec) {
		return nil, api.Errorf(api.CodeInvalidArgument, "sandbox %s has a host directory as its workspace or a writable bind: a snapshot holds the sandbox's own filesystem only, and would silently miss those files", m.info.ID)
	}
	m.rootMu.Lock()
	defer m.rootMu.Unlock()
	start := time.Now()
	sn, err := s.cfg.Layers.Capture(ctx, exp, m.lineage, templates.CaptureInfo{
		Sandbox: m.info.ID, Tenant: m.tenant, Processes: s.processState(ctx), Quota: s.cfg.SnapshotQuota})
	if err != nil {
		if errors.Is(err, templates.ErrQuota) {
			s.metrics.denied("snapshot_quota")
		}
		return nil, rootfsError(err)
	}
	out := apiSnapshot(sn)
	out.PausedMs = time.Since(start).Milliseconds()
	s.metrics.snapshots.Inc()
	return &out, nil
}

// writableBinds reports whether spec binds a host path writable.
func writableBinds(spec *sandbox.Spec) bool {
	for _, b := range spec.Binds {
		if b.Writable {
			return true
		}
	}
	return false
}

// processState is the snapshots' Processes field, found once.
func (s *Service) processState(ctx context.Context) string {
	s.criuOnce.Do(func() { s.criu = templates.ProcessState(ctx) })
	return s.criu
}

func (s *Service) listSnapshots(ctx context.Context, c Caller, in *input) (any, error) {
	if _, err := decode[api.ListSnapshots](in); err != nil {
		return nil, err
	}
	out := api.SnapshotList{Snapshots: []api.Snapshot{}}
	if s.cfg.Layers == nil {
		return &out, nil
	}
	all, err := s.cfg.Layers.Snapshots()
	if err != nil {
		return nil, err
	}
	out.StoreQuota = s.cfg.SnapshotQuota
	for _, sn := range all {
		if sn.Tenant == c.Tenant {
			out.Snapshots = append(out.Snapshots, apiSnapshot(sn))
			out.StoreBytes += sn.Cost() // as the quota counts (see templates.Store.TenantUsage)
		}
	}
	return &out, nil
}

// snapshotRef decodes a SnapshotRef and finds the caller's snapshot.
func (s *Service) snapshotRef(c Caller, in *input) (*templates.Snapshot, error) {
	req, err := decode[api.SnapshotRef](in)
	if err != nil {
		return nil, err
	}
	return s.tenantSnapshot(c, req.Snapshot)
}

func (s *Service) getSnapshot(ctx context.Context, c Caller, in *input) (any, error) {
	sn, err := s.snapshotRef(c, in)
	if err != nil {
		return nil, err
	}
	out := apiSnapshot(sn)
	return &out, nil
}

func (s *Service) deleteSnapshot(ctx context.Context, c Caller, in *input) (any, error) {
	sn, err := s.snapshotRef(c, in)
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Layers.RemoveSnapshot(sn.ID); err != nil {
		return nil, rootfsError(err)
	}
	out := apiSnapshot(sn)
	return &out, nil
}

// restoreSandbox rolls a sandbox back to a snapshot: a new instance is
// made from the snapshot with the sandbox's spec (policy, limits,
// network), put in the old one's place under the same id, and the old one
// is shut down. The old instance keeps running if the new one fails.
func (s *Service) restoreSandbox(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.RestoreSandbox](in)
	if err != nil {
		return nil, err
	}
	sn, err := s.tenantSnapshot(c, req.Snapshot)
	if err != nil {
		return nil, err
	}
	m, done, err := s.use(c, req.Sandbox)
	if err != nil {
		return nil, err
	}
	defer done()
	root, err := s.cfg.Layers.SnapshotRoot(sn)
	if err != nil {
		return nil, rootfsError(err)
	}
	tmpl, err := s.cfg.Layers.Template(sn.Template)
	if err != nil {
		return nil, rootfsError(err)
	}
	m.rootMu.Lock()
	defer m.rootMu.Unlock()
	spec := *m.spec
	spec.Root = root
	bind, err := s.attachNetwork(m.netMode, m.pol, &spec)
	if err != nil {
		return nil, err
	}
	sb, err := s.cfg.Runtime.Create(ctx, &spec)
	if err != nil {
		return nil, err
	}
	if bind != nil {
		bind.m.Store(m)
	}
	m.netb = bind
	m.mu.Lock()
	old := m.sb
	m.sb, m.spec = sb, &spec
	m.info.Snapshot, m.info.Template = sn.ID, tmpl.Name
	m.info.Enforcement = sandboxEnforcement(sb, s.cfg.Runtime)
	oldProcs := m.procs
	m.procs = map[uint64]*proc{}
	m.mu.Unlock()
	m.lineage = templates.NewLineage(tmpl, sn)
	// Every process of the old instance ends with it; their records go
	// (the new instance numbers its processes afresh).
	_ = old.Shutdown(context.WithoutCancel(ctx))
	for _, p := range oldProcs {
		<-p.done
	}
	info := m.view()
	return &info, nil
}

func (s *Service) forkSnapshot(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.ForkSnapshot](in)
	if err != nil {
		return nil, err
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 1 || req.Count > MaxFork {
		return nil, api.Errorf(api.CodeInvalidArgument, "count must be between 1 and %d", MaxFork)
	}
	if req.Sandbox.Snapshot != "" || req.Sandbox.Template != "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "sandbox.snapshot and sandbox.template are set by the fork")
	}
	if _, err := s.tenantSnapshot(c, req.Snapshot); err != nil {
		return nil, err
	}
	one := req.Sandbox
	one.Snapshot = req.Snapshot
	out := make([]*api.Sandbox, req.Count)
	errs := make([]error, req.Count)
	// The fork's record is the sandbox.create of each sandbox, each with
	// the time it ended (on a failed fork the rollback's sandbox.end
	// events come first on the tape).
	evs := make([]audit.Event, req.Count)
	defer func() { in.rec.instead(evs...) }()
	var wg sync.WaitGroup
	for i := range req.Count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := one
			start := time.Now()
			ev := audit.Event{Kind: "sandbox.create", Request: mustJSON(&r)}
			out[i], errs[i] = s.doCreate(ctx, c, &r)
			ev.Time, ev.DurationMs = time.Now().UTC(), time.Since(start).Milliseconds()
			if errs[i] != nil {
				ev.Decision, ev.Error = decisionOf(errs[i]), errs[i].Error()
			} else {
				ev.Decision, ev.Sandbox = audit.DecisionAllow, out[i].ID
			}
			evs[i] = ev
		}()
	}
	wg.Wait()
	list := api.SandboxList{Sandboxes: []api.Sandbox{}}
	var first error
	for i, sb := range out {
		if errs[i] != nil {
			if first == nil {
				first = errs[i]
			}
			continue
		}
		list.Sandboxes = append(list.Sandboxes, *sb)
	}
	if first != nil {
		// All or nothing: the caller asked for count sandboxes.
		for _, sb := range list.Sandboxes {
			if m, err := s.lookup(c, sb.ID); err == nil {
				s.end(ctx, m, api.EndDeleted, c)
			}
		}
		return nil, fmt.Errorf("fork: %w", first)
	}
	return &list, nil
}
