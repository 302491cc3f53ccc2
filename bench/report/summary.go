package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/moat-sandbox/moat/bench/internal/machine"
)

// summary is summary.json: every figure of the run with a stable ID, for
// comparing runs (--compare).
type summary struct {
	Commit  string          `json:"commit"`
	Date    string          `json:"date"`
	Machine *summaryMachine `json:"machine"`
	// Benchmarks lists the results files found; the others were not run.
	Benchmarks []string `json:"benchmarks"`
	Figures    []figure `json:"figures"`
}

type summaryMachine struct {
	Kernel      string `json:"kernel"`
	OS          string `json:"os"`
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model"`
	GoVersion   string `json:"go_version"`
	MemTotalKiB int64  `json:"mem_total_kib,omitempty"`
}

func makeSummary(in *inputs, ps []provenance, a *analysis) *summary {
	s := &summary{Figures: a.figures}
	if s.Figures == nil {
		s.Figures = []figure{}
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
		s.Machine = &summaryMachine{Kernel: h.Kernel, OS: h.OS, CPUs: h.CPUs, CPUModel: h.CPUModel, GoVersion: h.GoVersion}
		if in.Density != nil {
			s.Machine.MemTotalKiB = in.Density.Machine.MemTotalKiB
		}
	}
	return s
}

func writeSummary(path string, s *summary) error { return machine.WriteJSON(path, s) }

func readSummary(path string) (*summary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w %s: %v", errMalformed, path, err)
	}
	if s.Figures == nil {
		return nil, fmt.Errorf("%w %s: no \"figures\": not a summary written by bench/report", errMalformed, path)
	}
	seen := map[string]bool{}
	for _, f := range s.Figures {
		if f.ID == "" {
			return nil, fmt.Errorf("%w %s: a figure without an id", errMalformed, path)
		}
		if seen[f.ID] {
			return nil, fmt.Errorf("%w %s: figure %q twice", errMalformed, path, f.ID)
		}
		seen[f.ID] = true
	}
	return &s, nil
}

// compare prints a markdown table of every figure of two summaries: old,
// new, the change in percent, and the figures found in only one.
func compare(w io.Writer, oldPath, newPath string) error {
	o, err := readSummary(oldPath)
	if err != nil {
		return err
	}
	n, err := readSummary(newPath)
	if err != nil {
		return err
	}
	if o == nil || n == nil {
		return errors.New("nothing to compare")
	}
	fmt.Fprintf(w, "# Benchmark comparison\n\nold: `%s` (commit %s, %s)  \nnew: `%s` (commit %s, %s)\n\n",
		oldPath, orDash(o.Commit), orDash(o.Date), newPath, orDash(n.Commit), orDash(n.Date))
	if o.Machine != nil && n.Machine != nil && *o.Machine != *n.Machine {
		fmt.Fprintf(w, "The machines differ: old %s, %d × %s; new %s, %d × %s. Compare with care.\n\n",
			o.Machine.Kernel, o.Machine.CPUs, o.Machine.CPUModel, n.Machine.Kernel, n.Machine.CPUs, n.Machine.CPUModel)
	}
	t := newTable("figure", "id", "unit", ">old", ">new", ">change", "", "goal")
	newByID := map[string]figure{}
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
		fmt.Fprintln(w, "Neither summary holds a figure.")
		return nil
	}
	io.WriteString(w, t.String())
	fmt.Fprintf(w, "\n%d figures in both (%d better, %d worse, by each figure's direction), %d only in old, %d only in new.\n",
		len(t.rows)-onlyOld-onlyNew, better, worse, onlyOld, onlyNew)
	return nil
}

// cmpNum formats a figure: whole numbers (counts) without decimals.
func cmpNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return num(v)
}

// goalCell shows a figure's goal and whether each run met it.
func goalCell(o, n *figure) string {
	met := func(f *figure) string {
		if f == nil || f.Met == nil {
			return "—"
		}
		if *f.Met {
			return "met"
		}
		return "not met"
	}
	g := ""
	for _, f := range []*figure{n, o} {
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
