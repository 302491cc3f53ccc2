// Command density measures how many live idle sandboxes moat holds on this
// machine, what each costs in memory, and how start latency and memory per
// sandbox scale with the number of sandboxes alive.
//
// It starts a `moat serve` daemon (bench/internal/moatd) and fills it, over
// its HTTP API with the Go SDK, with idle sandboxes up to each of --levels
// (default 1, 10, 100, 1000). At each level, with that many sandboxes
// alive, it reads:
//
//   - memory: the PSS (smaps_rollup: shared pages divided among their
//     sharers) of every process below the daemon (the sandboxes' inits
//     and the spawner that forks them),
//     the daemon's own PSS growth since it held none, MemAvailable's fall
//     (the system's view, kernel included) and the kernel's own growth
//     (slab, kernel stacks, page tables), each per sandbox;
//   - start latency: --rounds time-to-interactive samples (API create →
//     first `echo` answered; the sandbox is then deleted, untimed)
//     alternating in random order with as many cold starts of
//     `moat run -- /bin/true` (fork to reaped exit).
//
// After the last level it projects how many sandboxes the machine could
// hold from what binds first: memory, pids (pid_max), the daemon's open
// file limit or the kernel's namespace limits. The projection is labelled
// as such; the measured figure is the last level reached.
//
// A failed create, exec or run is recorded and the program exits 1 at the
// end; slowness never fails it. Run as root:
//
//	go run ./density --json results/density.json --markdown results/density.md   (from bench/)
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

// spec is how bench/density takes the common flags.
var spec = cli.Spec{
	Name:        "density",
	About:       "Fills a moat daemon with idle sandboxes and measures memory per sandbox and start latency at each level. Run as root.",
	Rounds:      20,
	Warmup:      3,
	RoundsUsage: "start-latency rounds per level, each running both kinds once, in a random order",
	WarmupUsage: "unrecorded rounds first, per level",
	MinRounds:   1,
}

type options struct {
	cli.Flags
	levels      []int
	callTimeout time.Duration
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code: 0, 1 if a create,
// exec or run failed or a result could not be written, 2 on bad usage.
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

	if rep.Failed {
		logf("%d error(s); first: %s", len(rep.Errors), rep.Errors[0])
	}
	return o.Conclude(rep.Failed, rep, stdout, logf)
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := spec.FlagSet(stderr, &o.Flags)
	levels := fs.String("levels", "1,10,100,1000", "comma-separated counts of live idle sandboxes to measure at, ascending")
	fs.DurationVar(&o.callTimeout, "call-timeout", time.Minute, "fail one API call or run that takes longer")
	if err := spec.Parse(fs, args, &o.Flags); err != nil {
		return nil, err
	}
	var err error
	if o.levels, err = parseLevels(*levels); err != nil {
		return nil, err
	}
	if o.callTimeout <= 0 {
		return nil, fmt.Errorf("%w: --call-timeout must be positive", cli.ErrUsage)
	}
	return o, nil
}

// maxLevel bounds --levels: the daemon's limit is set from it, and each
// sandbox costs a few MiB.
const maxLevel = 20000

// parseLevels reads "1,10,100" into ascending, distinct, positive counts.
func parseLevels(s string) ([]int, error) { return cli.Levels("--levels", s, maxLevel, true) }
