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
//	go run ./bench/startup --moat bin/moat --json out.json --markdown out.md
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
)

type options struct {
	rounds, warmup int
	moat           string
	jsonPath       string
	mdPath         string
	systems        []string
	seed           uint64
	runTimeout     time.Duration
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
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "startup:", err)
		return 2
	}
	start := time.Now()
	rep := &report{
		Machine: collectMachine(start),
		Config: config{
			Command:       benchCommand,
			Rounds:        o.rounds,
			Warmup:        o.warmup,
			Seed:          o.seed,
			RunTimeoutSec: int(o.runTimeout / time.Second),
			Order:         "alternating: each round runs every system once, in a freshly shuffled order",
			Timing:        "wall-clock around os/exec cmd.Run(): fork, exec, run, exit, reap",
			Percentiles:   "linear interpolation between closest ranks (numpy default, R type 7)",
		},
	}

	// Prepare every selected system; a missing binary is a skip.
	type active struct {
		res  *systemResult
		argv []string
	}
	var runs []active
	for _, sys := range systems {
		if !slices.Contains(o.systems, sys.name) {
			continue
		}
		rep.Systems = append(rep.Systems, systemResult{Name: sys.name, About: sys.about})
		res := &rep.Systems[len(rep.Systems)-1]
		p, err := sys.prepare(o)
		var skip *skipError
		switch {
		case errors.As(err, &skip):
			res.SkippedReason = skip.reason
			if skip.version != "" {
				rep.Machine.Versions[sys.name] = skip.version
			}
			fmt.Fprintf(stderr, "startup: skipping %s: %s\n", sys.name, skip.reason)
			continue
		case err != nil:
			res.Failed = 1
			res.Errors = []string{"prepare: " + err.Error()}
			fmt.Fprintf(stderr, "startup: %s: prepare: %v\n", sys.name, err)
			continue
		}
		if p.cleanup != nil {
			defer p.cleanup()
		}
		res.Argv = p.argv
		res.Command = machine.ShellQuote(p.argv)
		rep.Machine.Versions[sys.name] = p.version
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
			fmt.Fprintln(stderr, "startup:", err)
			return 1
		}
		defer t.Close()
		fmt.Fprintf(stderr, "startup: %d systems, %d warm-up + %d measured rounds, seed %d\n",
			len(runs), o.warmup, o.rounds, o.seed)
		rng := rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15))
		order := make([]int, len(runs))
		for i := range order {
			order[i] = i
		}
		total := o.warmup + o.rounds
		step := max(1, o.rounds/10)
		for round := range total {
			measured := round >= o.warmup
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			// Collect garbage between rounds, never inside a timed run.
			runtime.GC()
			for _, i := range order {
				a := runs[i]
				d, err := t.Time(a.argv)
				if err != nil {
					a.res.Failed++
					if len(a.res.Errors) < maxErrors {
						phase := fmt.Sprintf("round %d", round-o.warmup+1)
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
				if done := round - o.warmup + 1; done%step == 0 || done == o.rounds {
					fmt.Fprintf(stderr, "startup: %d/%d rounds\n", done, o.rounds)
				}
			}
		}
	}
	rep.Config.DurationSec = int(time.Since(start).Round(time.Second) / time.Second)

	for i := range rep.Systems {
		r := &rep.Systems[i]
		r.setStats()
		if r.Failed > 0 {
			rep.Failed = true
			fmt.Fprintf(stderr, "startup: %s: %d failed run(s); first: %s\n", r.Name, r.Failed, r.Errors[0])
		}
	}
	fillRatios(rep.Systems)

	code := 0
	if rep.Failed {
		code = 1
	}
	if o.jsonPath != "" {
		if err := machine.WriteJSON(o.jsonPath, rep); err != nil {
			fmt.Fprintln(stderr, "startup:", err)
			code = 1
		} else {
			fmt.Fprintln(stderr, "startup: wrote", o.jsonPath)
		}
	}
	md := markdown(rep)
	if o.mdPath != "" {
		if err := os.WriteFile(o.mdPath, []byte(md), 0o644); err != nil {
			fmt.Fprintln(stderr, "startup:", err)
			code = 1
		} else {
			fmt.Fprintln(stderr, "startup: wrote", o.mdPath)
		}
	} else {
		fmt.Fprint(stdout, md)
	}
	return code
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("startup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.rounds, "rounds", 300, "measured rounds (each runs every system once)")
	fs.IntVar(&o.warmup, "warmup", 20, "warm-up rounds, run the same way but not recorded")
	fs.StringVar(&o.moat, "moat", "./bin/moat", "path of the moat binary")
	fs.StringVar(&o.jsonPath, "json", "", "write machine-readable results to `FILE`")
	fs.StringVar(&o.mdPath, "markdown", "", "write the markdown report to `FILE` (default: print it)")
	list := fs.String("systems", strings.Join(systemNames(), ","), "comma-separated subset of systems to run")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the run order shuffle (default: from the clock)")
	fs.DurationVar(&o.runTimeout, "run-timeout", 30*time.Second, "kill and fail a single run that takes longer")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: startup [flags]\n\nTimes cold starts of %s under: %s.\n\n",
			benchCommand, strings.Join(systemNames(), ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.rounds < 1 || o.warmup < 0 {
		return nil, errors.New("--rounds must be at least 1 and --warmup not negative")
	}
	if o.runTimeout <= 0 {
		return nil, errors.New("--run-timeout must be positive")
	}
	for name := range strings.SplitSeq(*list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(systemNames(), name) {
			return nil, fmt.Errorf("unknown system %q (known: %s)", name, strings.Join(systemNames(), ", "))
		}
		if !slices.Contains(o.systems, name) {
			o.systems = append(o.systems, name)
		}
	}
	if len(o.systems) == 0 {
		return nil, errors.New("--systems selects nothing")
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	return o, nil
}
