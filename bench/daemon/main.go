// Command daemon measures `moat serve` under exhaustion, the figures issue
// 17 ("daemon durability and resource bounds") asks for, against a real
// daemon built from this checkout and, for "vs today", the daemon of the
// commit before issue 17 (built here from `git archive`, removed after):
//
//   - output flood: concurrent execs across several tenants printing as
//     much as output_limit = max_limit allows, and background processes
//     flooding at the same time, at the default output budgets and at a
//     small one; the daemon's VmRSS is sampled every 50 ms (and its VmHWM
//     read), giving the peak growth over the idle baseline and the RSS a
//     few seconds after the sandboxes end, and every byte printed is
//     accounted for: in the answer, on disk (spilled or kept), or counted
//     as lost (lost events of the streams);
//   - durable record throughput: calls/s and latency of `process.exec` of
//     /bin/true at 1, 8 and 32 concurrent clients over HTTP, new daemon
//     and old in alternating rounds, and the in-process
//     BenchmarkRecordCall (`go test -bench RecordCall ./server/`) of both
//     trees;
//   - auth flood: bad-token requests answered per second and the audit
//     events (and bytes of tape) they cost per 1000, new and old.
//
// Every daemon is started on an ephemeral loopback port with a data
// directory and a template store of its own, stopped with SIGTERM and
// checked to exit 0. A failed call, an unaccounted byte or an unclean
// daemon exit makes the command exit 1; slowness never does. Run as root.
//
//	go run ./daemon --json results/daemon.json --markdown results/daemon.md   (from bench/)
package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/schema"
)

// spec is how bench/daemon takes the common flags.
var spec = cli.Spec{
	Name:        "daemon",
	About:       "Measures moat serve under output floods, its durable exec throughput and an auth flood, against the daemon before issue 17. Run as root.",
	Rounds:      5,
	Warmup:      1,
	RoundsUsage: "rounds of the exec throughput (each runs every level on both daemons, shuffled); 0 skips it",
	WarmupUsage: "unrecorded one-second windows of the exec throughput at the highest level first, per daemon",
	MinRounds:   0,
}

type options struct {
	cli.Flags
	old string // the commit of the daemon before issue 17; "none" skips

	// The output flood.
	tenants       int
	execs         int
	execMiB       int
	background    int
	backgroundMiB int
	smallBudget   int64
	smallTenant   int64
	sampleEvery   time.Duration
	after         time.Duration
	flood         bool

	// Exec throughput, new against old.
	levels []int
	window time.Duration

	// The auth flood.
	authClients int
	authWindow  time.Duration
	authRounds  int

	// BenchmarkRecordCall.
	benchtime string
	record    bool

	callTimeout time.Duration
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := spec.FlagSet(stderr, &o.Flags)
	fs.StringVar(&o.old, "old", "8c7ed80", "`COMMIT` whose daemon is \"today\" (the parent of issue 17's commits), built from git archive; \"none\" skips the comparisons")
	fs.IntVar(&o.tenants, "tenants", 4, "tenants of the output flood (one sandbox each)")
	fs.IntVar(&o.execs, "execs", 16, "concurrent execs of the output flood, spread over the tenants")
	fs.IntVar(&o.execMiB, "exec-mib", 8, "MiB each exec prints (output_limit is max_limit, 8 MiB)")
	fs.IntVar(&o.background, "background", 32, "background processes flooding at the same time, spread over the tenants")
	fs.IntVar(&o.backgroundMiB, "background-mib", 16, "MiB each background process prints")
	small := fs.String("small-budget", "64MiB/16MiB", "the small output budget: memory_budget/tenant_memory_budget")
	fs.DurationVar(&o.sampleEvery, "sample-every", 50*time.Millisecond, "how often the daemon's VmRSS is read during the flood")
	fs.DurationVar(&o.after, "after", 5*time.Second, "how long after the sandboxes end the daemon's RSS is read again")
	fs.BoolVar(&o.flood, "flood", true, "run the output flood")
	levels := fs.String("levels", "1,8,32", "concurrent clients of the exec throughput")
	fs.DurationVar(&o.window, "window", 3*time.Second, "how long each level runs on each daemon per round")
	fs.IntVar(&o.authClients, "auth-clients", 8, "concurrent clients of the auth flood")
	fs.DurationVar(&o.authWindow, "auth-window", 3*time.Second, "how long the auth flood runs on each daemon per round")
	fs.IntVar(&o.authRounds, "auth-rounds", 2, "rounds of the auth flood (0 skips it)")
	fs.StringVar(&o.benchtime, "benchtime", "2s", "-benchtime of go test -bench RecordCall")
	fs.BoolVar(&o.record, "record", true, "run BenchmarkRecordCall of both trees (go test)")
	fs.DurationVar(&o.callTimeout, "call-timeout", 2*time.Minute, "fail a single HTTP call that takes longer")
	if err := spec.Parse(fs, args, &o.Flags); err != nil {
		return nil, err
	}
	var err error
	if o.levels, err = parseLevels(*levels); err != nil {
		return nil, err
	}
	if o.smallBudget, o.smallTenant, err = parseBudget(*small); err != nil {
		return nil, err
	}
	if o.tenants < 1 || o.execs < 0 || o.execMiB < 1 || o.background < 0 || o.backgroundMiB < 1 || o.sampleEvery <= 0 || o.after < 0 ||
		o.window <= 0 || o.authClients < 1 || o.authWindow <= 0 || o.authRounds < 0 || o.callTimeout <= 0 {
		return nil, fmt.Errorf("%w: counts and durations must be positive (--execs, --background, --rounds, --auth-rounds and --after may be 0)", cli.ErrUsage)
	}
	if o.execMiB > 8 {
		// output_limit is max_limit, whose default is 8 MiB: more would be
		// truncated by the limit, not by the budget.
		return nil, fmt.Errorf("%w: --exec-mib must be at most 8 (the default max_limit)", cli.ErrUsage)
	}
	return o, nil
}

