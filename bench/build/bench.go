package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
	"github.com/moat-sandbox/moat/client"
)

// bench is one run: the daemon, its client, the sources and the rows
// being filled.
type bench struct {
	o    *options
	rep  *schema.Build
	logf func(string, ...any)
	d    *moatd.Daemon
	c    *client.Client
	rows map[string]*row

	real       project
	realTar    []byte
	trivialTar []byte
}

// daemonConfig is the daemon's config file: no warm pool (every create
// is cold) and no CPU quota, so that the sandboxed build may use every
// CPU as the host's does ("--cpus unlimited"); the other limits are
// moat's defaults.
const daemonConfig = "# bench/build: no warm pool, no CPU quota\n[limits]\ncpus = 0.0\n"

// execute starts the daemon, runs the rounds and stops the daemon;
// failures go to rep.
func execute(ctx context.Context, o *options, rep *schema.Build, logf func(string, ...any)) {
	bin := o.Moat
	rep.Versions["moat"] = machine.Version(bin, "version")
	rep.Versions["gcc"] = machine.Version("gcc", "-dumpfullversion")
	rep.Versions["make"] = machine.Version("make", "--version")
	b := &bench{o: o, rep: rep, logf: logf, rows: map[string]*row{}, real: realProject(o.units, o.funcs)}
	var err error
	if b.realTar, err = b.real.tar(); err == nil {
		b.trivialTar, err = trivialProject().tar()
	}
	if err != nil {
		fail(rep, "making the sources: %v", err)
		return
	}

	tmp, err := os.MkdirTemp("", "moat-bench-build-")
	if err != nil {
		fail(rep, "temporary directory: %v", err)
		return
	}
	defer os.RemoveAll(tmp)
	cfg := filepath.Join(tmp, "config.toml")
	if err := os.WriteFile(cfg, []byte(daemonConfig), 0o600); err != nil {
		fail(rep, "%v", err)
		return
	}
	b.d, err = moatd.Start(ctx, bin, "moat-bench-build-", []string{"--config", cfg, "--store", filepath.Join(tmp, "store")}, 30*time.Second)
	if err != nil {
		fail(rep, "start the daemon: %v", err)
		return
	}
	rep.Daemon.Command = machine.ShellQuote(b.d.Argv)
	rep.Daemon.URL = b.d.URL
	logf("daemon pid %d listening on %s", b.d.PID, b.d.URL)
	defer b.stopDaemon()

	if b.c, err = client.New(client.WithHTTP(b.d.URL, b.d.Token)); err != nil {
		fail(rep, "client: %v", err)
		return
	}
	defer b.c.Close()
	b.rounds(ctx)
	rep.Rows = ordered(b.rows)
}

// sampler takes one sample of its row; record says whether it is
// measured.
type sampler struct {
	kind string
	run  func(ctx context.Context, record bool) (sample, error)
}

