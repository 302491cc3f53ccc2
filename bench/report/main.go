// Command report turns one benchmark run into docs/PERFORMANCE.md, its
// plots and a JSON summary that later runs compare against.
//
// It reads every results file the benchmarks wrote into the results
// directory (bench/startup's startup.json, bench/syscall's, bench/policy's,
// bench/netproxy's, bench/controlplane's, bench/daemon's, bench/rootfs's
// and bench/density's), and writes:
//
//   - the markdown report (--out): how the run was made, the machine, the
//     peers and their versions (each one not run with its reason beside
//     it), a headline table of figures, goals, ratios and verdicts, a
//     section per benchmark, and what could not be measured and why;
//   - PNG plots (--plots, linked from the report by relative paths):
//     latency distributions of the cold starts, of time to interactive and
//     of the rootfs kinds, and the scaling curves of start latency and
//     memory against live sandboxes;
//   - summary.json (--summary): every figure with a stable ID, unit,
//     goal and verdict.
//
// Every number and verdict in the report is computed here from the JSON;
// the prose is in report.md.tmpl. A missing results file makes its section
// say "not run in this invocation"; a malformed one is an error (exit 1).
// A slow figure never fails the command.
//
//	go run ./bench/report --results bench/results --out docs/PERFORMANCE.md \
//	    --plots docs/perf --summary bench/results/summary.json
//	go run ./bench/report --compare OLD/summary.json NEW/summary.json
//
// --section NAME prints only the section of bench/NAME (and its headline
// rows), writing nothing: for pasting a benchmark measured on its own into
// a report generated from another run.
//
// --compare prints a markdown table of every figure of the two summaries:
// old, new, change in percent, and the figures found in only one.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

type options struct {
	results, out, plots, summary string
	section                      string   // print only this benchmark's section
	compare                      []string // OLD, NEW
}

// commandLine is the command that writes the report with these options.
func (o *options) commandLine() string {
	s := fmt.Sprintf("go run ./bench/report --results %s --out %s --plots %s", o.results, o.out, o.plots)
	if o.summary != "" {
		s += " --summary " + o.summary
	}
	return s
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
	if o.section != "" {
		in, err := load(o.results)
		if err == nil {
			var s string
			if s, err = renderSection(in, o, o.section); err == nil {
				fmt.Fprint(stdout, s)
				return 0
			}
		}
		fmt.Fprintln(stderr, "report:", err)
		return 1
	}
	if o.compare != nil {
		if err := compare(stdout, o.compare[0], o.compare[1]); err != nil {
			fmt.Fprintln(stderr, "report:", err)
			return 1
		}
		return 0
	}
	if err := generate(o, stderr); err != nil {
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
	md, sum, plots, err := render(in, o)
	if err != nil {
		return err
	}
	written, err := plots.write(o.plots)
	if err != nil {
		return err
	}
	if dir := filepath.Dir(o.out); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "report: wrote %s (%d of %d results files) and %d plot(s) in %s\n",
		o.out, len(sum.Benchmarks), len(benchFiles), len(written), o.plots)
	if o.summary != "" {
		if err := writeSummary(o.summary, sum); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "report: wrote %s (%d figures)\n", o.summary, len(sum.Figures))
	}
	return nil
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.results, "results", "bench/results", "`DIR` holding the benchmarks' results JSON")
	fs.StringVar(&o.out, "out", "docs/PERFORMANCE.md", "the markdown report to write")
	fs.StringVar(&o.plots, "plots", "docs/perf", "`DIR` for the PNG plots (linked relative to --out)")
	fs.StringVar(&o.summary, "summary", "", "write every figure as JSON to `FILE` (e.g. bench/results/summary.json)")
	fs.StringVar(&o.section, "section", "", "print only the section of bench/`NAME` (and its headline rows) as markdown, writing nothing: to paste into a report of another run")
	cmp := fs.Bool("compare", false, "compare two summaries: --compare OLD.json NEW.json (prints markdown)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: report [--results DIR] [--out FILE] [--plots DIR] [--summary FILE]\n"+
			"       report [--results DIR] --section NAME\n"+
			"       report --compare OLD_summary.json NEW_summary.json\n\n")
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
