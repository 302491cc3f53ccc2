package workflow

import (
	"cmp"
	"maps"
	"slices"

	"github.com/moat-sandbox/moat/api"
)

// resolve returns s with the defaults d (nil: none) applied: a field the
// step gives wins, env is merged by key, limits and retry field by field.
// A step with no command of its own or from d is an error. A build step
// takes only retry and priority from d (resolveBuild), so does an agent
// step (resolveAgent).
func resolve(s *docStep, d *fields, errs *errList) Step {
	if d == nil {
		d = &fields{}
	}
	f := &s.f
	st := Step{
		ID:       s.id,
		Kind:     KindRun,
		Template: or(f.template, d.template, ""),
		Timeout:  or(f.timeout, d.timeout, 0),
		Policy:   copyRules(cmp.Or(f.policy, d.policy)),
		Network:  copyNetwork(cmp.Or(f.network, d.network)),
		Outputs:  slices.Clone(s.outputs),
		Snapshot: or(f.snapshot, d.snapshot, SnapshotLight),
		Priority: or(f.priority, d.priority, Normal),
		Line:     s.line,
	}
	st.Limits.MemoryBytes = or(f.limits.memory, d.limits.memory, 0)
	st.Limits.DiskBytes = or(f.limits.disk, d.limits.disk, 0)
	st.Limits.Pids = or(f.limits.pids, d.limits.pids, 0)
	st.Limits.CPUs = or(f.limits.cpus, d.limits.cpus, 0)
	st.Retry = Retry{
		Attempts: or(f.retry.attempts, d.retry.attempts, 1),
		Backoff:  or(f.retry.backoff, d.retry.backoff, 0),
		From:     or(f.retry.from, d.retry.from, FromSnapshot),
	}
	if s.build != nil {
		st = Step{ID: st.ID, Priority: st.Priority, Retry: st.Retry, Line: st.Line}
		resolveBuild(&st, s.build, errs)
		for _, n := range s.needs {
			st.Needs = append(st.Needs, n.id)
		}
		return st
	}
	if s.agent != nil {
		st = Step{ID: st.ID, Priority: st.Priority, Retry: st.Retry, Line: st.Line}
		resolveAgent(&st, s)
		for _, n := range s.needs {
			st.Needs = append(st.Needs, n.id)
		}
		return st
	}
	switch {
	case f.run != nil || f.sh != nil:
		st.Args, st.Sh = command(f)
	case given(f, "run") || given(f, "sh"):
		// Given but not valid: already an error.
	case d.run != nil || d.sh != nil:
		st.Args, st.Sh = command(d)
	case !given(d, "run") && !given(d, "sh"):
		errs.add(s.line, s.col, "run", "a step needs run (a list of arguments) or sh (a shell command)")
	}
	env := maps.Clone(d.env)
	if env == nil {
		env = make(map[string]string, len(f.env))
	}
	maps.Copy(env, f.env)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		st.Env = append(st.Env, k+"="+env[k])
	}
	for _, n := range s.needs {
		st.Needs = append(st.Needs, n.id)
	}
	if s.from != nil {
		st.From = s.from.id
	}
	if s.stdinFrom != nil {
		st.StdinFrom = s.stdinFrom.id
	}
	if len(s.inputs) > 0 {
		st.Inputs = make(map[string]string, len(s.inputs))
		for _, in := range s.inputs {
			st.Inputs[in.id] = in.path
		}
	}
	return st
}

// or returns *v, else *def, else zero.
func or[T any](v, def *T, zero T) T {
	switch {
	case v != nil:
		return *v
	case def != nil:
		return *def
	}
	return zero
}

// given reports whether f writes field (valid or not).
func given(f *fields, field string) bool {
	_, ok := f.lines[field]
	return ok
}

// command returns the argv and the shell string of f's run or sh.
func command(f *fields) ([]string, string) {
	if f.sh != nil {
		return []string{"/bin/sh", "-c", *f.sh}, *f.sh
	}
	return slices.Clone(f.run), ""
}