// rounds runs the rounds: every round the fixed cost's rows, in
// o.buildWarmup+o.buildRounds of them (spread evenly) the real builds
// too, each round's rows in a fresh random order.
func (b *bench) rounds(ctx context.Context) {
	o := b.o
	var fixed, heavy []sampler
	if o.Rounds > 0 {
		b.rows[schema.BuildBaseline] = newRow(schema.BuildBaseline, "cold API create (no pool) carrying its first exec of `true`, until it answers (the fixed cost's reference)")
		b.rows[schema.BuildTrivial] = newRow(schema.BuildTrivial, "moat build of a one-file source running `true`, no output: the Build call until it answers")
		b.rows[schema.BuildTrivialOutput] = newRow(schema.BuildTrivialOutput, "the same build collecting that file as its output: the Build call and the artifact's download")
		fixed = []sampler{
			{schema.BuildBaseline, b.baseline},
			{schema.BuildTrivial, func(ctx context.Context, rec bool) (sample, error) { return b.trivial(ctx, false) }},
			{schema.BuildTrivialOutput, func(ctx context.Context, rec bool) (sample, error) { return b.trivial(ctx, true) }},
		}
	}
	if o.buildRounds > 0 {
		b.rows[schema.BuildHost] = newRow(schema.BuildHost, fmt.Sprintf("the C build (%d units, gcc -O2, make -j%d) on the host: source written into a fresh directory → the program read back", o.units, o.jobs))
		b.rows[schema.BuildSandbox] = newRow(schema.BuildSandbox, "the same build as a moat build through the daemon (no CPU quota): the Build call with the source tar → the program downloaded as an artifact")
		heavy = []sampler{{schema.BuildHost, b.hostSample}, {schema.BuildSandbox, b.sandboxSample}}
	}
	nFixed, nHeavy := o.Warmup+o.Rounds, o.buildWarmup+o.buildRounds
	if o.Rounds == 0 {
		nFixed = 0
	}
	if o.buildRounds == 0 {
		nHeavy = 0
	}
	total := max(nFixed, nHeavy)
	inFixed, inHeavy := schedule(nFixed, total), schedule(nHeavy, total)
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	seenFixed, seenHeavy := 0, 0
	for round := range total {
		var now []sampler
		recFixed, recHeavy := false, false
		if inFixed[round] {
			now = append(now, fixed...)
			recFixed = seenFixed >= o.Warmup
			seenFixed++
		}
		if inHeavy[round] {
			now = append(now, heavy...)
			recHeavy = seenHeavy >= o.buildWarmup
			seenHeavy++
		}
		rng.Shuffle(len(now), func(i, j int) { now[i], now[j] = now[j], now[i] })
		runtime.GC()
		for _, s := range now {
			if ctx.Err() != nil {
				return
			}
			record := recFixed
			if s.kind == schema.BuildHost || s.kind == schema.BuildSandbox {
				record = recHeavy
			}
			got, err := s.run(ctx, record)
			switch {
			case err != nil:
				fail(b.rep, "round %d, %s: %v", round+1, s.kind, err)
				if record {
					b.rows[s.kind].Failures++
				}
			case record:
				b.rows[s.kind].add(got)
			}
			if s.kind == schema.BuildHost || s.kind == schema.BuildSandbox {
				b.logf("round %d, %s build: %s (%s)", round+1, s.kind, got.wall.Round(time.Millisecond), map[bool]string{true: "measured", false: "warm-up"}[record])
			}
		}
		if (round+1)%10 == 0 {
			b.logf("%d of %d rounds", round+1, total)
		}
	}
}

// callCtx bounds one sample.
func (b *bench) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.o.callTimeout)
}

// hostSample times the real build on the host.
func (b *bench) hostSample(ctx context.Context, record bool) (sample, error) {
	cctx, cancel := b.callCtx(ctx)
	defer cancel()
	d, sum, err := hostBuild(cctx, b.real, b.o.jobs)
	if err != nil {
		return sample{}, err
	}
	if record {
		b.rep.Config.HostProgram = sum
	}
	return sample{wall: d}, nil
}

// sandboxSample times the real build through the daemon: the Build call
// with the source tar, then the program's download, hashed and checked
// against the artifact's digest and size.
func (b *bench) sandboxSample(ctx context.Context, record bool) (sample, error) {
	req := api.CreateBuild{Command: makeCommand(b.o.jobs), Outputs: []string{realProgram}}
	got, res, err := b.timedBuild(ctx, req, b.realTar, realProgram)
	if err != nil {
		return got, err
	}
	if res.SourceDateEpoch != epoch {
		return got, fmt.Errorf("build %s: SOURCE_DATE_EPOCH %d, the host build's is %d", res.ID, res.SourceDateEpoch, epoch)
	}
	if record {
		c := &b.rep.Config
		c.SandboxProgram, c.SourceDigest, c.SandboxEnv = res.Artifacts[0].SHA256, res.SourceDigest, slices.Sorted(slices.Values(res.Env))
		if res.Enforcement != nil {
			c.CPUs = res.Enforcement.Limits.CPUs
		}
	}
	return got, nil
}

// trivial times a build of the one-file source running true; with
// output, the file is its output and is downloaded.
func (b *bench) trivial(ctx context.Context, output bool) (sample, error) {
	req := api.CreateBuild{Command: []string{"true"}}
	want := ""
	if output {
		want = "hello.txt"
		req.Outputs = []string{want}
	}
	got, _, err := b.timedBuild(ctx, req, b.trivialTar, want)
	return got, err
}

// errBuild is a build that did not succeed, or did not give the
// artifact it should.
var errBuild = errors.New("build")

