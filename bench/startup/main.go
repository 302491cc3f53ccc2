// Command startup measures the cold-start latency of running one command
// (/bin/true) with full isolation under several systems — no sandbox,
// moat, bubblewrap, runc, gVisor (runsc), crun — in one run. Runs
// alternate between the systems: each round runs every system once, in a
// freshly shuffled order, so drift of the machine (frequency, caches,
// other load) spreads over all of them instead of biasing whichever ran
// last. Each run is timed wall-clock around cmd.Run(): from fork to the
// exit of the process being reaped.
//
// A system whose binary is missing, or that cannot run on this host (crun
// on hybrid cgroups), is skipped with a recorded reason. A run that fails
// (non-zero exit, timeout) is recorded and the program exits 1 at the
// end; slowness never fails it.
//
//	go run ./startup --json results/startup.json --markdown results/startup.md   (from bench/)
package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// spec is how bench/startup takes the common flags. It checks the moat
// binary itself: a missing one skips the moat rows.
var spec = cli.Spec{
	Name:          "startup",
	About:         "Times cold starts of " + benchCommand + " under several systems, alternating round by round.",
	Rounds:        300,
	Warmup:        20,
	RoundsUsage:   "measured rounds (each runs every system once, in a fresh random order)",
	WarmupUsage:   "warm-up rounds, run the same way but not recorded",
	MinRounds:     1,
	MoatUnchecked: true,
}

type options struct {
	cli.Flags
	systems    []string
	runTimeout time.Duration
}

// maxErrors is how many failures per system the report keeps verbatim.
const maxErrors = 5

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code: 0, 1 if a system had
// a failed run or a result could not be written, 2 on bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return spec.Exit(stderr, err)
	}
	logf := spec.Logf(stderr)
	start := time.Now()
	rep := &schema.Startup{
		Run: spec.Start(&o.Flags, args, start),
		Config: schema.StartupConfig{
			Workload:      benchCommand,
			RunTimeoutSec: int(o.runTimeout / time.Second),
			Order:         "alternating: each round runs every system once, in a freshly shuffled order",
			Timing:        "wall-clock around os/exec cmd.Run(): fork, exec, run, exit, reap",
			Percentiles:   "linear interpolation between closest ranks (numpy default, R type 7)",
		},
	}

	// Prepare every selected system; a missing binary is a skip.
	type active struct {
		res  *schema.StartupSystem
		argv []string
	}
	var runs []active
	for _, sys := range systems {
		if !slices.Contains(o.systems, sys.name) {
			continue
		}
		rep.Systems = append(rep.Systems, schema.StartupSystem{Name: sys.name, About: sys.about})
		res := &rep.Systems[len(rep.Systems)-1]
		p, err := sys.prepare(o)
		var skip *skipError
		switch {
		case errors.As(err, &skip):
			res.SkippedReason = skip.reason
			if skip.version != "" {
				rep.Versions[sys.name] = skip.version
			}
			logf("skipping %s: %s", sys.name, skip.reason)
			continue
		case err != nil:
			res.Failed = 1
			res.Errors = []string{"prepare: " + err.Error()}
			logf("%s: prepare: %v", sys.name, err)
			continue
		}
		if p.cleanup != nil {
			defer p.cleanup()
		}
		res.Argv = p.argv
		res.Command = machine.ShellQuote(p.argv)
		rep.Versions[sys.name] = p.version
	}
	// rep.Systems is complete: pointers into it are stable from here on.
	for i := range rep.Systems {
		if r := &rep.Systems[i]; r.Argv != nil {
			runs = append(runs, active{res: r, argv: r.Argv})
		}
	}

	if len(runs) > 0 {
		t, err := machine.NewTimer(o.runTimeout, false)
		if err != nil {
			logf("%v", err)
			return 1
		}
		defer t.Close()
		logf("%d systems, %d warm-up + %d measured rounds, seed %d", len(runs), o.Warmup, o.Rounds, o.Seed)
		rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
		order := make([]int, len(runs))
		for i := range order {
			order[i] = i
		}
		total := o.Warmup + o.Rounds
		step := max(1, o.Rounds/10)
		for round := range total {
			measured := round >= o.Warmup
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			// Collect garbage between rounds, never inside a timed run.
			runtime.GC()
			for _, i := range order {
				a := runs[i]
				d, err := t.Time(a.argv)
				if err != nil {
					a.res.Failed++
					if len(a.res.Errors) < maxErrors {
						phase := fmt.Sprintf("round %d", round-o.Warmup+1)
						if !measured {
							phase = fmt.Sprintf("warm-up round %d", round+1)
						}
						a.res.Errors = append(a.res.Errors, phase+": "+err.Error())
					}
					continue
				}
				if measured {
					a.res.SamplesMs = append(a.res.SamplesMs, stats.Ms(d))
				}
			}
			if measured {
				if done := round - o.Warmup + 1; done%step == 0 || done == o.Rounds {
					logf("%d/%d rounds", done, o.Rounds)
				}
			}
		}
	}
	cli.Finish(&rep.Run, start)

	for i := range rep.Systems {
		r := &rep.Systems[i]
		setStats(r)
		if r.Failed > 0 {
			rep.Failed = true
			logf("%s: %d failed run(s); first: %s", r.Name, r.Failed, r.Errors[0])
		}
	}
	fillRatios(rep.Systems)

	return o.Conclude(rep.Failed, rep, stdout, logf)
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := spec.FlagSet(stderr, &o.Flags)
	list := fs.String("systems", strings.Join(systemNames(), ","), "comma-separated subset of systems to run")
	fs.DurationVar(&o.runTimeout, "run-timeout", 30*time.Second, "kill and fail a single run that takes longer")
	if err := spec.Parse(fs, args, &o.Flags); err != nil {
		return nil, err
	}
	if o.runTimeout <= 0 {
		return nil, fmt.Errorf("%w: --run-timeout must be positive", cli.ErrUsage)
	}
	for name := range strings.SplitSeq(*list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(systemNames(), name) {
			return nil, fmt.Errorf("%w: unknown system %q (known: %s)", cli.ErrUsage, name, strings.Join(systemNames(), ", "))
		}
		if !slices.Contains(o.systems, name) {
			o.systems = append(o.systems, name)
		}
	}
	if len(o.systems) == 0 {
		return nil, fmt.Errorf("%w: --systems selects nothing", cli.ErrUsage)
	}
	return o, nil
}