// parseLevels reads --levels: clients from 1 to 256, comma-separated.
func parseLevels(s string) ([]int, error) { return cli.Levels("--levels", s, 256, false) }

// parseBudget reads "64MiB/16MiB".
func parseBudget(s string) (all, tenant int64, err error) {
	a, t, ok := strings.Cut(s, "/")
	if ok {
		all, err = parseSize(a)
	}
	if ok && err == nil {
		tenant, err = parseSize(t)
	}
	if !ok || err != nil || all < 1<<20 || tenant < 1<<20 || tenant > all {
		return 0, 0, fmt.Errorf("%w: --small-budget %q: want MEMORY/TENANT, e.g. 64MiB/16MiB, each at least 1MiB, the tenant's at most the whole", cli.ErrUsage, s)
	}
	return all, tenant, nil
}

// parseSize reads N, NKiB, NMiB or NGiB.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

// run is the whole program; it returns the exit code: 0, 1 when anything
// failed, 2 on bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return spec.Exit(stderr, err)
	}
	logf := spec.Logf(stderr)
	root, err := cli.Root()
	if err != nil {
		logf("%v", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	started := time.Now()
	rep := &schema.Daemon{
		Run: spec.Start(&o.Flags, args, started),
		Config: schema.DaemonConfig{Tenants: o.tenants, Execs: o.execs, ExecMiB: o.execMiB, Background: o.background, BackgroundMiB: o.backgroundMiB,
			SampleEveryMs: o.sampleEvery.Milliseconds(), AfterSec: o.after.Seconds(), Levels: o.levels,
			WindowSec: o.window.Seconds(), AuthClients: o.authClients, AuthWindowSec: o.authWindow.Seconds(), AuthRounds: o.authRounds,
			Benchtime: o.benchtime,
			Timing: "client side, wall-clock (time.Now/time.Since) around each HTTP call over keep-alive connections; " +
				"the daemon's memory from /proc/PID/status (VmRSS sampled, VmHWM reset with clear_refs 5 at the baseline)",
			Percentiles: "linear interpolation between closest ranks (numpy default, R type 7)"},
		Flood:   []schema.Flood{},
		Daemons: []schema.Serve{},
	}
	execute(ctx, o, root, rep, logf)
	cli.Finish(&rep.Run, started)
	if ctx.Err() != nil {
		rep.Errors = append(rep.Errors, "interrupted")
	}
	finish(rep)
	return o.Conclude(rep.Failed, rep, stdout, logf)
}

// execute runs the phases: the old daemon's build, the floods, the exec
// throughput and the auth flood on a new and an old daemon, and
// BenchmarkRecordCall of both trees (the checkout at root and the old).
func execute(ctx context.Context, o *options, root string, rep *schema.Daemon, logf func(string, ...any)) {
	bin := o.Moat
	rep.Versions["moat"] = machine.Version(bin, "version")
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))

	// Today's daemon, built from the commit before issue 17.
	var old *oldTree
	if o.old != "none" && (o.Rounds > 0 || o.authRounds > 0 || o.record) {
		logf("building the daemon of %s (git archive, go build)", o.old)
		old, rep.Old = buildOld(ctx, o.old)
		if old != nil {
			defer old.remove()
			logf("built %s in %.0f s: %s", rep.Old.Commit, rep.Old.BuildSec, rep.Old.Version)
		} else {
			logf("no old daemon: %s", rep.Old.SkippedReason)
		}
	} else if o.old == "none" {
		rep.Old = &schema.OldDaemon{SkippedReason: "--old none"}
	}

	if o.flood {
		for _, fc := range []schema.FloodBudget{
			{Name: "default budgets", Key: "default", MaxLimit: 8 << 20, MemoryBudget: 1 << 30, TenantMemoryBudget: 256 << 20, TenantDiskQuota: 1 << 30},
			{Name: "small budget", Key: "small", MaxLimit: 8 << 20, MemoryBudget: o.smallBudget, TenantMemoryBudget: o.smallTenant, TenantDiskQuota: 1 << 30},
		} {
			if ctx.Err() != nil {
				break
			}
			logf("output flood, %s (%s / %s per tenant): %d execs × %d MiB and %d background processes × %d MiB over %d tenants",
				fc.Name, sizeStr(fc.MemoryBudget), sizeStr(fc.TenantMemoryBudget), o.execs, o.execMiB, o.background, o.backgroundMiB, o.tenants)
			fr, info := runFlood(ctx, o, bin, fc, logf)
			if info != nil {
				rep.Daemons = append(rep.Daemons, *info)
			}
			logf("  peak RSS +%.1f MiB over %.1f MiB (goal ≤ %.0f MiB); %.1f MiB after %s; accounted: %v",
				float64(fr.PeakGrowthKiB)/1024, float64(fr.BaselineRSSKiB)/1024, float64(fr.GoalKiB)/1024,
				float64(fr.AfterEndGrowthKiB)/1024, o.after, fr.Accounted)
			rep.Flood = append(rep.Flood, fr)
		}
	}

	if (o.Rounds > 0 || o.authRounds > 0) && ctx.Err() == nil {
		pairPhases(ctx, o, bin, old, rep, rng, logf)
	}

	if o.record && ctx.Err() == nil {
		rep.Record = runRecordBench(ctx, o, root, old, logf)
	}
}
