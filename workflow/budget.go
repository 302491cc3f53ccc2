package workflow

import (
	"fmt"
	"strconv"

	units "github.com/docker/go-units"
	"go.yaml.in/yaml/v3"

	"github.com/moat-sandbox/moat/internal/yamlnode"
	"github.com/moat-sandbox/moat/sandbox"
)

// budget reads a group's budget: cpus, memory, pids, each above 0.
func (r *reader) budget(n *yaml.Node, field string, lines map[string]int) *sandbox.Limits {
	b := &sandbox.Limits{}
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		var zero bool
		switch key {
		case "cpus":
			x, ok := r.Number(v, name)
			if !ok {
				return
			}
			b.CPUs, zero = x, x == 0
		case "memory":
			x, ok := r.Size(v, name)
			if !ok {
				return
			}
			b.MemoryBytes, zero = x, x == 0
		case "pids":
			x, ok := r.Integer(v, name)
			if !ok {
				return
			}
			b.Pids, zero = x, x <= 0
		default:
			r.Fail(k, name, "unknown field")
			return
		}
		if zero {
			r.Fail(v, name, "must be more than 0")
			return
		}
		lines[name] = v.Line
	})
	return b
}

// groupBudget checks g's budget against the host's CPUs and against the
// budgets of the groups around it.
func (b *builder) groupBudget(ix *planIndex, g *Group) {
	if g.Budget == nil {
		return
	}
	lines := b.groups[g.ID].lines
	if b.opts.CPUs > 0 && g.Budget.CPUs > float64(b.opts.CPUs) {
		b.errs.add(lines["budget.cpus"], 0, "budget.cpus", "%s is more than this host's %d CPUs", cpus(g.Budget.CPUs), b.opts.CPUs)
	}
	for o := ix.groups[g.Parent]; o != nil; o = ix.groups[o.Parent] {
		if o.Budget == nil {
			continue
		}
		for _, x := range over(*g.Budget, *o.Budget) {
			b.errs.add(lines["budget."+x.field], 0, "budget."+x.field, "%s is above the budget of group %q (%s)", x.value, o.ID, x.limit)
		}
	}
}

// stepBudget checks the limits of s against the budgets of its groups
// (src is where s is written).
func (b *builder) stepBudget(ix *planIndex, s *PlanStep, src *docStep) {
	for _, gid := range s.Groups {
		g := ix.groups[gid]
		if g == nil || g.Budget == nil {
			continue
		}
		if s.Kind == KindBuild {
			// The build's sandbox is made by the daemon's build runner,
			// outside the group's cgroup: it would not be bounded by it.
			b.errs.add(src.build.line, src.build.col, "build", "a build cannot run inside the budget of group %q (its sandbox is the build's own): put it outside the group", g.ID)
			return
		}
		if s.Kind == KindAgent {
			// The agent run makes its sandboxes, outside the group's
			// cgroup, as a build does.
			b.errs.add(src.agent.line, src.agent.col, "agent", "an agent step cannot run inside the budget of group %q (its sandboxes are its agent run's own): put it outside the group", g.ID)
			return
		}
		for _, x := range over(s.Limits, *g.Budget) {
			field := "limits." + x.field
			line, note := src.line, " (from defaults)"
			if l, ok := src.f.lines[field]; ok {
				line, note = l, ""
			}
			b.errs.add(line, 0, field, "%s%s is above the budget of group %q (%s)", x.value, note, g.ID, x.limit)
		}
	}
}

// excess is a limit above a budget.
type excess struct {
	field, value, limit string
}

// over lists the limits of l (memory, cpus, pids) above those of budget;
// a zero on either side is no limit.
func over(l, budget sandbox.Limits) []excess {
	var out []excess
	if l.MemoryBytes > 0 && budget.MemoryBytes > 0 && l.MemoryBytes > budget.MemoryBytes {
		out = append(out, excess{"memory", size(l.MemoryBytes), size(budget.MemoryBytes)})
	}
	if l.CPUs > 0 && budget.CPUs > 0 && l.CPUs > budget.CPUs {
		out = append(out, excess{"cpus", cpus(l.CPUs), cpus(budget.CPUs)})
	}
	if l.Pids > 0 && budget.Pids > 0 && l.Pids > budget.Pids {
		out = append(out, excess{"pids", strconv.FormatInt(l.Pids, 10), strconv.FormatInt(budget.Pids, 10)})
	}
	return out
}

// size formats a byte size with a binary unit ("1GiB").
func size(n int64) string { return units.BytesSize(float64(n)) }

// cpus formats a number of CPUs.
func cpus(c float64) string { return fmt.Sprintf("%g", c) }
