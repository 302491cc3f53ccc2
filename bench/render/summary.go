package render

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/moat-sandbox/moat/bench/schema"
)

// makeSummary is summary.json of the document: every figure, the run's
// commits, start and machine.
func makeSummary(in *Inputs, ps []provenance, a *analysis) *schema.Summary {
	s := &schema.Summary{Schema: schema.Version, Figures: a.figures}
	if s.Figures == nil {
		s.Figures = []schema.Figure{}
	}
	s.Commit = strings.Join(commits(ps), ", ")
	if first, _, _ := runSpan(ps); !first.IsZero() {
		s.Date = first.Format("2006-01-02T15:04:05Z07:00")
	}
	s.Benchmarks = []string{}
	for _, p := range ps {
		if p.present {
			s.Benchmarks = append(s.Benchmarks, p.bench)
		}
	}
	if h, _, _ := machineOf(ps); h != nil {
		s.Machine = &schema.SummaryMachine{Kernel: h.Kernel, OS: h.OS, CPUs: h.CPUs, CPUModel: h.CPUModel, GoVersion: h.GoVersion}
		if kib, src := memTotal(ps); kib > 0 && strings.HasPrefix(src, "MemTotal, recorded") {
			s.Machine.MemTotalKiB = kib
		}
	}
	return s
}

// Compare writes a markdown table of every figure of two summaries, the
// old one read from oldName and the new one from newName: old, new, the
// change in percent, better or worse by each figure's direction, the goal
// with both verdicts, and the figures found in only one.
func Compare(w io.Writer, oldName string, o *schema.Summary, newName string, n *schema.Summary) error {
	if _, err := fmt.Fprintf(w, "# Benchmark comparison\n\nold: `%s` (commit %s, %s)  \nnew: `%s` (commit %s, %s)\n\n",
		oldName, orDash(o.Commit), orDash(o.Date), newName, orDash(n.Commit), orDash(n.Date)); err != nil {
		return err
	}
	if o.Machine != nil && n.Machine != nil && *o.Machine != *n.Machine {
		fmt.Fprintf(w, "The machines differ: old %s, %d × %s; new %s, %d × %s. Compare with care.\n\n",
			o.Machine.Kernel, o.Machine.CPUs, o.Machine.CPUModel, n.Machine.Kernel, n.Machine.CPUs, n.Machine.CPUModel)
	}
	t := newTable("figure", "id", "unit", ">old", ">new", ">change", "", "goal")
	newByID := map[string]schema.Figure{}
	for _, f := range n.Figures {
		newByID[f.ID] = f
	}
	oldIDs := map[string]bool{}
	var better, worse, onlyOld, onlyNew int
	for _, of := range o.Figures {
		oldIDs[of.ID] = true
		nf, ok := newByID[of.ID]
		if !ok {
			t.add(of.Title, code(of.ID), of.Unit, cmpNum(of.Value), "—", "—", "only in old", goalCell(&of, nil))
			onlyOld++
			continue
		}
		change, dir := "—", ""
		if of.Value != 0 {
			c := (nf.Value - of.Value) / math.Abs(of.Value) * 100
			change = pct(c)
			switch {
			case nf.Value == of.Value || nf.Better == "":
			case (nf.Value < of.Value) == (nf.Better == "lower"):
				dir = "better"
				better++
			default:
				dir = "worse"
				worse++
			}
		} else if nf.Value != 0 {
			change = "new ≠ 0"
		}
		t.add(nf.Title, code(nf.ID), nf.Unit, cmpNum(of.Value), cmpNum(nf.Value), change, dir, goalCell(&of, &nf))
	}
	for _, nf := range n.Figures {
		if !oldIDs[nf.ID] {
			t.add(nf.Title, code(nf.ID), nf.Unit, "—", cmpNum(nf.Value), "—", "only in new", goalCell(nil, &nf))
			onlyNew++
		}
	}
	if len(t.rows) == 0 {
		_, err := fmt.Fprintln(w, "Neither summary holds a figure.")
		return err
	}
	io.WriteString(w, t.String())
	_, err := fmt.Fprintf(w, "\n%d figures in both (%d better, %d worse, by each figure's direction), %d only in old, %d only in new.\n",
		len(t.rows)-onlyOld-onlyNew, better, worse, onlyOld, onlyNew)
	return err
}

// cmpNum formats a figure: whole numbers (counts) without decimals.
func cmpNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return num(v)
}

// goalCell shows a figure's goal and whether each run met it.
func goalCell(o, n *schema.Figure) string {
	met := func(f *schema.Figure) string {
		if f == nil || f.Met == nil {
			return "—"
		}
		if *f.Met {
			return "met"
		}
		return "not met"
	}
	g := ""
	for _, f := range []*schema.Figure{n, o} {
		if f != nil && f.Goal != "" {
			g = f.Goal
			break
		}
	}
	if g == "" {
		return ""
	}
	return fmt.Sprintf("%s: %s → %s", g, met(o), met(n))
}
