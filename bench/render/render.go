// Package render is the one renderer of moat's benchmark results: from
// the results schema (bench/schema) it computes every figure, goal and
// verdict and writes the markdown of docs/PERFORMANCE.md (Document), of one
// benchmark (Section, Markdown) and of a comparison of two runs (Compare),
// the figures of summary.json, and the plots to draw (as data: bench/report
// draws them, so a benchmark that renders its own markdown does not link
// the plotting library).
//
// Every number and verdict is computed here; the explanatory prose is the
// template report.md.tmpl. The same inputs give the same output, byte for
// byte. Rendering reads nothing but its inputs, except that without a
// machine's MemTotal in any results file the document reads this
// machine's /proc/meminfo, and says so.
package render

import (
	_ "embed"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/moat-sandbox/moat/bench/schema"
)

//go:embed report.md.tmpl
var reportTemplate string

// ErrNoSection is a section asked of a benchmark the report has no
// section of.
var ErrNoSection = errors.New("no such benchmark section")

// Inputs are the results one document is rendered from: each kind's, nil
// when its results file is missing (that benchmark was not run in this
// invocation).
type Inputs struct {
	Startup      *schema.Startup
	Syscall      *schema.Syscall
	Policy       *schema.Policy
	Netproxy     *schema.Netproxy
	Controlplane *schema.Controlplane
	Daemon       *schema.Daemon
	Rootfs       *schema.Rootfs
	Density      *schema.Density
	Workflow     *schema.Workflow
	Build        *schema.Build
	Agent        *schema.Agent
	// Written is each results file's modification time, by kind; a kind
	// without one has "file written" left blank.
	Written map[string]time.Time
}

// Set stores r as the results of its kind. It fails with schema.ErrKind
// for a kind Inputs has no field for.
func (in *Inputs) Set(r schema.Result) error {
	switch f := r.(type) {
	case *schema.Startup:
		in.Startup = f
	case *schema.Syscall:
		in.Syscall = f
	case *schema.Policy:
		in.Policy = f
	case *schema.Netproxy:
		in.Netproxy = f
	case *schema.Controlplane:
		in.Controlplane = f
	case *schema.Daemon:
		in.Daemon = f
	case *schema.Rootfs:
		in.Rootfs = f
	case *schema.Density:
		in.Density = f
	case *schema.Workflow:
		in.Workflow = f
	case *schema.Build:
		in.Build = f
	case *schema.Agent:
		in.Agent = f
	default:
		return fmt.Errorf("%w: %T", schema.ErrKind, r)
	}
	return nil
}

// Get returns the results of kind name, or nil when they are missing.
func (in *Inputs) Get(name string) schema.Result {
	// Each case returns nil itself: a nil *T in an interface is not nil.
	switch name {
	case "startup":
		if in.Startup != nil {
			return in.Startup
		}
	case "syscall":
		if in.Syscall != nil {
			return in.Syscall
		}
	case "policy":
		if in.Policy != nil {
			return in.Policy
		}
	case "netproxy":
		if in.Netproxy != nil {
			return in.Netproxy
		}
	case "controlplane":
		if in.Controlplane != nil {
			return in.Controlplane
		}
	case "daemon":
		if in.Daemon != nil {
			return in.Daemon
		}
	case "rootfs":
		if in.Rootfs != nil {
			return in.Rootfs
		}
	case "density":
		if in.Density != nil {
			return in.Density
		}
	case "workflow":
		if in.Workflow != nil {
			return in.Workflow
		}
	case "build":
		if in.Build != nil {
			return in.Build
		}
	case "agent":
		if in.Agent != nil {
			return in.Agent
		}
	}
	return nil
}

// Present reports whether the results of bench/name are in.
func (in *Inputs) Present(name string) bool { return in.Get(name) != nil }

// Options say where the document and its companions go, for the links
// and commands it prints.
type Options struct {
	// Generator is the command that writes the document, printed in it.
	Generator string
	// Results is the results directory as the document names it
	// ("results"); Summary where summary.json goes, "" if nowhere.
	Results string
	Summary string
	// Plots is the plots directory relative to the document ("perf");
	// NoPlots leaves the plots out of the markdown.
	Plots   string
	NoPlots bool
}

// Doc is a rendered document.
type Doc struct {
	Markdown string
	// Summary holds every figure, for summary.json.
	Summary *schema.Summary
	// Plots are the plots the markdown links, to draw.
	Plots []Plot
}

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

// Document renders docs/PERFORMANCE.md from in: the markdown, the figures
// of summary.json and the plots to draw.
func Document(in *Inputs, o Options) (*Doc, error) {
	d, _, err := document(in, o)
	return d, err
}

