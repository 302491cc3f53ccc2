// Command build benchmarks moat's sandboxed builds (issue 22) through one
// `moat serve` daemon, driven with the Go SDK over HTTP, against the same
// work without a sandbox, in one run:
//
//   - overhead: a generated C project (--units translation units of
//     --funcs functions, gcc -O2, linked by make -j--jobs; about 6 s on a
//     2-CPU VM) built directly on the host in a fresh directory with the
//     environment a build's sandbox gets, against the same source sent as
//     a moat build (no CPU quota) whose program is downloaded as an
//     artifact: the ratio of the medians (goal ≤ 1.05);
//   - fixed cost: a build of a one-file source running true, without an
//     output and with that file as its output (downloaded), against one
//     cold create carrying its first exec of true through the same
//     daemon: the ratio of the medians (goal ≤ 1.5).
//
// Each round runs its rows once, in a fresh random order (--seed): every
// round the fixed cost's three rows (--rounds, after --warmup unrecorded
// rounds), and in --build-rounds of them, spread evenly, the two real
// builds as well (after --build-warmup unrecorded ones). Every sample is
// checked (the build succeeded, its artifact's digest and size, the
// program the same on both sides); a failure is recorded and the program
// exits 1 at the end. Slowness never fails it. Run as root:
//
//	go run ./build --json results/build.json --markdown results/build.md   (from bench/)
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

// spec is how bench/build takes the common flags.
var spec = cli.Spec{
	Name: "build",
	About: "Benchmarks moat's sandboxed builds through moat serve: a C build of several seconds on the host against the same build " +
		"in a moat build, and a trivial build's fixed cost against one cold create → first exec. Run as root.",
	Rounds:      30,
	Warmup:      3,
	RoundsUsage: "measured rounds of the fixed cost (a trivial build with and without an output, a cold create → first exec), each in a random order (0: only the real build)",
	WarmupUsage: "unrecorded rounds of the fixed cost first",
	MinRounds:   0,
}

type options struct {
	cli.Flags
	buildRounds int
	buildWarmup int
	units       int
	funcs       int
	jobs        int
	callTimeout time.Duration
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := spec.FlagSet(stderr, &o.Flags)
	fs.IntVar(&o.buildRounds, "build-rounds", 5, "measured rounds of the real build, on the host and in a moat build (0 skips it)")
	fs.IntVar(&o.buildWarmup, "build-warmup", 1, "unrecorded rounds of the real build first")
	fs.IntVar(&o.units, "units", units, "translation units of the real build")
	fs.IntVar(&o.funcs, "funcs", funcs, "functions per translation unit")
	fs.IntVar(&o.jobs, "jobs", 2, "make -j of the real build")
	fs.DurationVar(&o.callTimeout, "call-timeout", 5*time.Minute, "fail one API call or build (host or daemon) that takes longer")
	if err := spec.Parse(fs, args, &o.Flags); err != nil {
		return nil, err
	}
	switch {
	case o.buildRounds < 0 || o.buildWarmup < 0:
		return nil, fmt.Errorf("%w: --build-rounds and --build-warmup must not be negative", cli.ErrUsage)
	case o.units < 1 || o.units > 1000 || o.funcs < 1 || o.funcs > 1000:
		return nil, fmt.Errorf("%w: --units and --funcs must be from 1 to 1000", cli.ErrUsage)
	case o.jobs < 1 || o.jobs > 256:
		return nil, fmt.Errorf("%w: --jobs must be from 1 to 256", cli.ErrUsage)
	case o.callTimeout <= 0:
		return nil, fmt.Errorf("%w: --call-timeout must be positive", cli.ErrUsage)
	case o.Rounds == 0 && o.buildRounds == 0:
		return nil, fmt.Errorf("%w: --rounds 0 and --build-rounds 0 measure nothing", cli.ErrUsage)
	}
	return o, nil
}

// run is the whole program; it returns the exit code: 0, 1 if a build,
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
