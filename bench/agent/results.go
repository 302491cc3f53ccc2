package main

import (
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/bench/schema"
)

// maxErrors is how many failures the results keep verbatim.
const maxErrors = 20

// fail records a failure of the run.
func fail(r *schema.Agent, format string, a ...any) {
	r.Fail(maxErrors, fmt.Sprintf(format, a...))
}

// newReport begins the results of a run of o started at start, with the
// command line args.
func newReport(o *options, args []string, start time.Time) *schema.Agent {
	return &schema.Agent{
		Run: spec.Start(&o.Flags, args, start),
		Config: schema.AgentConfig{
			Calls: o.calls, ConcurrentRuns: o.runs, ConcurrentCalls: o.concurrentCalls, MaxConcurrency: o.maxConcurrency,
			Tool: toolCommand, Exec: execArgs, CallTimeoutSec: o.callTimeout.Seconds(),
			Timing: "at the fake provider, wall clock: a tool call from the model's answer asking for it written and flushed to the " +
				"next request of its run arriving (its headers read), which carries the call's result; the baseline on the client, " +
				"from the SDK's Exec call to its answer, in a sandbox made once before the runs",
		},
		Overhead:    schema.AgentOverhead{ToolCallSamples: []float64{}, ExecSamples: []float64{}},
		Concurrency: schema.AgentConcurrency{ToolCallSamples: []float64{}},
	}
}
