package main

import (
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/bench/schema"
)

// maxErrors is how many failures the results keep verbatim.
const maxErrors = 20

// fail records a failure of the run.
func fail(r *schema.Density, format string, a ...any) {
	r.Fail(maxErrors, fmt.Sprintf(format, a...))
}

// newReport begins the results of a run of o started at start, with the
// command line args.
func newReport(o *options, args []string, start time.Time) *schema.Density {
	return &schema.Density{
		Run: spec.Start(&o.Flags, args, start),
		Config: schema.DensityConfig{
			Levels: o.levels, CallTimeoutSec: o.callTimeout.Seconds(),
			Timing: "create → echo: wall time around the SDK's CreateSandbox and Exec calls over HTTP (delete untimed); " +
				"moat run: fork to reaped exit; the two alternate in a fresh random order each round",
			Memory: "PSS from /proc/PID/smaps_rollup of every process below the daemon, plus the daemon's PSS growth, " +
				"divided by the live sandboxes; system: MemAvailable's fall; kernel: Slab + KernelStack + PageTables growth",
		},
		Levels: []schema.DensityLevel{},
	}
}
