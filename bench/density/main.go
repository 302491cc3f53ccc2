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
//   - start latency: --samples time-to-interactive samples (API create →
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
//	go run ./bench/density --moat bin/moat --json bench/results/density.json --markdown bench/results/density.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	moat        string
	levels      []int
	samples     int
	warmup      int
	seed        uint64
	callTimeout time.Duration
	jsonPath    string
	mdPath      string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code: 0, 1 if a create,
// exec or run failed or a result could not be written, 2 on bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "density:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "density: "+format+"\n", a...) }

	rep := newReport(o, args)
	execute(ctx, o, rep, logf)

	code := 0
	if rep.Failed {
		code = 1
		logf("%d error(s); first: %s", len(rep.Errors), rep.Errors[0])
	}
	if err := rep.write(o, stdout); err != nil {
		logf("%v", err)
		code = 1
	}
	return code
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("density", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.moat, "moat", "./bin/moat", "path of the moat binary")
	levels := fs.String("levels", "1,10,100,1000", "comma-separated counts of live idle sandboxes to measure at, ascending")
	fs.IntVar(&o.samples, "samples", 20, "start-latency samples of each kind per level")
	fs.IntVar(&o.warmup, "warmup", 3, "unrecorded samples of each kind first, per level")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the sample order shuffle (default: from the clock)")
	fs.DurationVar(&o.callTimeout, "call-timeout", time.Minute, "fail one API call or run that takes longer")
	fs.StringVar(&o.jsonPath, "json", "", "write machine-readable results to `FILE`")
	fs.StringVar(&o.mdPath, "markdown", "", "write the markdown report to `FILE` (it is printed either way)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: density [flags]\n\nFills a moat daemon with idle sandboxes and measures memory per sandbox and start latency at each level.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.levels, err = parseLevels(*levels); err != nil {
		return nil, err
	}
	if o.samples < 1 || o.warmup < 0 {
		return nil, errors.New("--samples must be at least 1 and --warmup not negative")
	}
	if o.callTimeout <= 0 {
		return nil, errors.New("--call-timeout must be positive")
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	return o, nil
}

// maxLevel bounds --levels: the daemon's limit is set from it, and each
// sandbox costs a few MiB.
const maxLevel = 20000

// parseLevels reads "1,10,100" into ascending, distinct, positive counts.
func parseLevels(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > maxLevel {
			return nil, fmt.Errorf("--levels: %q is not a count from 1 to %d", f, maxLevel)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("--levels must ascend: %d after %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("--levels selects nothing")
	}
	return slices.Clip(out), nil
}
