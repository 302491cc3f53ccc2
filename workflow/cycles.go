package workflow

import (
	"slices"
	"strings"
)

// cycles finds the cycles of the waits graph and records one error for
// each (naming its steps). It returns the steps' positions (in p.Steps)
// ordered so that every step comes after the steps it waits for (valid
// only when there is no cycle) and whether there is one.
func (b *builder) cycles(ix *planIndex) (order []int, cyclic bool) {
	t := tarjan{
		ix:    ix,
		index: make([]int, len(b.p.Steps)),
		low:   make([]int, len(b.p.Steps)),
		on:    make([]bool, len(b.p.Steps)),
	}
	for i := range t.index {
		t.index[i] = -1
	}
	for i := range b.p.Steps {
		if t.index[i] < 0 {
			t.visit(i)
		}
	}
	for _, scc := range t.sccs {
		if len(scc) > 1 {
			cyclic = true
			b.reportCycle(ix, scc)
		}
		order = append(order, scc...)
	}
	return order, cyclic
}

// reportCycle records the cycle through the first step (in document
// order) of scc, a strongly connected set of steps.
func (b *builder) reportCycle(ix *planIndex, scc []int) {
	first := slices.Min(scc)
	in := make(map[int]bool, len(scc))
	for _, i := range scc {
		in[i] = true
	}
	// Breadth first from first along waits, inside scc, back to first.
	from := map[int]int{}
	queue := []int{first}
	end := -1
	for len(queue) > 0 && end < 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, w := range b.p.Steps[cur].Waits {
			j := ix.order[w]
			if !in[j] {
				continue
			}
			if j == first {
				end = cur
				break
			}
			if _, ok := from[j]; !ok {
				from[j] = cur
				queue = append(queue, j)
			}
		}
	}
	path := []string{b.p.Steps[first].ID}
	for i := end; i != first; i = from[i] {
		path = append(path, b.p.Steps[i].ID)
	}
	path = append(path, b.p.Steps[first].ID)
	// path runs from first back along the waits; print it forwards.
	slices.Reverse(path)
	s := b.p.Steps[first]
	b.errs.add(s.Line, 0, "needs", "cycle: %s (each waits for the next)", strings.Join(path, " -> "))
}

// tarjan is Tarjan's strongly connected components over the waits of a
// plan's steps (by position in p.Steps).
type tarjan struct {
	ix         *planIndex
	next       int
	index, low []int
	on         []bool
	stack      []int
	// sccs come out in reverse topological order of the waits: a
	// component after every component it waits for.
	sccs [][]int
}

// visit is the recursive step of Tarjan's algorithm.
func (t *tarjan) visit(v int) {
	t.index[v], t.low[v] = t.next, t.next
	t.next++
	t.stack = append(t.stack, v)
	t.on[v] = true
	for _, w := range t.ix.p.Steps[v].Waits {
		u := t.ix.order[w]
		switch {
		case t.index[u] < 0:
			t.visit(u)
			t.low[v] = min(t.low[v], t.low[u])
		case t.on[u]:
			t.low[v] = min(t.low[v], t.index[u])
		}
	}
	if t.low[v] != t.index[v] {
		return
	}
	var scc []int
	for {
		u := t.stack[len(t.stack)-1]
		t.stack = t.stack[:len(t.stack)-1]
		t.on[u] = false
		scc = append(scc, u)
		if u == v {
			break
		}
	}
	t.sccs = append(t.sccs, scc)
}

// bitset is a set of step positions.
type bitset []uint64

// has reports whether i is in the set.
func (s bitset) has(i int) bool { return s[i/64]&(1<<(i%64)) != 0 }

// ancestorSets returns, for each step (by position), the set of steps it
// waits for at any depth. order lists every step after those it waits
// for.
func ancestorSets(ix *planIndex, order []int) []bitset {
	n := len(ix.p.Steps)
	words := (n + 63) / 64
	sets := make([]bitset, n)
	for _, v := range order {
		set := make(bitset, words)
		for _, w := range ix.p.Steps[v].Waits {
			u := ix.order[w]
			set[u/64] |= 1 << (u % 64)
			for k, x := range sets[u] {
				set[k] |= x
			}
		}
		sets[v] = set
	}
	return sets
}
