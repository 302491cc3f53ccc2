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
func fail(r *schema.Workflow, format string, a ...any) {
	r.Fail(maxErrors, fmt.Sprintf(format, a...))
}

// newReport begins the results of a run of o started at start, with the
// command line args.
func newReport(o *options, args []string, start time.Time) *schema.Workflow {
	return &schema.Workflow{
		Run: spec.Start(&o.Flags, args, start),
		Config: schema.WorkflowConfig{
			ChainSteps: o.steps, RetrySteps: retrySteps,
			FairSteps: o.fairSteps, FairRuns: o.fairRuns, FairWindowSec: o.fairWindow.Seconds(),
			FairSettleSec: o.fairSettle.Seconds(), FairLeadSec: o.fairLead.Seconds(), FairCPUs: o.fairCPUs, CallTimeoutSec: o.callTimeout.Seconds(),
			Timing: "client side, wall clock around the SDK's calls over HTTP: a baseline from its create to the exec's answer " +
				"(the sandbox then deleted, untimed); a workflow from CreateWorkflow until its followed event stream ends " +
				"with the run's end; the retry and the phases from the run's own timestamps (the daemon's clock)",
		},
		Rows: []schema.WorkflowRow{},
	}
}

// row collects one row's samples while the rounds run.
type row struct {
	schema.WorkflowRow
	perStep []float64
	phases  map[string][]float64
	order   []string // phase names in the order first seen
}

func newRow(kind, what string, steps int) *row {
	return &row{WorkflowRow: schema.WorkflowRow{Kind: kind, What: what, Steps: steps, Samples: []float64{}}, phases: map[string][]float64{}}
}

// add records one measured sample of ms milliseconds.
func (r *row) add(ms float64) {
	r.Samples = append(r.Samples, ms)
	if r.Steps > 0 {
		r.perStep = append(r.perStep, ms/float64(r.Steps))
	}
}

// addPhases records the phases of one run.
func (r *row) addPhases(ps []phase) {
	for _, p := range ps {
		if _, ok := r.phases[p.name]; !ok {
			r.order = append(r.order, p.name)
		}
		r.phases[p.name] = append(r.phases[p.name], p.ms)
	}
}

// result is the row's statistics, for the results.
func (r *row) result() schema.WorkflowRow {
	out := r.WorkflowRow
	out.Stats = stats.Of(r.Samples)
	if r.Steps > 0 {
		out.PerStep = stats.Of(r.perStep)
	}
	for _, name := range r.order {
		out.Phases = append(out.Phases, schema.WorkflowPhase{Name: name, Stats: stats.Of(r.phases[name])})
	}
	return out
}

// phase is the time between two events of a run.
type phase struct {
	name string
	ms   float64
}

// ordered returns the rows' results in report order.
func ordered(rows map[string]*row) []schema.WorkflowRow {
	kinds := []string{schema.WorkflowBaseline, schema.WorkflowBaselineExec, schema.WorkflowChainLight, schema.WorkflowChainNone,
		schema.WorkflowRetry, schema.WorkflowRetryRun, schema.WorkflowScratch}
	out := []schema.WorkflowRow{}
	for _, k := range kinds {
		if r, ok := rows[k]; ok {
			out = append(out, r.result())
		}
	}
	return out
}
