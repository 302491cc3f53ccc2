// Command controlplane benchmarks moat's control-plane daemon (`moat
// serve`) the way the public agent-sandbox leaderboards measure sandboxes,
// from a client's side over keep-alive HTTP connections:
//
//   - time to interactive: from "create a sandbox" until the first `echo
//     hello` in it has answered, sequentially and in bursts of concurrent
//     creations, beside same-machine one-shot references (`moat run --
//     echo hello`, bubblewrap, a bare echo) taken in the same run;
//   - the round trip of one exec in an existing sandbox;
//   - a soak: 100 sandboxes called concurrently for a minute, with the
//     daemon's and the sandboxes' memory sampled every second.
//
// The program starts the daemon itself (temporary data directory,
// ephemeral port read from its "listening" log line), stops it with
// SIGTERM at the end and checks that it exits 0. Any failed sample or
// call, or an unclean daemon exit, makes it exit 1; slowness never does.
//
//	go run ./controlplane [--rounds 100] [--soak 60s] [--json FILE] [--markdown FILE]   (from bench/)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// spec is how bench/controlplane takes the common flags.
var spec = cli.Spec{
	Name:        "controlplane",
	About:       "Benchmarks moat serve: time to interactive, exec round trip, a soak. Run as root.",
	Rounds:      100,
	Warmup:      5,
	RoundsUsage: "sequential time-to-interactive rounds (each runs the API sample and every one-shot reference once, in a random order), and the samples per row in bursts",
	WarmupUsage: "unrecorded sequential rounds first (and one warm-up burst when not 0)",
	MinRounds:   1,
}

type options struct {
	cli.Flags
	burst         int
	execCalls     int
	execWarmup    int
	soak          time.Duration
	soakSandboxes int
	fileEvery     int
	refs          bool
	callTimeout   time.Duration
}

// bursts is the number of measured bursts: enough for o.Rounds samples.
func (o *options) bursts() int { return (o.Rounds + o.burst - 1) / o.burst }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := spec.FlagSet(stderr, &o.Flags)
	fs.IntVar(&o.burst, "burst", 10, "sandboxes created at once in a burst")
	fs.IntVar(&o.execCalls, "exec-calls", 0, "measured exec round trips (default 3 × --rounds)")
	fs.IntVar(&o.execWarmup, "exec-warmup", 20, "warm-up exec round trips, not recorded")
	fs.DurationVar(&o.soak, "soak", 60*time.Second, "soak duration (0 skips the soak)")
	fs.IntVar(&o.soakSandboxes, "soak-sandboxes", 100, "sandboxes running during the soak")
	fs.IntVar(&o.fileEvery, "file-every", 10, "in the soak, a file write and read after every Nth exec")
	fs.BoolVar(&o.refs, "refs", true, "time the one-shot references (moat run, bwrap, bare echo) beside the time to interactive")
	fs.DurationVar(&o.callTimeout, "call-timeout", time.Minute, "fail a single HTTP call (or one-shot run) that takes longer")
	if err := spec.Parse(fs, args, &o.Flags); err != nil {
		return nil, err
	}
	if o.burst < 1 || o.execCalls < 0 || o.execWarmup < 0 || o.soak < 0 || o.soakSandboxes < 1 || o.fileEvery < 1 || o.callTimeout <= 0 {
		return nil, fmt.Errorf("%w: counts must be positive (--exec-warmup, --exec-calls and --soak may be 0)", cli.ErrUsage)
	}
	if o.execCalls == 0 {
		o.execCalls = 3 * o.Rounds
	}
	return o, nil
}

// run is the whole program; it returns the exit code: 0, 1 when anything
// failed, 2 on bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return spec.Exit(stderr, err)
	}
	logf := spec.Logf(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	started := time.Now()
	rep := &schema.Controlplane{
		Run: spec.Start(&o.Flags, args, started),
		Config: schema.ControlplaneConfig{
			Burst: o.burst, Bursts: o.bursts(), ExecCalls: o.execCalls, ExecWarmup: o.execWarmup,
			SoakSec: o.soak.Seconds(), SoakSandboxes: o.soakSandboxes, FileEvery: o.fileEvery,
			CallTimeoutSec: o.callTimeout.Seconds(),
			Timing:         "client side, wall-clock (time.Now/time.Since) around the HTTP calls over keep-alive connections; one-shot rows around os/exec cmd.Run()",
			Percentiles:    "linear interpolation between closest ranks (numpy default, R type 7)",
		},
		Memory: []schema.MemSnapshot{},
	}
	tti, exec := execute(ctx, o, rep, logf)
	cli.Finish(&rep.Run, started)
	if ctx.Err() != nil {
		rep.Errors = append(rep.Errors, "interrupted")
	}
	finish(rep, tti, exec)
	return o.Conclude(rep.Failed, rep, stdout, logf)
}

