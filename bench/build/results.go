package main

import (
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// maxErrors is how many failures the results keep verbatim.
const maxErrors = 20

// fail records a failure of the run.
func fail(r *schema.Build, format string, a ...any) {
	r.Fail(maxErrors, fmt.Sprintf(format, a...))
}

// newReport begins the results of a run of o started at start, with the
// command line args.
func newReport(o *options, args []string, start time.Time) *schema.Build {
	p := realProject(o.units, o.funcs)
	return &schema.Build{
		Run: spec.Start(&o.Flags, args, start),
		Config: schema.BuildConfig{
			Units: o.units, Funcs: o.funcs, SourceFiles: len(p), SourceBytes: p.size(),
			Command: makeCommand(o.jobs), HostEnv: hostEnv("DIR"),
			BuildRounds: o.buildRounds, BuildWarmup: o.buildWarmup, CallTimeoutSec: o.callTimeout.Seconds(),
			Timing: "client side, wall clock: on the host from writing the source into a fresh directory to the program read back and hashed " +
				"(the directory then removed, untimed); through the daemon from the SDK's Build call (the source tar in memory) to its answer " +
				"and, for a build with an output, the artifact downloaded and hashed (the build then deleted, untimed); the baseline from its " +
				"create carrying the exec to its answer (the sandbox then deleted, timed apart: delete_ms)",
		},
		Rows: []schema.BuildRow{},
	}
}

// row collects one row's samples while the rounds run.
type row struct {
	schema.BuildRow
	durations []float64 // the daemon's duration_ms
	calls     []float64 // the build.create call alone
	deletes   []float64 // the baseline's sandbox delete
}

func newRow(kind, what string) *row {
	return &row{BuildRow: schema.BuildRow{Kind: kind, What: what, Samples: []float64{}}}
}

// sample is one measured sample of a row: the wall time and, for a build
// through the daemon, its own duration, the create call's time and its
// sandbox's peak memory.
type sample struct {
	wall     time.Duration
	duration time.Duration // 0: not a daemon build
	call     time.Duration
	peak     int64
	delete   time.Duration // the baseline's delete, untimed in wall; 0: none
}

// add records one measured sample.
func (r *row) add(s sample) {
	r.Samples = append(r.Samples, stats.Ms(s.wall))
	if s.duration > 0 {
		r.durations = append(r.durations, stats.Ms(s.duration))
		r.calls = append(r.calls, stats.Ms(s.call))
	}
	if s.delete > 0 {
		r.deletes = append(r.deletes, stats.Ms(s.delete))
	}
	r.PeakMemoryBytes = max(r.PeakMemoryBytes, s.peak)
}

// result is the row's statistics, for the results.
func (r *row) result() schema.BuildRow {
	out := r.BuildRow
	out.Stats = stats.Of(r.Samples)
	out.Duration = stats.Of(r.durations)
	out.Call = stats.Of(r.calls)
	out.Delete = stats.Of(r.deletes)
	return out
}

// rowOrder is the report order of the rows.
var rowOrder = []string{schema.BuildHost, schema.BuildSandbox, schema.BuildBaseline, schema.BuildTrivial, schema.BuildTrivialOutput}

// ordered returns the rows' results in report order.
func ordered(rows map[string]*row) []schema.BuildRow {
	out := []schema.BuildRow{}
	for _, k := range rowOrder {
		if r, ok := rows[k]; ok {
			out = append(out, r.result())
		}
	}
	return out
}

// schedule spreads n runs evenly over total rounds: in[r] says whether
// round r holds one. Each of the n runs is in a different round, the
// first in round 0 when n ≥ 1; n must not exceed total.
func schedule(n, total int) []bool {
	in := make([]bool, total)
	for k := range n {
		in[k*total/n] = true
	}
	return in
}
