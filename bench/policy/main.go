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
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/internal/policyset"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/compile"
	"github.com/moat-sandbox/moat/sandbox"
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
	// Spec: compiling the policy into a sandbox spec (package enforce)
	// for synthetic workspaces of a given size.
	Spec []specRow `json:"spec"`
}

// specRow is compile.Compile for one workspace.
type specRow struct {
	Workspace string        `json:"workspace"`
	Entries   int           `json:"entries"`
	Walked    int           `json:"walked"`
	Restrict  int           `json:"restrict"`
	Micros    stats.Summary `json:"us"`
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
	for _, size := range []struct {
		name        string
		dirs, files int
	}{{"small repository", 10, 10}, {"medium repository", 40, 25}, {"large repository (past the walk budget)", 100, 120}} {
		r, err := specCompile(size.name, size.dirs, size.files)
		if err != nil {
			return nil, err
		}
		rep.Spec = append(rep.Spec, *r)
	}
	return rep, nil
}

// specCompile builds a workspace of dirs×dirs/4 directories holding files
// files each, a .git with objects, config and no hooks, a few credential
// files and rc files, and times compile.Compile of the 100-rule policy
// for it (hooks created on the first run, as moat run would).
func specCompile(name string, dirs, files int) (*specRow, error) {
	ws, err := os.MkdirTemp("", "moat-bench-ws-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(ws)
	entries := 0
	mk := func(p string) error {
		entries++
		if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, p)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(ws, p), nil, 0o644)
	}
	for _, p := range []string{".git/config", ".git/HEAD", ".env", "deploy/server.pem", ".bashrc", "secrets/db"} {
		if err := mk(p); err != nil {
			return nil, err
		}
	}
	for i := range 256 {
		if err := mk(fmt.Sprintf(".git/objects/%02x/0000", i)); err != nil {
			return nil, err
		}
	}
	for d := range dirs {
		for sd := range dirs / 4 {
			for f := range files {
				if err := mk(fmt.Sprintf("src/d%d/s%d/f%d.go", d, sd, f)); err != nil {
					return nil, err
				}
			}
		}
	}
	fs, err := policyset.Files()
	if err != nil {
		return nil, err
	}
	spec := &sandbox.Spec{Workspace: ws}
	eff, err := policy.Compile(compile.Context(spec, ws+"-home"), fs...)
	if err != nil {
		return nil, err
	}
	row := &specRow{Workspace: name, Entries: entries}
	var samples []float64
	for range 30 {
		t := time.Now()
		out, rep, err := compile.Policy(eff, spec, compile.Options{})
		samples = append(samples, micros(time.Since(t)))
		if err != nil {
			return nil, err
		}
		row.Walked, row.Restrict = rep.Walked, len(out.Restrict)
	}
	row.Micros, _ = stats.Summarize(samples)
	return row, nil
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func markdown(r *report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# moat policy decision benchmark\n\nMachine: %s, %s, %d × %s, %s; commit %s; %s.\n\n",
		r.Machine.Kernel, r.Machine.OS, r.Machine.CPUs, r.Machine.CPUModel, r.Machine.GoVersion, r.Commit, r.Date)
	fmt.Fprintf(&b, "Policy: internal/policyset, 100 rules in three layers (managed, project, user with the trusted profile). "+
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
	b.WriteString("\nCompiling the policy into a sandbox spec (`compile.Compile`: search the bound workspace for protected and credential files, " +
		"untrusted profile, 30 runs each; the walk budget is 5,000 entries, breadth first; `.git/objects` is not searched):\n\n" +
		"| workspace | entries | searched | restrictions | p50 µs | p95 µs |\n|---|--:|--:|--:|--:|--:|\n")
	for _, x := range r.Spec {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.0f | %.0f |\n", x.Workspace, x.Entries, x.Walked, x.Restrict, x.Micros.P50, x.Micros.P95)
	}
	return b.String()
}
