package workflow

import (
	"slices"

	"go.yaml.in/yaml/v3"
)

// AddStep adds a step to the concurrent group group of a running plan.
// data is the step as a document writes it (a YAML or JSON mapping with
// an id); the document's defaults apply. The checks of Compile apply too:
// the id is new, needs names steps or groups of the plan, from, inputs
// and stdin_from name its steps under the same rules, and its limits fit
// the budgets of its groups. The step is appended to p.Steps, and the
// steps that wait for its group (or a group around it) wait for it too:
// their Waits gain it.
//
// p must come from Compile; it is not safe for concurrent use. Errors
// match ErrInvalid; their lines are lines of data.
func (p *Plan) AddStep(group string, data []byte) (*PlanStep, error) {
	errs := &errList{}
	ix := p.index()
	g := ix.groups[group]
	switch {
	case g == nil:
		errs.add(0, 0, "group", "no group %q", group)
	case g.Mode != Concurrent:
		errs.add(0, 0, "group", "group %q is %s: steps are added to concurrent groups only", group, g.Mode)
	case len(p.Steps)+len(p.Groups) >= MaxItems:
		errs.add(0, 0, "", "the plan holds %d steps and groups: at most %d", len(p.Steps)+len(p.Groups), MaxItems)
	}
	if !errs.empty() {
		return nil, errs.err()
	}
	root := parseYAML(data, errs)
	if root == nil {
		return nil, errs.err()
	}
	src := newReader(errs).addedStep(root)
	if src == nil {
		return nil, errs.err()
	}
	if ix.steps[src.id] != nil || ix.groups[src.id] != nil {
		errs.add(src.line, src.col, "id", "%q is already the id of a step or group of the run", src.id)
	}
	groups := []string{group}
	for o := ix.groups[g.Parent]; o != nil; o = ix.groups[o.Parent] {
		groups = append(groups, o.ID)
	}
	s := &PlanStep{Step: resolve(src, p.defaults, errs), Group: group, Groups: groups}
	b := &builder{p: p, errs: errs, steps: map[string]*docStep{src.id: src}}
	b.stepRefs(ix, s, src)
	s.Waits = ix.waits(s)
	b.stepBudget(ix, s, src)
	anc := ix.closure(s.Waits)
	isAnc := func(x, a string) bool {
		switch {
		case x == s.ID:
			return slices.Contains(anc, a)
		case a == s.ID:
			return false // nothing waits for the new step yet
		}
		return ix.steps[x] != nil && slices.Contains(ix.closure(ix.steps[x].Waits), a)
	}
	b.links(ix, s, src, isAnc)
	if !errs.empty() {
		return nil, errs.err()
	}
	if p.children == nil {
		p.children = make(map[string][]string)
	}
	p.Steps = append(p.Steps, s)
	p.children[group] = append(p.children[group], s.ID)
	if !p.resolveWaits() {
		p.Steps = p.Steps[:len(p.Steps)-1]
		p.children[group] = p.children[group][:len(p.children[group])-1]
		p.resolveWaits()
		errs.add(0, 0, "", "the steps would wait for more than %d steps in all", maxWaits)
		return nil, errs.err()
	}
	return s, nil
}

// addedStep reads the root of a step given alone (AddStep).
func (r *reader) addedStep(n *yaml.Node) *docStep {
	if !r.Plain(n, "") {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		r.Fail(n, "", "want a step (a mapping with id)")
		return nil
	}
	hasID := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch n.Content[i].Value {
		case "group":
			r.Fail(n.Content[i], "group", "a group cannot be added: add its steps")
			return nil
		case "id":
			hasID = true
		}
	}
	if !hasID {
		r.Fail(n, "id", "missing: a step needs an id")
		return nil
	}
	s := r.step(n)
	if s.id == "" {
		return nil
	}
	return s
}