// execute starts the daemon, runs the phases and stops the daemon. It
// returns the time-to-interactive rows, in report order (the sequential
// mode: the API, then the one-shot references; then the burst mode
// likewise), and the exec round trip's, nil when not run.
func execute(ctx context.Context, o *options, rep *schema.Controlplane, logf func(string, ...any)) (tti []*row, execRow *row) {
	bin := o.Moat
	rep.Versions["moat"] = machine.Version(bin, "version")

	burstName := fmt.Sprintf("bursts of %d", o.burst)
	apiSeq := newRow("moat API", "sequential", schema.KindAPI, "POST /v1/sandboxes, then POST …/exec echo hello; one at a time")
	apiBurst := newRow("moat API", burstName, schema.KindAPI, "the same, that many at once; one sample per sandbox")
	runArgv := []string{bin, "run", "--", "echo", "hello"}
	var bwrapArgv []string
	bwrapSkip := ""
	if p, err := exec.LookPath("bwrap"); err != nil {
		bwrapSkip = "bwrap not found in PATH (apt-get install -y bubblewrap)"
	} else {
		p, _ = filepath.Abs(p)
		bwrapArgv = machine.BwrapArgs(p, "/", "/bin/echo", "hello")
		rep.Versions["bwrap"] = machine.Version(p, "--version")
	}
	ref := func(kind, name, about, mode string, argv []string, skip string) *row {
		r := newRow(name, mode, kind, about)
		r.argv, r.SkippedReason = argv, skip
		if argv != nil {
			r.Command = machine.ShellQuote(argv)
		}
		return r
	}
	const (
		aboutRun   = "moat's one-shot CLI: builds a sandbox, runs the command, tears it down"
		aboutBwrap = "bubblewrap, every namespace, binds comparable to moat's (as bench/startup)"
	)
	var seqRefs, burstRefs []*row
	if o.refs {
		seqRefs = []*row{
			ref(schema.KindRun, "`moat run -- echo hello`", aboutRun, "sequential", runArgv, ""),
			ref(schema.KindBwrap, "bwrap `echo hello`", aboutBwrap, "sequential", bwrapArgv, bwrapSkip),
			ref(schema.KindBare, "bare `echo hello`", "no isolation: fork, exec, exit, wait", "sequential", []string{"/bin/echo", "hello"}, ""),
			ref(schema.KindBareTrue, "bare `/bin/true`", "no isolation: fork, exec, exit, wait of /bin/true; the floor of the warm claim and the exec round trip", "sequential", []string{"/bin/true"}, ""),
		}
		burstRefs = []*row{
			ref(schema.KindRun, "`moat run -- echo hello`", aboutRun+"; that many at once", burstName, runArgv, ""),
			ref(schema.KindBwrap, "bwrap `echo hello`", aboutBwrap+"; that many at once", burstName, bwrapArgv, bwrapSkip),
		}
	}
	apiWarm := newRow("moat API, warm pool", "sequential", schema.KindWarm,
		fmt.Sprintf("POST /v1/sandboxes served by a warm pool of %d (a second daemon; each sample waits, untimed, for a full pool), then POST …/exec echo hello", warmPoolSize))
	apiExec := newRow("moat API, create carrying the exec", "sequential", schema.KindAPIExec,
		`POST /v1/sandboxes {"exec":{"args":["echo","hello"]}}: one request; one at a time`)
	for _, rows := range [][]*row{{apiSeq, apiExec, apiWarm}, seqRefs, {apiBurst}, burstRefs} {
		tti = append(tti, rows...)
	}

	limit := strconv.Itoa(max(128, o.soakSandboxes+o.burst))
	d, err := moatd.Start(ctx, bin, "moat-bench-controlplane-", []string{"--max-sandboxes", limit, "--max-per-tenant", limit}, 30*time.Second)
	if err != nil {
		rep.Errors = append(rep.Errors, "starting the daemon: "+err.Error())
		return tti, nil
	}
	rep.Daemon.Command = machine.ShellQuote(d.Argv)
	rep.Daemon.URL = d.URL
	logf("daemon pid %d listening on %s", d.PID, d.URL)

	b := &bench{o: o, d: d, rep: rep, start: time.Now(), logf: logf,
		c: newClient(d.URL, d.Token, 2*o.burst, o.callTimeout)}
	if b.warm, err = startWarm(ctx, bin, []string{"--max-sandboxes", limit, "--max-per-tenant", limit}, o.callTimeout); err != nil {
		apiWarm.fail("starting the warm-pool daemon", err)
	} else {
		logf("warm-pool daemon pid %d listening on %s", b.warm.d.PID, b.warm.d.URL)
	}
	rep.Memory = append(rep.Memory, b.snap("daemon started", false))
	one, err := machine.NewTimer(o.callTimeout, true)
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
	} else {
		defer one.Close()
		b.oneRun = one
		b.sequential(ctx, []*row{apiSeq, apiExec, apiWarm}, seqRefs)
		if b.warm != nil {
			if err := b.warm.stop(); err != nil {
				rep.Errors = append(rep.Errors, "stopping the warm-pool daemon: "+err.Error())
			}
			b.warm = nil
		}
		rep.Memory = append(rep.Memory, b.snap("after sequential TTI", false))
		rep.Bursts = b.bursts(ctx, apiBurst, burstRefs)
		rep.Memory = append(rep.Memory, b.snap("after burst TTI", false))
		execRow = newRow("exec round trip", "", "", "POST …/exec echo hello in an existing sandbox")
		b.execRoundTrip(ctx, execRow)
		rep.Memory = append(rep.Memory, b.snap("after exec round trips", false))
		if o.soak > 0 && ctx.Err() == nil {
			rep.Soak = b.soak(ctx)
			rep.Memory = append(rep.Memory, b.snap("after the soak's deletions", false))
		}
	}
	b.c.close()
	if b.warm != nil {
		_ = b.warm.stop()
	}
	rep.Memory = append(rep.Memory, b.snap("before SIGTERM", false))

	took, err := d.Stop(30 * time.Second)
	rep.Daemon.StopMs = stats.Ms(took)
	rep.Daemon.ExitedOK = err == nil
	if err != nil {
		rep.Errors = append(rep.Errors, "stopping the daemon: "+err.Error())
	}
	rep.Daemon.Connections = dials.Load()
	rep.Daemon.LogLines, rep.Daemon.LogProblems, rep.Daemon.FirstProblems = d.LogProblems()
	logf("daemon stopped in %.1f ms (exit ok: %v); %d log lines at WARN or ERROR", stats.Ms(took), err == nil, rep.Daemon.LogProblems)
	return tti, execRow
}