// timedBuild sends one build with source and times it until it answers
// and, when artifact is not "", that one artifact has been downloaded and
// checked. The build is deleted afterwards, untimed.
func (b *bench) timedBuild(ctx context.Context, req api.CreateBuild, source []byte, artifact string) (sample, *api.Build, error) {
	cctx, cancel := b.callCtx(ctx)
	defer cancel()
	t0 := time.Now()
	res, err := b.c.Build(cctx, req, bytes.NewReader(source))
	call := time.Since(t0)
	if err != nil {
		return sample{}, nil, fmt.Errorf("build: %w", err)
	}
	if err = checkBuild(res, artifact); err == nil && artifact != "" {
		err = download(cctx, b.c, res.ID, res.Artifacts[0])
	}
	wall := time.Since(t0)
	if _, derr := b.c.DeleteBuild(cctx, res.ID); err == nil && derr != nil {
		err = fmt.Errorf("delete build %s: %w", res.ID, derr)
	}
	if err != nil {
		return sample{}, res, err
	}
	return sample{wall: wall, duration: time.Duration(res.DurationMs) * time.Millisecond, call: call, peak: res.PeakMemoryBytes}, res, nil
}

// checkBuild checks that res succeeded with exactly the artifact named
// (none when artifact is "").
func checkBuild(res *api.Build, artifact string) error {
	if res.Status != api.BuildSucceeded {
		msg := res.Log.Tail
		if msg == "" {
			msg = res.Log.Head
		}
		return fmt.Errorf("%w %s: %s/%s: %s; log %q", errBuild, res.ID, res.Status, res.Reason, res.Message, firstN(msg, 300))
	}
	switch {
	case artifact == "" && len(res.Artifacts) != 0:
		return fmt.Errorf("%w %s: %d artifact(s), want none", errBuild, res.ID, len(res.Artifacts))
	case artifact != "" && (len(res.Artifacts) != 1 || res.Artifacts[0].Path != artifact):
		return fmt.Errorf("%w %s: artifacts %+v, want %s alone", errBuild, res.ID, res.Artifacts, artifact)
	case res.DurationMs <= 0:
		return fmt.Errorf("%w %s: duration_ms %d", errBuild, res.ID, res.DurationMs)
	}
	return nil
}

// download fetches artifact a of build id, checking its size and digest.
func download(ctx context.Context, c *client.Client, id string, a api.BuildArtifact) error {
	h := sha256.New()
	cw := &countWriter{w: h}
	if err := c.BuildArtifact(ctx, id, a.SHA256, cw); err != nil {
		return fmt.Errorf("artifact %s of build %s: %w", a.Path, id, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); cw.n != a.Size || sum != a.SHA256 {
		return fmt.Errorf("%w %s: artifact %s downloaded %d bytes of sha256 %s, the build says %d bytes of %s", errBuild, id, a.Path, cw.n, sum, a.Size, a.SHA256)
	}
	return nil
}

// countWriter counts what it passes to w.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// baseline times one cold create carrying its first exec of true; the
// sandbox is deleted afterwards, untimed in the sample but timed on its
// own.
func (b *bench) baseline(ctx context.Context, _ bool) (sample, error) {
	cctx, cancel := b.callCtx(ctx)
	defer cancel()
	t0 := time.Now()
	sb, res, err := b.c.CreateSandboxExec(cctx, api.CreateSandbox{}, api.Exec{Args: []string{"true"}})
	d := time.Since(t0)
	if err == nil {
		switch info := sb.Snapshot(); {
		case res.ExitCode != 0:
			err = fmt.Errorf("true: exit %d %s", res.ExitCode, res.Error)
		case info != nil && info.Pooled:
			err = errors.New("served by a warm pool: not a cold create")
		}
	}
	var del time.Duration
	if sb != nil {
		t1 := time.Now()
		derr := sb.Delete(cctx)
		del = time.Since(t1)
		if err == nil && derr != nil {
			err = fmt.Errorf("delete: %w", derr)
		}
	}
	if err != nil {
		return sample{}, err
	}
	return sample{wall: d, delete: del}, nil
}

// stopDaemon stops the daemon and records its log's warnings.
func (b *bench) stopDaemon() {
	took, err := b.d.Stop(5 * time.Minute)
	if err != nil {
		fail(b.rep, "daemon: %v", err)
	}
	sv := &b.rep.Daemon
	sv.StopMs, sv.ExitedOK = stats.Ms(took), err == nil
	sv.LogLines, sv.LogProblems, sv.FirstProblems = b.d.LogProblems()
}
