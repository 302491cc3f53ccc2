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
//	go run ./bench/controlplane --moat bin/moat [--iterations 100] [--soak 60s] [--json FILE] [--markdown FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
	"github.com/moat-sandbox/moat/bench/internal/stats"
)

type options struct {
	moat           string
	iterations     int
	warmup         int
	burst          int
	execIterations int
	execWarmup     int
	soak           time.Duration
	soakSandboxes  int
	fileEvery      int
	refs           bool
	jsonPath       string
	mdPath         string
	seed           uint64
	callTimeout    time.Duration
}

// bursts is the number of measured bursts: enough for o.iterations samples.
func (o *options) bursts() int { return (o.iterations + o.burst - 1) / o.burst }

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.moat, "moat", "bin/moat", "path of the moat binary (make build)")
	fs.IntVar(&o.iterations, "iterations", 100, "time-to-interactive samples per mode and one-shot reference; the exec round trip takes 3× as many unless --exec-iterations")
	fs.IntVar(&o.warmup, "warmup", 5, "warm-up rounds of the sequential time to interactive (and one warm-up burst when not 0), not recorded")
	fs.IntVar(&o.burst, "burst", 10, "sandboxes created at once in a burst")
	fs.IntVar(&o.execIterations, "exec-iterations", 0, "measured exec round trips (default 3 × --iterations)")
	fs.IntVar(&o.execWarmup, "exec-warmup", 20, "warm-up exec round trips, not recorded")
	fs.DurationVar(&o.soak, "soak", 60*time.Second, "soak duration (0 skips the soak)")
	fs.IntVar(&o.soakSandboxes, "soak-sandboxes", 100, "sandboxes running during the soak")
	fs.IntVar(&o.fileEvery, "file-every", 10, "in the soak, a file write and read after every Nth exec")
	fs.BoolVar(&o.refs, "refs", true, "time the one-shot references (moat run, bwrap, bare echo) beside the time to interactive")
	fs.StringVar(&o.jsonPath, "json", "", "write machine-readable results to `FILE`")
	fs.StringVar(&o.mdPath, "markdown", "", "also write the markdown report to `FILE`")
	fs.StringVar(&o.mdPath, "md", "", "the same as --markdown")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the round order shuffle (default: from the clock)")
	fs.DurationVar(&o.callTimeout, "call-timeout", time.Minute, "fail a single HTTP call (or one-shot run) that takes longer")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: controlplane [flags]\n\nBenchmarks moat serve: time to interactive, exec round trip, a soak. Run as root.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.iterations < 1 || o.warmup < 0 || o.burst < 1 || o.execIterations < 0 || o.execWarmup < 0 ||
		o.soak < 0 || o.soakSandboxes < 1 || o.fileEvery < 1 || o.callTimeout <= 0 {
		return nil, errors.New("counts must be positive (warm-ups, --exec-iterations and --soak may be 0)")
	}
	if o.execIterations == 0 {
		o.execIterations = 3 * o.iterations
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	return o, nil
}

// run is the whole program; it returns the exit code: 0, 1 when anything
// failed, 2 on bad usage.
func run(argv []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(argv[1:], stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "controlplane:", err)
		return 2
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "controlplane: "+format+"\n", args...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	started := time.Now()
	rep := &report{
		Machine: collectMachine(started),
		Command: machine.ShellQuote(append([]string{"go", "run", "./bench/controlplane"}, argv[1:]...)),
		Config: config{
			Iterations: o.iterations, Warmup: o.warmup, Burst: o.burst, Bursts: o.bursts(),
			ExecIterations: o.execIterations, ExecWarmup: o.execWarmup,
			SoakSec: o.soak.Seconds(), SoakSandboxes: o.soakSandboxes, FileEvery: o.fileEvery,
			Seed: o.seed, CallTimeoutSec: o.callTimeout.Seconds(),
			Timing:      "client side, wall-clock (time.Now/time.Since) around the HTTP calls over keep-alive connections; one-shot rows around os/exec cmd.Run()",
			Percentiles: "linear interpolation between closest ranks (numpy default, R type 7)",
		},
	}
	code := execute(ctx, o, rep, logf)
	rep.Config.DurationSec = time.Since(started).Round(time.Second).Seconds()
	rep.Machine.LoadAvgEnd = machine.LoadAvg()
	if ctx.Err() != nil {
		rep.Errors = append(rep.Errors, "interrupted")
	}
	finish(rep)
	if rep.Failed {
		code = 1
	}
	md := markdown(rep)
	if !machine.WriteResults(o.jsonPath, o.mdPath, rep, md, logf) {
		code = 1
	}
	fmt.Fprint(stdout, md)
	return code
}

