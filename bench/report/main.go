// Command report turns one benchmark run into docs/PERFORMANCE.md, its
// plots and a JSON summary that later runs compare against.
//
// It reads every results file the benchmarks wrote into the results
// directory (NAME.json of bench/NAME, in the schema of bench/schema) and,
// through bench/render, writes:
//
//   - the markdown report (--out): how the run was made, the machine, the
//     peers and their versions (each one not run with its reason beside
//     it), a headline table of figures, goals, ratios and verdicts, a
//     section per benchmark, and what could not be measured and why;
//   - PNG plots (--plots, linked from the report by relative paths),
//     drawn here with gonum.org/v1/plot: latency distributions of the cold
//     starts, of time to interactive, of the rootfs kinds and of the
//     workflow rows, and the scaling curves of start latency and memory
//     against live sandboxes;
//   - summary.json (--summary): every figure with a stable ID, unit, goal
//     and verdict.
//
// A missing results file makes its section say "not run in this
// invocation"; a malformed one, or one of another schema version, is an
// error (exit 1). A slow figure never fails the command. Run from bench/:
//
//	go run ./report --results results --out ../docs/PERFORMANCE.md \
//	    --plots ../docs/perf --summary results/summary.json
//	go run ./report --compare OLD/summary.json NEW/summary.json
//	go run ./report --section daemon
//	go run ./report --render results/daemon.json
//
// --section NAME prints only the section of bench/NAME (and its headline
// rows), writing nothing: for pasting a benchmark measured on its own into
// a report generated from another run. --render FILE prints the markdown
// of one results file, as its benchmark's --markdown writes it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/render"
	"github.com/moat-sandbox/moat/bench/schema"
)

type options struct {
	results, out, plots, summary string
	section                      string   // print only this benchmark's section
	render                       string   // print the markdown of this results file
	compare                      []string // OLD, NEW
}

// commandLine is the command that writes the report with these options,
// run from bench/.
func (o *options) commandLine() string {
	s := fmt.Sprintf("cd bench && go run ./report --results %s --out %s --plots %s", o.results, o.out, o.plots)
	if o.summary != "" {
		s += " --summary " + o.summary
	}
	return s
}

// renderOptions are the options of bench/render for this report.
func (o *options) renderOptions() render.Options {
	rel, err := filepath.Rel(filepath.Dir(o.out), o.plots)
	if err != nil {
		rel = o.plots
	}
	return render.Options{Generator: o.commandLine(), Results: filepath.ToSlash(o.results), Summary: o.summary, Plots: filepath.ToSlash(rel)}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code: 0, 1 when a results
// file is malformed or an output cannot be written, 2 on bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "report:", err)
		return 2
	}
	switch {
	case o.section != "":
		err = printSection(o, stdout)
	case o.render != "":
		err = printRender(o.render, stdout)
	case o.compare != nil:
		err = compare(stdout, o.compare[0], o.compare[1])
	default:
		err = generate(o, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "report:", err)
		return 1
	}
	return 0
}

// generate reads the results and writes the report, plots and summary.
func generate(o *options, stderr io.Writer) error {
	in, err := load(o.results)
	if err != nil {
		return err
	}
	doc, err := render.Document(in, o.renderOptions())
	if err != nil {
		return err
	}
	written, err := drawPlots(doc.Plots, o.plots)
	if err != nil {
		return err
	}
	if dir := filepath.Dir(o.out); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(o.out, []byte(doc.Markdown), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "report: wrote %s (%d of %d results files) and %d plot(s) in %s\n",
		o.out, len(doc.Summary.Benchmarks), len(schema.Kinds()), len(written), o.plots)
	if o.summary != "" {
		if err := writeSummary(o.summary, doc.Summary); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "report: wrote %s (%d figures)\n", o.summary, len(doc.Summary.Figures))
	}
	return nil
}

// printSection prints the section of one benchmark, as the report would
// hold it, and its headline rows.
func printSection(o *options, stdout io.Writer) error {
	in, err := load(o.results)
	if err != nil {
		return err
	}
	s, err := render.Section(in, o.renderOptions(), o.section)
	if err != nil {
		return fmt.Errorf("--section %q: %w", o.section, err)
	}
	_, err = io.WriteString(stdout, s)
	return err
}

// printRender prints the markdown of one results file.
func printRender(path string, stdout io.Writer) error {
	r, err := loadFile(path, "")
	if err != nil {
		return err
	}
	md, err := render.Markdown(r)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, md)
	return err
}

// defaults are the paths the report reads and writes by default: those of
// the checkout (bench/results, docs/PERFORMANCE.md, docs/perf), relative to
// the working directory; relative to bench/ outside a checkout.
func defaults() (results, out, plots string) {
	results, out, plots = "results", filepath.Join("..", "docs", "PERFORMANCE.md"), filepath.Join("..", "docs", "perf")
	root, err := cli.Root()
	if err != nil {
		return
	}
	wd, err := os.Getwd()
	if err != nil {
		return
	}
	rel := func(p ...string) string {
		r, err := filepath.Rel(wd, filepath.Join(append([]string{root}, p...)...))
		if err != nil {
			return filepath.Join(append([]string{root}, p...)...)
		}
		return r
	}
	return rel("bench", "results"), rel("docs", "PERFORMANCE.md"), rel("docs", "perf")
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	results, out, plots := defaults()
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.results, "results", results, "`DIR` holding the benchmarks' results JSON")
	fs.StringVar(&o.out, "out", out, "the markdown report to write")
	fs.StringVar(&o.plots, "plots", plots, "`DIR` for the PNG plots (linked relative to --out)")
	fs.StringVar(&o.summary, "summary", "", "write every figure as JSON to `FILE` (e.g. results/summary.json)")
	fs.StringVar(&o.section, "section", "", "print only the section of bench/`NAME` (and its headline rows) as markdown, writing nothing: to paste into a report of another run")
	fs.StringVar(&o.render, "render", "", "print the markdown of one results `FILE`, as its benchmark's --markdown writes it")
	cmp := fs.Bool("compare", false, "compare two summaries: --compare OLD.json NEW.json (prints markdown)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: go run ./report [--results DIR] [--out FILE] [--plots DIR] [--summary FILE]   (from bench/)\n"+
			"       go run ./report [--results DIR] --section NAME\n"+
			"       go run ./report --render FILE.json\n"+
			"       go run ./report --compare OLD_summary.json NEW_summary.json\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *cmp {
		if fs.NArg() != 2 {
			return nil, errors.New("--compare takes two summary files: OLD NEW")
		}
		o.compare = fs.Args()
		return o, nil
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, v := range []struct{ name, val string }{{"--results", o.results}, {"--out", o.out}, {"--plots", o.plots}} {
		if strings.TrimSpace(v.val) == "" {
			return nil, fmt.Errorf("%s must not be empty", v.name)
		}
	}
	return o, nil
}
