// Command policy measures how long the policy engine takes to decide one
// request against a realistic policy (internal/policyset: 100 rules in
// three layers), per request and over the mix, and prints p50/p95/p99 in
// microseconds as markdown (and JSON with --json). The goal is well under
// 50 µs per decision: a decision is made before every call, on its path.
//
//	go run ./bench/policy [--rounds N] [--json FILE] [--markdown FILE]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/internal/policyset"
	"github.com/moat-sandbox/moat/policy"
)

// row is the figures of one request (or of the mix).
type row struct {
	Request string        `json:"request"`
	Effect  string        `json:"effect"`
	Micros  stats.Summary `json:"us"`
}

type report struct {
	Machine machine.Host  `json:"machine"`
	Commit  string        `json:"commit"`
	Date    string        `json:"date"`
	Rounds  int           `json:"rounds"`
	Compile stats.Summary `json:"compile_us"`
	Mix     row           `json:"mix"`
	Rows    []row         `json:"requests"`
}

func main() {
	rounds := flag.Int("rounds", 2000, "timed decisions per request (after as many warm-up ones)")
	jsonOut := flag.String("json", "", "write the results as JSON to `FILE`")
	mdOut := flag.String("markdown", "", "write the markdown report to `FILE`")
	flag.Parse()
	if *rounds < 10 {
		fmt.Fprintln(os.Stderr, "policy: --rounds must be at least 10")
		os.Exit(2)
	}
	rep, err := run(*rounds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "policy:", err)
		os.Exit(1)
	}
	md := markdown(rep)
	fmt.Print(md)
	if *mdOut != "" {
		if err := os.WriteFile(*mdOut, []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "policy:", err)
			os.Exit(1)
		}
	}
	if *jsonOut != "" {
		if err := machine.WriteJSON(*jsonOut, rep); err != nil {
			fmt.Fprintln(os.Stderr, "policy:", err)
			os.Exit(1)
		}
	}
}

func run(rounds int) (*report, error) {
	rep := &report{Machine: machine.Describe(), Commit: machine.GitCommit(), Date: time.Now().UTC().Format(time.RFC3339), Rounds: rounds}
	var compile []float64
	var eff *policy.Effective
	for range 50 {
		t := time.Now()
		e, err := policyset.Effective()
		if err != nil {
			return nil, err
		}
		compile = append(compile, micros(time.Since(t)))
		eff = e
	}
	rep.Compile, _ = stats.Summarize(compile)
	reqs := policyset.Requests()
	var all []float64
	for _, q := range reqs {
		for range rounds {
			eff.Decide(q) // warm-up
		}
		samples := make([]float64, rounds)
		var d policy.Decision
		for i := range samples {
			t := time.Now()
			d = eff.Decide(q)
			samples[i] = micros(time.Since(t))
		}
		all = append(all, samples...)
		s, _ := stats.Summarize(samples)
		rep.Rows = append(rep.Rows, row{Request: q.String(), Effect: d.Effect.String(), Micros: s})
		runtime.GC() // keep one request's garbage out of the next one's samples
	}
	s, _ := stats.Summarize(all)
	rep.Mix = row{Request: fmt.Sprintf("all %d requests", len(reqs)), Micros: s}
	return rep, nil
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func markdown(r *report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# moat policy decision benchmark\n\nMachine: %s, %s, %d × %s, %s; commit %s; %s.\n\n",
		r.Machine.Kernel, r.Machine.OS, r.Machine.CPUs, r.Machine.CPUModel, r.Machine.GoVersion, r.Commit, r.Date)
	fmt.Fprintf(&b, "Policy: internal/policyset, 100 rules in three layers (managed, project with the trusted profile, user). "+
		"Each request is decided %d times after as many warm-up decisions; each sample is one `Decide` call, timed alone (wall clock, µs).\n\n", r.Rounds)
	b.WriteString("| request | effect | p50 µs | p95 µs | p99 µs | max µs |\n|---|---|--:|--:|--:|--:|\n")
	line := func(w io.Writer, x row) {
		fmt.Fprintf(w, "| `%s` | %s | %.2f | %.2f | %.2f | %.1f |\n", strings.ReplaceAll(x.Request, "|", "\\|"), x.Effect, x.Micros.P50, x.Micros.P95, x.Micros.P99, x.Micros.Max)
	}
	for _, x := range r.Rows {
		line(&b, x)
	}
	line(&b, r.Mix)
	fmt.Fprintf(&b, "\nCompiling the policy (parse and compile the three layers): p50 %.0f µs, p95 %.0f µs (50 runs).\n", r.Compile.P50, r.Compile.P95)
	return b.String()
}