// finish puts the rows, with their statistics, into rep, computes the
// ratios, and whether the run failed. The goals and their verdicts are
// bench/render's.
func finish(rep *schema.Controlplane, tti []*row, execRow *row) {
	rep.TTI = []schema.ControlplaneRow{}
	for _, r := range tti {
		r.setStats()
		rep.TTI = append(rep.TTI, r.ControlplaneRow)
	}
	if execRow != nil {
		execRow.setStats()
		rep.Exec = &execRow.ControlplaneRow
	}
	// Ratios compare rows of the same mode.
	for i := range rep.TTI {
		r := &rep.TTI[i]
		for j := range rep.TTI {
			ref := &rep.TTI[j]
			if ref.Mode != r.Mode {
				continue
			}
			switch ref.Kind {
			case schema.KindBwrap:
				r.RatioToBwrap = ratio(r.Stats, ref.Stats)
			case schema.KindRun:
				r.RatioToMoatRun = ratio(r.Stats, ref.Stats)
			}
		}
	}
	// The warm claim and the exec round trip are compared with a bare
	// fork+exec of /bin/true.
	if bare := schema.Row(rep.TTI, "sequential", schema.KindBareTrue); bare != nil {
		if w := schema.Row(rep.TTI, "sequential", schema.KindWarm); w != nil {
			w.RatioToBareTrue = ratio(w.Stats, bare.Stats)
		}
		if rep.Exec != nil {
			rep.Exec.RatioToBareTrue = ratio(rep.Exec.Stats, bare.Stats)
		}
	}
	rep.Failed = len(rep.Errors) > 0 || (rep.Soak != nil && rep.Soak.Errors > 0)
	for _, r := range rep.TTI {
		rep.Failed = rep.Failed || r.Failed > 0
	}
	if rep.Exec != nil {
		rep.Failed = rep.Failed || rep.Exec.Failed > 0
	}
}