// copyRules returns a copy of r (nil for nil).
func copyRules(r *api.CallRules) *api.CallRules {
	if r == nil {
		return nil
	}
	c := *r
	c.Allow, c.Ask, c.Deny = slices.Clone(r.Allow), slices.Clone(r.Ask), slices.Clone(r.Deny)
	return &c
}

// copyNetwork returns a copy of n (nil for nil).
func copyNetwork(n *api.Network) *api.Network {
	if n == nil {
		return nil
	}
	c := *n
	c.AllowDomains, c.DenyDomains = slices.Clone(n.AllowDomains), slices.Clone(n.DenyDomains)
	c.Dropped = nil
	return &c
}

// resolveWaits sets every step's Waits: its needs and its groups' needs
// (a group stands for all its steps) and, in sequential groups and at
// the top level, the item before it and before each of its groups. Needs
// must name existing steps and groups outside the item (checked before).
// It stops, and reports false, when the waits of all steps together pass
// maxWaits.
func (p *Plan) resolveWaits() bool {
	total := 0
	ix := p.index()
	for _, s := range p.Steps {
		s.Waits = ix.waits(s)
		if total += len(s.Waits); total > maxWaits {
			return false
		}
	}
	return true
}

// planIndex are lookups over a plan, made by Plan.index.
type planIndex struct {
	p      *Plan
	order  map[string]int // step id → position in p.Steps
	steps  map[string]*PlanStep
	groups map[string]*Group
	// prev is the item before each item of a sequential group or of the
	// top level.
	prev map[string]string
	// under are the positions of the steps inside each group (at any
	// depth), in document order.
	under map[string][]int
	// mark and stamp deduplicate the waits of one step.
	mark  []int
	stamp int
}

// index builds the plan's lookups.
func (p *Plan) index() *planIndex {
	ix := &planIndex{
		p:      p,
		order:  make(map[string]int, len(p.Steps)),
		steps:  make(map[string]*PlanStep, len(p.Steps)),
		groups: make(map[string]*Group, len(p.Groups)),
		prev:   make(map[string]string),
		under:  make(map[string][]int, len(p.Groups)),
		mark:   make([]int, len(p.Steps)),
	}
	for i, s := range p.Steps {
		ix.order[s.ID] = i
		ix.steps[s.ID] = s
		for _, g := range s.Groups {
			ix.under[g] = append(ix.under[g], i)
		}
	}
	for _, g := range p.Groups {
		ix.groups[g.ID] = g
	}
	for parent, items := range p.children {
		if parent != "" && (ix.groups[parent] == nil || ix.groups[parent].Mode != Sequential) {
			continue
		}
		for i := 1; i < len(items); i++ {
			ix.prev[items[i]] = items[i-1]
		}
	}
	return ix
}

// waits resolves the waits of s (which need not be in the plan yet): the
// ids of steps of the plan, in document order, nil for none.
func (ix *planIndex) waits(s *PlanStep) []string {
	ix.stamp++
	self, ok := ix.order[s.ID]
	if !ok {
		self = -1
	}
	var pos []int
	addPos := func(i int) {
		if i != self && ix.mark[i] != ix.stamp {
			ix.mark[i] = ix.stamp
			pos = append(pos, i)
		}
	}
	add := func(id string) {
		if _, ok := ix.groups[id]; ok {
			for _, i := range ix.under[id] {
				addPos(i)
			}
		} else if i, ok := ix.order[id]; ok {
			addPos(i)
		}
	}
	for _, id := range s.Needs {
		add(id)
	}
	if pr := ix.prev[s.ID]; pr != "" {
		add(pr)
	}
	for _, gid := range s.Groups {
		if g := ix.groups[gid]; g != nil {
			for _, id := range g.Needs {
				add(id)
			}
		}
		if pr := ix.prev[gid]; pr != "" {
			add(pr)
		}
	}
	if len(pos) == 0 {
		return nil
	}
	slices.Sort(pos)
	out := make([]string, len(pos))
	for k, i := range pos {
		out[k] = ix.p.Steps[i].ID
	}
	return out
}
