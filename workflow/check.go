package workflow

import (
	"slices"

	"github.com/moat-sandbox/moat/internal/yamlnode"
)

// check checks the placed plan: references, waits, cycles, the links of
// from, inputs and stdin_from, and budgets. A reference in error is
// dropped so that the checks after it see a plan they can walk.
func (b *builder) check() {
	ix := b.p.index()
	for _, g := range b.p.Groups {
		b.groupRefs(ix, g)
	}
	for _, s := range b.p.Steps {
		b.stepRefs(ix, s, b.steps[s.ID])
	}
	if !b.p.resolveWaits() {
		b.errs.add(0, 0, "steps", "the steps wait for more than %d steps in all (a group needed by many steps counts all its steps for each)", maxWaits)
		return
	}
	order, cyclic := b.cycles(ix)
	for _, g := range b.p.Groups {
		b.groupBudget(ix, g)
	}
	for _, s := range b.p.Steps {
		b.stepBudget(ix, s, b.steps[s.ID])
	}
	if cyclic {
		return // ancestors are not defined until the cycles are gone
	}
	anc := ancestorSets(ix, order)
	isAnc := func(s, a string) bool { return anc[ix.order[s]].has(ix.order[a]) }
	for _, s := range b.p.Steps {
		b.links(ix, s, b.steps[s.ID], isAnc)
	}
}

// stepRefs checks the ids s names (src is where they are written) and
// drops those in error from s.
func (b *builder) stepRefs(ix *planIndex, s *PlanStep, src *docStep) {
	var needs []string
	for _, n := range src.needs {
		if b.badRef(ix, s, n, "needs", true) || slices.Contains(needs, n.id) {
			continue
		}
		needs = append(needs, n.id)
	}
	s.Needs = needs
	if src.from != nil && b.badRef(ix, s, *src.from, "from", false) {
		s.From = ""
	}
	for _, in := range src.inputs {
		if b.badRef(ix, s, in.ref, yamlnode.Join("inputs", in.id), false) {
			delete(s.Inputs, in.id)
		}
	}
	if src.stdinFrom != nil && b.badRef(ix, s, *src.stdinFrom, "stdin_from", false) {
		s.StdinFrom = ""
	}
	if src.build != nil && src.build.source != nil && b.badRef(ix, s, *src.build.source, "build.source", false) {
		s.Build.Source = ""
	}
	if src.agent != nil {
		b.agentRef(s, src)
	}
}

// badRef reports (and records) whether r, written in field of s, names
// no step (or, when groups is true, no group either), s itself or a group
// around s.
func (b *builder) badRef(ix *planIndex, s *PlanStep, r ref, field string, groups bool) bool {
	fail := func(format string, args ...any) bool {
		b.errs.add(r.line, r.col, field, format, args...)
		return true
	}
	switch _, isGroup := ix.groups[r.id]; {
	case r.id == s.ID:
		return fail("step %q names itself", s.ID)
	case ix.steps[r.id] != nil:
		return false
	case !isGroup && groups:
		return fail("no step or group %q", r.id)
	case !isGroup:
		return fail("no step %q", r.id)
	case !groups:
		return fail("%q is a group: name a step", r.id)
	case slices.Contains(s.Groups, r.id):
		return fail("group %q holds step %q", r.id, s.ID)
	}
	return false
}

// groupRefs checks the needs of g and drops those in error.
func (b *builder) groupRefs(ix *planIndex, g *Group) {
	var needs []string
	for _, n := range b.groups[g.ID].needs {
		fail := func(format string, args ...any) {
			b.errs.add(n.line, n.col, "needs", format, args...)
		}
		switch {
		case n.id == g.ID:
			fail("group %q needs itself", g.ID)
		case ix.steps[n.id] != nil && slices.Contains(ix.steps[n.id].Groups, g.ID):
			fail("step %q is inside group %q", n.id, g.ID)
		case ix.steps[n.id] != nil:
			needs = append(needs, n.id)
		case ix.groups[n.id] == nil:
			fail("no step or group %q", n.id)
		case ix.within(n.id, g.ID):
			fail("group %q is inside group %q", n.id, g.ID)
		case ix.within(g.ID, n.id):
			fail("group %q holds group %q", n.id, g.ID)
		default:
			if !slices.Contains(needs, n.id) {
				needs = append(needs, n.id)
			}
		}
	}
	g.Needs = needs
}

// within reports whether group inner is inside group outer (at any
// depth).
func (ix *planIndex) within(inner, outer string) bool {
	for g := ix.groups[inner]; g != nil && g.Parent != ""; g = ix.groups[g.Parent] {
		if g.Parent == outer {
			return true
		}
	}
	return false
}

// links checks from, inputs and stdin_from of s; isAnc(x, a) reports
// whether step x waits for step a (at any depth).
func (b *builder) links(ix *planIndex, s *PlanStep, src *docStep, isAnc func(x, a string) bool) {
	if f := ix.steps[s.From]; f != nil {
		switch {
		case !isAnc(s.ID, f.ID):
			b.errs.add(src.from.line, src.from.col, "from", "step %q is not an ancestor of %q (%s does not wait for it)", f.ID, s.ID, s.ID)
		case f.Kind == KindBuild:
			b.errs.add(src.from.line, src.from.col, "from", "step %q is a build: it keeps no snapshot to start from (take its outputs as inputs)", f.ID)
		case f.Kind == KindAgent:
			b.errs.add(src.from.line, src.from.col, "from", "step %q is an agent step: it keeps no snapshot to start from (take its outputs as inputs)", f.ID)
		case f.Snapshot == SnapshotNone:
			b.errs.add(src.from.line, src.from.col, "from", "step %q keeps no snapshot (snapshot: none)", f.ID)
		}
	}
	for _, in := range src.inputs {
		f := ix.steps[in.id]
		if f == nil || s.Inputs[in.id] == "" {
			continue
		}
		switch {
		case !isAnc(s.ID, f.ID):
			b.errs.add(in.line, in.col, yamlnode.Join("inputs", in.id), "step %q is not an ancestor of %q (%s does not wait for it)", f.ID, s.ID, s.ID)
		case len(f.Outputs) == 0:
			b.errs.add(in.line, in.col, yamlnode.Join("inputs", in.id), "step %q has no outputs", f.ID)
		}
	}
	if src.build != nil {
		b.buildLinks(ix, s, src, isAnc)
	}
	f := ix.steps[s.StdinFrom]
	if f == nil {
		return
	}
	fail := func(format string, args ...any) {
		b.errs.add(src.stdinFrom.line, src.stdinFrom.col, "stdin_from", format, args...)
	}
	switch g := ix.groups[s.Group]; {
	case f.Kind == KindBuild:
		fail("step %q is a build: it has no stdout to read", f.ID)
	case f.Kind == KindAgent:
		fail("step %q is an agent step: it has no stdout to read", f.ID)
	case g == nil || g.Mode == Sequential:
		fail("step %q is not in a parallel or concurrent group", s.ID)
	case f.Group != s.Group:
		fail("step %q is not in group %q with %q", f.ID, s.Group, s.ID)
	case isAnc(s.ID, f.ID):
		fail("%q waits for %q: they never run together", s.ID, f.ID)
	case isAnc(f.ID, s.ID):
		fail("%q waits for %q: they never run together", f.ID, s.ID)
	}
}
