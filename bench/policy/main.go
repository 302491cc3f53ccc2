// Command policy measures how long the policy engine takes to decide one
// request against a realistic policy (internal/policyset: 100 rules in
// three layers), per request and over the mix, and prints p50/p95/p99 in
// microseconds (JSON with --json, markdown through bench/render). The goal
// is well under 50 µs per decision: a decision is made before every call,
// on its path. The requests are measured in a random order (--seed).
//
//	go run ./policy [--rounds N] [--json FILE] [--markdown FILE]   (from bench/)
package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
	"github.com/moat-sandbox/moat/internal/policyset"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/compile"
	"github.com/moat-sandbox/moat/sandbox"
)

// spec is how bench/policy takes the common flags: it measures the
// checkout's policy engine in-process, so it takes no --moat.
var spec = cli.Spec{
	Name:        "policy",
	About:       "Times policy decisions against 100 rules (internal/policyset), per request and over the mix.",
	Rounds:      2000,
	Warmup:      2000,
	RoundsUsage: "timed decisions per request",
	WarmupUsage: "untimed decisions per request before them",
	MinRounds:   10,
	NoMoat:      true,
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code: 0, 1 when the
// measuring failed or the results could not be written, 2 on bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	var f cli.Flags
	fs := spec.FlagSet(stderr, &f)
	if err := spec.Parse(fs, args, &f); err != nil {
		return spec.Exit(stderr, err)
	}
	logf := spec.Logf(stderr)
	start := time.Now()
	rep := &schema.Policy{Run: spec.Start(&f, args, start)}
	if err := measure(&f, rep); err != nil {
		rep.Fail(5, err.Error())
		logf("%v", err)
	}
	cli.Finish(&rep.Run, start)
	if rep.Mix == nil {
		rep.Mix = &schema.PolicyRow{Request: "no request measured"}
	}
	return f.Conclude(rep.Failed, rep, stdout, logf)
}

// measure fills rep: compiling the policy, each request's decisions (the
// requests in a random order, each timed alone) and the mix, then the
// spec compiles.
func measure(f *cli.Flags, rep *schema.Policy) error {
	var compiles []float64
	var eff *policy.Effective
	for range 50 {
		t := time.Now()
		e, err := policyset.Effective()
		if err != nil {
			return err
		}
		compiles = append(compiles, micros(time.Since(t)))
		eff = e
	}
	rep.Compile, _ = stats.Summarize(compiles)
	reqs := policyset.Requests()
	rows := make([]schema.PolicyRow, len(reqs))
	order := rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15)).Perm(len(reqs))
	var all []float64
	for _, i := range order {
		q := reqs[i]
		for range f.Warmup {
			eff.Decide(q)
		}
		samples := make([]float64, f.Rounds)
		var d policy.Decision
		for j := range samples {
			t := time.Now()
			d = eff.Decide(q)
			samples[j] = micros(time.Since(t))
		}
		all = append(all, samples...)
		s, _ := stats.Summarize(samples)
		rows[i] = schema.PolicyRow{Request: q.String(), Effect: d.Effect.String(), Micros: s}
		runtime.GC() // keep one request's garbage out of the next one's samples
	}
	rep.Requests = rows
	s, _ := stats.Summarize(all)
	rep.Mix = &schema.PolicyRow{Request: fmt.Sprintf("all %d requests", len(reqs)), Micros: s}
	for _, size := range []struct {
		name        string
		dirs, files int
	}{{"small repository", 10, 10}, {"medium repository", 40, 25}, {"large repository (past the walk budget)", 100, 120}} {
		r, err := specCompile(size.name, size.dirs, size.files)
		if err != nil {
			return err
		}
		rep.Spec = append(rep.Spec, *r)
	}
	return nil
}

// specCompile builds a workspace of dirs×dirs/4 directories holding files
// files each, a .git with objects, config and no hooks, a few credential
// files and rc files, and times compile.Compile of the 100-rule policy
// for it (hooks created on the first run, as moat run would).
func specCompile(name string, dirs, files int) (*schema.PolicySpec, error) {
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
	row := &schema.PolicySpec{Workspace: name, Entries: entries}
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
