// Command agent benchmarks moat's agent runs (issue 23) through one
// `moat serve` daemon, driven with the Go SDK over HTTP, whose model
// client calls a fake OpenAI-compatible provider in this process that
// answers at once (no think time), so that what is timed is moat's own
// work:
//
//   - tool-call overhead: one run at a time of an agent whose model asks
//     for shell_exec of `true` at each turn (--calls tool calls, then its
//     answer); per tool call, the time from the model's answer leaving
//     the provider to the next request, carrying the call's result,
//     arriving there (the answer parsed, the call judged and run in the
//     agent's sandbox, each step journalled, the next request made),
//     against one exec round trip of `true` in a live sandbox through the
//     SDK on the same daemon, interleaved with the runs: the ratio of the
//     medians (goal ≤ 1.2). A run's first tool call also makes its
//     sandbox: it is reported apart;
//   - concurrency: --runs runs started at once on the daemon's one model
//     client, its provider's max_concurrency --max-concurrency, each of
//     --concurrent-calls tool calls: the same tool latency's percentiles
//     (goal: p99 ≤ 2× p50, no head-of-line blocking), and the most
//     requests the provider had in flight.
//
// Every run is checked (it succeeded, its agent made its tool calls, the
// provider saw every request of it); a failure is recorded and the
// program exits 1 at the end. Slowness never fails it. Run as root:
//
//	go run ./agent --json results/agent.json --markdown results/agent.md   (from bench/)
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

// spec is how bench/agent takes the common flags.
var spec = cli.Spec{
	Name: "agent",
	About: "Benchmarks moat's agent runs through moat serve with a fake model provider that answers at once: a tool call's overhead " +
		"against the exec round trip, and the tool latency of many runs at once on one model client. Run as root.",
	Rounds:      10,
	Warmup:      1,
	RoundsUsage: "measured runs of the overhead (each of --calls tool calls, interleaved with as many exec round trips)",
	WarmupUsage: "unrecorded runs first",
	MinRounds:   0,
}

type options struct {
	cli.Flags
	calls           int
	runs            int
	concurrentCalls int
	maxConcurrency  int
	callTimeout     time.Duration
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := spec.FlagSet(stderr, &o.Flags)
	fs.IntVar(&o.calls, "calls", 20, "tool calls of each overhead run")
	fs.IntVar(&o.runs, "runs", 100, "runs started at once for the concurrency figures (0 skips them)")
	fs.IntVar(&o.concurrentCalls, "concurrent-calls", 5, "tool calls of each concurrent run")
	fs.IntVar(&o.maxConcurrency, "max-concurrency", 16, "the fake provider's max_concurrency (model calls in flight at once)")
	fs.DurationVar(&o.callTimeout, "call-timeout", 10*time.Minute, "fail a run or an API call that takes longer")
	if err := spec.Parse(fs, args, &o.Flags); err != nil {
		return nil, err
	}
	switch {
	case o.calls < 2 || o.calls > 150:
		return nil, fmt.Errorf("%w: --calls must be from 2 to 150 (a run's first call also makes its sandbox)", cli.ErrUsage)
	case o.runs < 0 || o.runs > 1000:
		return nil, fmt.Errorf("%w: --runs must be from 0 to 1000", cli.ErrUsage)
	case o.concurrentCalls < 2 || o.concurrentCalls > 150:
		return nil, fmt.Errorf("%w: --concurrent-calls must be from 2 to 150", cli.ErrUsage)
	case o.maxConcurrency < 1 || o.maxConcurrency > 1024:
		return nil, fmt.Errorf("%w: --max-concurrency must be from 1 to 1024", cli.ErrUsage)
	case o.callTimeout <= 0:
		return nil, fmt.Errorf("%w: --call-timeout must be positive", cli.ErrUsage)
	case o.Rounds == 0 && o.runs == 0:
		return nil, fmt.Errorf("%w: --rounds 0 and --runs 0 measure nothing", cli.ErrUsage)
	}
	return o, nil
}

// run is the whole program; it returns the exit code: 0, 1 if a run, call
// or check failed or the results could not be written, 2 on bad usage.
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
