package main

import (
	_ "embed"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"
)

//go:embed report.md.tmpl
var reportTemplate string

// docData is what report.md.tmpl renders.
type docData struct {
	Generator    string // the command that writes the report
	Summary      string // where summary.json goes, "" if nowhere
	Span         string
	Provenance   string
	CommitNote   string
	Machine      string
	MachineNotes []string
	Peers        string
	Headline     string
	S            map[string]*section
	NotMeasured  []string
}

// render builds the whole report from the inputs: the markdown, the
// figures of summary.json and the plots to draw.
func render(in *inputs, o *options) (md string, sum *summary, plots *plotSet, err error) {
	md, sum, plots, _, err = renderAll(in, o)
	return md, sum, plots, err
}

// renderAll is render, with the analysis (the headline rows).
func renderAll(in *inputs, o *options) (md string, sum *summary, plots *plotSet, a *analysis, err error) {
	a = newAnalysis()
	plots = &plotSet{}
	ps := provenances(in)

	d := &docData{Generator: o.commandLine(), Summary: o.summary, S: map[string]*section{}}
	// Sections first: they record the figures and the headline rows.
	for _, s := range []*section{
		startupSection(in, a, plots),
		controlplaneSection(in, a, plots),
		daemonSection(in, a),
		rootfsSection(in, a, plots),
		densitySection(in, a, plots),
		syscallSection(in, a),
		netproxySection(in, a),
		policySection(in, a),
	} {
		d.S[s.Bench] = s
	}
	var notMeasured []string
	// The fixed peers first (peerTable records them), then the rest.
	rest := a.notMeasured
	a.notMeasured = nil
	d.Peers = peerTable(in, a).String()
	notMeasured = append(a.notMeasured, rest...)
	d.NotMeasured = notMeasured

	d.Provenance = provenanceTable(ps).String()
	if first, last, ok := runSpan(ps); ok {
		d.Span = fmt.Sprintf("Benchmarks found: %d of %d. The run began at %s (the earliest start a results file records) and its last results file was written at %s: about %s in all.",
			countPresent(ps), len(ps), first.Format(time.RFC3339), last.Format(time.RFC3339), roundDuration(last.Sub(first)))
	} else {
		d.Span = fmt.Sprintf("Benchmarks found: %d of %d; no results file records when its run began.", countPresent(ps), len(ps))
	}
	switch cs := commits(ps); len(cs) {
	case 0:
	case 1:
		d.Span += " moat commit " + cs[0] + "."
	default:
		d.CommitNote = fmt.Sprintf("The results files come from %d different commits (%s): they are not one run of one tree; compare their figures with care.",
			len(cs), strings.Join(cs, ", "))
	}
	if t, differ := machineTable(in, ps); t != nil {
		d.Machine = t.String()
		for _, x := range differ {
			d.MachineNotes = append(d.MachineNotes, "Not the same machine: "+x+".")
		}
	}

	ht := newTable("figure", "goal", ">p50 (or value)", ">p95", ">p99", "ratio", "result")
	for _, r := range a.headline() {
		ht.add(r.Figure, r.Goal, r.P50, r.P95, r.P99, r.Ratio, r.Result)
	}
	d.Headline = ht.String()

	rel, err := filepath.Rel(filepath.Dir(o.out), o.plots)
	if err != nil {
		rel = o.plots
	}
	funcs := template.FuncMap{
		"plotPath":    func(file string) string { return path.Join(filepath.ToSlash(rel), file) },
		"resultsPath": func(file string) string { return filepath.ToSlash(filepath.Join(o.results, file)) },
	}
	tmpl, err := template.New("report").Funcs(funcs).Parse(reportTemplate)
	if err != nil {
		return "", nil, nil, nil, err
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, d); err != nil {
		return "", nil, nil, nil, err
	}
	return tidy(b.String()), makeSummary(in, ps, a), plots, a, nil
}

// sectionGroups are the headline groups of a benchmark whose rows
// --section prints beside its section.
var sectionGroups = map[string][]int{"daemon": {gDaemon}}

// renderSection renders the report and returns only the section of
// bench/name (from its "## " heading to the next one) and its headline
// rows, to paste into a report written from another run's results. Its
// plots are not drawn.
func renderSection(in *inputs, o *options, name string) (string, error) {
	if !slices.ContainsFunc(benchFiles, func(bf benchFile) bool { return bf.bench == name }) {
		return "", fmt.Errorf("--section %q: no such benchmark", name)
	}
	md, _, _, a, err := renderAll(in, o)
	if err != nil {
		return "", err
	}
	mark := "(`bench/" + name + "`)"
	start := -1
	for i := 0; i < len(md); {
		j := strings.IndexByte(md[i:], '\n')
		if j < 0 {
			j = len(md) - i
		}
		l := md[i : i+j]
		if strings.HasPrefix(l, "## ") && strings.Contains(l, mark) {
			start = i
			break
		}
		i += j + 1
	}
	if start < 0 {
		return "", fmt.Errorf("no section of bench/%s in the report", name)
	}
	end := strings.Index(md[start+3:], "\n## ")
	sec := md[start:]
	if end >= 0 {
		sec = md[start : start+3+end+1]
	}
	var b strings.Builder
	b.WriteString(strings.TrimSpace(sec) + "\n")
	if groups := sectionGroups[name]; len(groups) > 0 {
		ht := newTable("figure", "goal", ">p50 (or value)", ">p95", ">p99", "ratio", "result")
		for _, r := range a.headline() {
			if slices.Contains(groups, r.group) {
				ht.add(r.Figure, r.Goal, r.P50, r.P95, r.P99, r.Ratio, r.Result)
			}
		}
		if s := ht.String(); s != "" {
			b.WriteString("\n<!-- The headline rows of bench/" + name + " (for the table under \"## Headline\"): -->\n\n" + s)
		}
	}
	return b.String(), nil
}

func countPresent(ps []provenance) int {
	n := 0
	for _, p := range ps {
		if p.present {
			n++
		}
	}
	return n
}

func roundDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	default:
		return fmt.Sprintf("%.0f min", d.Minutes())
	}
}

var blankLines = regexp.MustCompile(`\n{3,}`)

// tidy collapses runs of blank lines and trailing spaces.
func tidy(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	s = blankLines.ReplaceAllString(strings.Join(lines, "\n"), "\n\n")
	return strings.TrimSpace(s) + "\n"
}
