// Command workflow benchmarks moat's workflows (issue 21) through one
// `moat serve` daemon, driven with the Go SDK over HTTP, against a
// baseline taken from the same daemon in the same run:
//
//   - baseline: one cold API create (the daemon has no warm pool) followed
//     by an exec of the steps' own command (sh -c of shell builtins),
//     until the exec has answered exit 0: two requests, an API client's
//     cold create → first exec of the same command; beside it,
//     informational, the same as one request (a create carrying its exec);
//   - chain: a sequential workflow of --steps (10) trivial steps, each
//     from its predecessor's light snapshot: the run's wall time from the
//     submit until the client sees it succeed, divided by the steps, is
//     the per-step overhead (goal: p50 ≤ 1.5 × the baseline's p50); the
//     same chain without snapshots and without from, for comparison;
//   - retry: a 3-step chain whose last step fails on its first attempt and
//     passes on its second (MOAT_STEP_ATTEMPT), retried from the snapshot
//     it started from: the retry's cost is the failed attempt's end to
//     the step's success, from the run's own timestamps (goal: p50 ≤ 1 ×
//     the baseline's p50), against the wall time of the same 3 steps run
//     afresh from scratch;
//   - fairness: --fair-steps (100) CPU-bound steps in one parallel group
//     with budget.cpus = --fair-cpus (1) and no max_parallel, sleeping
//     until a common start --fair-lead after the submit, then spinning;
//     each measures its own CPU time in a window of --fair-window that
//     begins --fair-settle after the start (every step spinning by then):
//     the group's rate (goal: within 5% of the budget) and each step's
//     against a fair share (goal: within ±5%).
//
// Each round runs the baseline, the chains, the retry and the scratch run
// once, in a fresh random order (--seed), after --warmup unrecorded
// rounds; the fairness runs come after the rounds (they load the whole
// machine). Every run's result is checked (state, step results, the
// chain's state carried from step to step, the retry started from the
// snapshot); a failure is recorded and the program exits 1 at the end.
// Slowness never fails it. Run as root:
//
//	go run ./workflow --json results/workflow.json --markdown results/workflow.md   (from bench/)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/cli"
)

// spec is how bench/workflow takes the common flags.
var spec = cli.Spec{
	Name: "workflow",
	About: "Benchmarks moat's workflows through moat serve: a chain of steps from snapshots and a retry from a snapshot against " +
		"one cold create → first exec, and the CPU fairness of many steps under one budget. Run as root.",
	Rounds:      30,
	Warmup:      2,
	RoundsUsage: "measured rounds, each running the baseline, the chains, the retry and the scratch run once, in a random order (0: only the fairness runs)",
	WarmupUsage: "unrecorded rounds first",
	MinRounds:   0,
}

type options struct {
	cli.Flags
	steps       int
	fairSteps   int
	fairRuns    int
	fairWindow  time.Duration
	fairLead    time.Duration
	fairSettle  time.Duration
	fairCPUs    float64
	callTimeout time.Duration
}

// retrySteps is the length of the retry's chain (issue 21).
const retrySteps = 3

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := spec.FlagSet(stderr, &o.Flags)
	fs.IntVar(&o.steps, "steps", 10, "steps of the sequential chains")
	fs.IntVar(&o.fairSteps, "fair-steps", 100, "CPU-bound steps in the budget's parallel group")
	fs.IntVar(&o.fairRuns, "fair-runs", 1, "runs of the fairness workflow (0 skips it)")
	fs.DurationVar(&o.fairWindow, "fair-window", 20*time.Second, "the common window in which every fairness step spins")
	fs.DurationVar(&o.fairLead, "fair-lead", 10*time.Second, "from the submit to the start of the spinning: time for every step's sandbox to be created")
	fs.DurationVar(&o.fairSettle, "fair-settle", 2*time.Second, "from the start of the spinning to the window: time for every step to be spinning")
	fs.Float64Var(&o.fairCPUs, "fair-cpus", 1, "the group's budget.cpus")
	fs.DurationVar(&o.callTimeout, "call-timeout", 2*time.Minute, "fail one API call or workflow run that takes longer (the fairness runs get lead and window on top)")
	if err := spec.Parse(fs, args, &o.Flags); err != nil {
		return nil, err
	}
	switch {
	case o.steps < 2 || o.steps > 1000:
		return nil, fmt.Errorf("%w: --steps must be from 2 to 1000", cli.ErrUsage)
	case o.fairSteps < 1 || o.fairSteps > 1000:
		return nil, fmt.Errorf("%w: --fair-steps must be from 1 to 1000", cli.ErrUsage)
	case o.fairRuns < 0:
		return nil, fmt.Errorf("%w: --fair-runs must not be negative", cli.ErrUsage)
	case o.fairWindow < time.Second || o.fairLead < time.Second || o.fairSettle < 0:
		return nil, fmt.Errorf("%w: --fair-window and --fair-lead must be at least 1s, --fair-settle not negative", cli.ErrUsage)
	case !(o.fairCPUs > 0) || o.fairCPUs > 1024:
		return nil, fmt.Errorf("%w: --fair-cpus must be above 0", cli.ErrUsage)
	case o.callTimeout <= 0:
		return nil, fmt.Errorf("%w: --call-timeout must be positive", cli.ErrUsage)
	case o.Rounds == 0 && o.fairRuns == 0:
		return nil, fmt.Errorf("%w: --rounds 0 and --fair-runs 0 measure nothing", cli.ErrUsage)
	}
	return o, nil
}

// run is the whole program; it returns the exit code: 0, 1 if a run,
// call or check failed or the results could not be written, 2 on bad
// usage.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return spec.Exit(stderr, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := spec.Logf(stderr)

	start := time.Now()
	rep := newReport(o, args, start)
	execute(ctx, o, rep, logf)
	cli.Finish(&rep.Run, start)
	if ctx.Err() != nil {
		fail(rep, "interrupted")
	}

	if rep.Failed {
		logf("%d error(s); first: %s", len(rep.Errors), rep.Errors[0])
	}
	return o.Conclude(rep.Failed, rep, stdout, logf)
}