// document is Document, with the analysis (the headline rows).
func document(in *Inputs, o Options) (*Doc, *analysis, error) {
	a := newAnalysis()
	plots := &plotSet{}
	ps := provenances(in)

	d := &docData{Generator: o.Generator, Summary: o.Summary, S: map[string]*section{}}
	// Sections first: they record the figures and the headline rows.
	for _, s := range []*section{
		startupSection(in, a, plots),
		controlplaneSection(in, a, plots),
		daemonSection(in, a),
		rootfsSection(in, a, plots),
		densitySection(in, a, plots),
		workflowSection(in, a, plots),
		buildSection(in, a, plots),
		agentSection(in, a, plots),
		syscallSection(in, a),
		netproxySection(in, a),
		policySection(in, a),
	} {
		d.S[s.Bench] = s
	}
	if o.NoPlots {
		for _, s := range d.S {
			s.Plots = nil
		}
		plots.items = nil
	}
	// The fixed peers first (peerTable records them), then the rest.
	rest := a.notMeasured
	a.notMeasured = nil
	d.Peers = peerTable(in, a).String()
	d.NotMeasured = append(a.notMeasured, rest...)

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
	if t, differ := machineTable(ps); t != nil {
		d.Machine = t.String()
		for _, x := range differ {
			d.MachineNotes = append(d.MachineNotes, "Not the same machine: "+x+".")
		}
	}
	d.Headline = headlineTable(a.headline()).String()

	funcs := template.FuncMap{
		"plotPath":    func(file string) string { return path.Join(o.Plots, file) },
		"resultsPath": func(file string) string { return path.Join(o.Results, file) },
	}
	tmpl, err := template.New("report").Funcs(funcs).Parse(reportTemplate)
	if err != nil {
		return nil, nil, err
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, d); err != nil {
		return nil, nil, err
	}
	return &Doc{Markdown: tidy(b.String()), Summary: makeSummary(in, ps, a), Plots: plots.items}, a, nil
}

func headlineTable(rows []headRow) *table {
	ht := newTable("figure", "goal", ">p50 (or value)", ">p95", ">p99", "ratio", "result")
	for _, r := range rows {
		ht.add(r.Figure, r.Goal, r.P50, r.P95, r.P99, r.Ratio, r.Result)
	}
	return ht
}

// Section renders the document and returns only the section of
// bench/name (from its "## " heading to the next one) followed by its
// headline rows, to paste into a document written from another run's
// results. It fails with ErrNoSection for a benchmark the document has no
// section of.
func Section(in *Inputs, o Options, name string) (string, error) {
	if schema.New(name) == nil {
		return "", fmt.Errorf("%w: %q", ErrNoSection, name)
	}
	d, a, err := document(in, o)
	if err != nil {
		return "", err
	}
	md := d.Markdown
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
		return "", fmt.Errorf("%w: bench/%s has none in the document", ErrNoSection, name)
	}
	end := strings.Index(md[start+3:], "\n## ")
	sec := md[start:]
	if end >= 0 {
		sec = md[start : start+3+end+1]
	}
	var b strings.Builder
	b.WriteString(strings.TrimSpace(sec) + "\n")
	var rows []headRow
	for _, r := range a.headline() {
		if r.bench == name {
			rows = append(rows, r)
		}
	}
	if s := headlineTable(rows).String(); s != "" {
		b.WriteString("\n<!-- The headline rows of bench/" + name + " (for the table under \"## Headline\"): -->\n\n" + s)
	}
	return b.String(), nil
}

// Markdown renders one benchmark's results on their own, as the benchmark
// writes them (--markdown): a title, the machine, then the section
// docs/PERFORMANCE.md would hold for them and their headline rows, without
// plots.
func Markdown(r schema.Result) (string, error) {
	in := &Inputs{}
	if err := in.Set(r); err != nil {
		return "", err
	}
	h := r.Header()
	sec, err := Section(in, Options{Results: ".", NoPlots: true}, h.Bench)
	if err != nil {
		return "", err
	}
	m := h.Machine
	var b strings.Builder
	fmt.Fprintf(&b, "# moat benchmark results: bench/%s\n\n", h.Bench)
	fmt.Fprintf(&b, "Machine: Linux %s, %s, %d × %s, %s, uid %d", m.Kernel, m.OS, m.CPUs, m.CPUModel, m.GoVersion, m.UID)
	if m.MemTotalKiB > 0 {
		fmt.Fprintf(&b, ", %.1f GiB", float64(m.MemTotalKiB)/(1<<20))
	}
	fmt.Fprintf(&b, ". Results schema %d.\n\n", h.Schema)
	b.WriteString(sec)
	if h.Failed && len(h.Errors) > 0 && !strings.Contains(sec, "**The run failed**") {
		b.WriteString("\n**The run failed** (the benchmark exits non-zero):\n\n")
		for _, e := range h.Errors {
			fmt.Fprintf(&b, "- %s\n", code(firstN(e, 300)))
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
