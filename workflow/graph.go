package workflow

import (
	"slices"
	"sort"
)

// Ancestors returns the steps id waits for, directly or through other
// steps (its Waits, theirs, and so on), in document order; nil for an
// unknown step. Every step named by id's from and inputs is one of them.
func (p *Plan) Ancestors(id string) []string {
	ix := p.index()
	s := ix.steps[id]
	if s == nil {
		return nil
	}
	return ix.closure(s.Waits)
}

// closure returns the steps of ids and every step they wait for, at any
// depth, in document order (nil for none).
func (ix *planIndex) closure(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	var out []string
	queue := slices.Clone(ids)
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		s := ix.steps[cur]
		if seen[cur] || s == nil {
			continue
		}
		seen[cur] = true
		out = append(out, cur)
		queue = append(queue, s.Waits...)
	}
	ix.sort(out)
	return out
}

// Downstream returns every step that depends on id, directly or through
// other steps: waits for it, starts from it (from), takes its outputs
// (inputs) or its stdout (stdin_from); in document order, without id
// itself; nil for an unknown step. These are the steps to run again when
// id runs again (a resume from id, a retry from scratch).
func (p *Plan) Downstream(id string) []string {
	ix := p.index()
	if ix.steps[id] == nil {
		return nil
	}
	users := make(map[string][]string)
	for _, s := range p.Steps {
		for _, w := range s.Waits {
			users[w] = append(users[w], s.ID)
		}
		for in := range s.Inputs {
			users[in] = append(users[in], s.ID)
		}
		for _, w := range []string{s.From, s.StdinFrom} {
			if w != "" {
				users[w] = append(users[w], s.ID)
			}
		}
	}
	seen := map[string]bool{id: true}
	queue := []string{id}
	var out []string
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, u := range users[cur] {
			if !seen[u] {
				seen[u] = true
				out = append(out, u)
				queue = append(queue, u)
			}
		}
	}
	ix.sort(out)
	return out
}

// sort puts step ids in document order.
func (ix *planIndex) sort(ids []string) {
	sort.Slice(ids, func(i, j int) bool { return ix.order[ids[i]] < ix.order[ids[j]] })
}