// execute starts the daemon, runs the phases and stops the daemon.
func execute(ctx context.Context, o *options, rep *report, logf func(string, ...any)) int {
	bin, err := filepath.Abs(o.moat)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		rep.Errors = append(rep.Errors, fmt.Sprintf("moat binary %s: %v (build it: make build)", o.moat, err))
		return 1
	}
	rep.Machine.MoatVersion = machine.Version(bin, "version")

	// Rows, in report order: the sequential mode (the API, then the
	// one-shot references), then the burst mode likewise.
	burstName := fmt.Sprintf("bursts of %d", o.burst)
	apiSeq := &row{Name: "moat API", Mode: "sequential", Kind: kindAPI, About: "POST /v1/sandboxes, then POST …/exec echo hello; one at a time"}
	apiBurst := &row{Name: "moat API", Mode: burstName, Kind: kindAPI, About: "the same, that many at once; one sample per sandbox"}
	runArgv := []string{bin, "run", "--", "echo", "hello"}
	var bwrapArgv []string
	bwrapSkip := ""
	if p, err := exec.LookPath("bwrap"); err != nil {
		bwrapSkip = "bwrap not found in PATH (apt-get install -y bubblewrap)"
	} else {
		p, _ = filepath.Abs(p)
		bwrapArgv = machine.BwrapArgs(p, "/", "/bin/echo", "hello")
		rep.Machine.BwrapVersion = machine.Version(p, "--version")
	}
	ref := func(kind, name, about, mode string, argv []string, skip string) *row {
		r := &row{Name: name, Mode: mode, Kind: kind, About: about, argv: argv, SkippedReason: skip}
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
			ref(kindRun, "`moat run -- echo hello`", aboutRun, "sequential", runArgv, ""),
			ref(kindBwrap, "bwrap `echo hello`", aboutBwrap, "sequential", bwrapArgv, bwrapSkip),
			ref(kindBare, "bare `echo hello`", "no isolation: fork, exec, exit, wait", "sequential", []string{"/bin/echo", "hello"}, ""),
		}
		burstRefs = []*row{
			ref(kindRun, "`moat run -- echo hello`", aboutRun+"; that many at once", burstName, runArgv, ""),
			ref(kindBwrap, "bwrap `echo hello`", aboutBwrap+"; that many at once", burstName, bwrapArgv, bwrapSkip),
		}
	}
	defer func() {
		for _, rows := range [][]*row{{apiSeq}, seqRefs, {apiBurst}, burstRefs} {
			for _, r := range rows {
				rep.TTI = append(rep.TTI, *r)
			}
		}
	}()

	limit := strconv.Itoa(max(128, o.soakSandboxes+o.burst))
	d, err := moatd.Start(ctx, bin, "moat-bench-controlplane-", []string{"--max-sandboxes", limit, "--max-per-tenant", limit}, 30*time.Second)
	if err != nil {
		rep.Errors = append(rep.Errors, "starting the daemon: "+err.Error())
		return 1
	}
	rep.Daemon.Command = machine.ShellQuote(d.Argv)
	rep.Daemon.URL = d.URL
	logf("daemon pid %d listening on %s", d.PID, d.URL)

	b := &bench{o: o, d: d, rep: rep, start: time.Now(), logf: logf,
		c: newClient(d.URL, d.Token, 2*o.burst, o.callTimeout)}
	rep.Memory = append(rep.Memory, b.snap("daemon started", false))
	one, err := machine.NewTimer(o.callTimeout, true)
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
	} else {
		defer one.Close()
		b.oneRun = one
		b.sequential(ctx, apiSeq, seqRefs)
		rep.Memory = append(rep.Memory, b.snap("after sequential TTI", false))
		rep.Bursts = b.bursts(ctx, apiBurst, burstRefs)
		rep.Memory = append(rep.Memory, b.snap("after burst TTI", false))
		rep.Exec = &row{Name: "exec round trip", About: "POST …/exec echo hello in an existing sandbox"}
		b.execRoundTrip(ctx, rep.Exec)
		rep.Memory = append(rep.Memory, b.snap("after exec round trips", false))
		if o.soak > 0 && ctx.Err() == nil {
			rep.Soak = b.soak(ctx)
			rep.Memory = append(rep.Memory, b.snap("after the soak's deletions", false))
		}
	}
	b.c.close()
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
	return 0
}

// finish computes the statistics, ratios and goals, and whether the run
// failed.
func finish(rep *report) {
	for i := range rep.TTI {
		rep.TTI[i].setStats()
	}
	if rep.Exec != nil {
		rep.Exec.setStats()
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
			case kindBwrap:
				r.RatioToBwrap = ratio(r.Stats, ref.Stats)
			case kindRun:
				r.RatioToMoatRun = ratio(r.Stats, ref.Stats)
			}
		}
	}

	p50 := func(s *row) *float64 {
		if s == nil || s.Stats == nil {
			return nil
		}
		v := s.Stats.P50
		return &v
	}
	below := func(v *float64, limit float64) *bool {
		if v == nil {
			return nil
		}
		met := *v < limit
		return &met
	}
	for i := range rep.TTI {
		if r := &rep.TTI[i]; r.Kind == kindAPI {
			v := p50(r)
			rep.Goals = append(rep.Goals, goal{Name: "time to interactive p50, " + r.Mode, Target: "< 10 ms", Value: v, Met: below(v, 10)})
		}
	}
	v := p50(rep.Exec)
	rep.Goals = append(rep.Goals, goal{Name: "exec round trip p50", Target: "< 3 ms", Value: v, Met: below(v, 3)})
	if rep.Soak != nil {
		e := float64(rep.Soak.Errors)
		rep.Goals = append(rep.Goals, goal{Name: "soak errors", Target: "0 errors", Value: &e, Met: below(&e, 0.5)})
	}

	rep.Failed = len(rep.Errors) > 0 || (rep.Soak != nil && rep.Soak.Errors > 0)
	for _, r := range rep.TTI {
		rep.Failed = rep.Failed || r.Failed > 0
	}
	if rep.Exec != nil {
		rep.Failed = rep.Failed || rep.Exec.Failed > 0
	}
}
