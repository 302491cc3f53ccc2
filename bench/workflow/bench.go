package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
	"github.com/moat-sandbox/moat/client"
)

// bench is one run: the daemon, its client and the rows being filled.
type bench struct {
	o    *options
	rep  *schema.Workflow
	logf func(string, ...any)
	d    *moatd.Daemon
	c    *client.Client
	rows map[string]*row
	docs map[string]string // the rows' documents, by kind
}

// execute starts the daemon, runs the rounds and the fairness runs and
// stops the daemon; failures go to rep.
func execute(ctx context.Context, o *options, rep *schema.Workflow, logf func(string, ...any)) {
	bin := o.Moat
	rep.Versions["moat"] = machine.Version(bin, "version")
	b := &bench{o: o, rep: rep, logf: logf, rows: map[string]*row{}, docs: map[string]string{
		schema.WorkflowChainLight: chainDoc("bench-chain-light", o.steps, true),
		schema.WorkflowChainNone:  chainDoc("bench-chain-none", o.steps, false),
		schema.WorkflowRetry:      retryDoc("bench-retry", retrySteps, true),
		schema.WorkflowScratch:    retryDoc("bench-scratch", retrySteps, false),
	}}
	rep.Config.Documents = b.docs
	rep.Config.FairScript = fairScript(window{})

	// A private store (the light snapshots go there) and an empty config,
	// so the operator's config on this host adds no warm pool: every
	// create of the baseline and of the steps is cold.
	tmp, err := os.MkdirTemp("", "moat-bench-workflow-")
	if err != nil {
		fail(rep, "temporary directory: %v", err)
		return
	}
	defer os.RemoveAll(tmp)
	cfg := filepath.Join(tmp, "config.toml")
	if err := os.WriteFile(cfg, []byte("# bench/workflow: no warm pool\n"), 0o600); err != nil {
		fail(rep, "%v", err)
		return
	}
	limit := strconv.Itoa(max(64, o.fairSteps+16))
	b.d, err = moatd.Start(ctx, bin, "moat-bench-workflow-", []string{
		"--config", cfg, "--store", filepath.Join(tmp, "store"),
		"--max-sandboxes", limit, "--max-per-tenant", limit,
	}, 30*time.Second)
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

	if o.Rounds > 0 {
		b.rounds(ctx)
	}
	rep.Rows = ordered(b.rows)
	if o.fairRuns > 0 && ctx.Err() == nil {
		rep.Fairness = b.fairness(ctx)
	}
}

// sampler takes one sample of its rows; record says whether the round
// is measured.
type sampler struct {
	name string
	run  func(ctx context.Context, record bool) error
}

// rounds runs the warm-up and measured rounds, each sampler once per
// round in a fresh random order.
func (b *bench) rounds(ctx context.Context) {
	steps := b.o.steps
	b.rows[schema.WorkflowBaseline] = newRow(schema.WorkflowBaseline,
		"cold API create (no pool), then exec of the steps' own command (`sh -c` of shell builtins) until it answers: two requests (the goals' reference)", 0)
	b.rows[schema.WorkflowBaselineExec] = newRow(schema.WorkflowBaselineExec,
		"cold API create carrying the exec of the same command: one request (informational)", 0)
	b.rows[schema.WorkflowChainLight] = newRow(schema.WorkflowChainLight,
		fmt.Sprintf("%d-step sequential chain, each step from its predecessor's light snapshot: submit → the run.succeeded event at the client", steps), steps)
	b.rows[schema.WorkflowChainNone] = newRow(schema.WorkflowChainNone,
		fmt.Sprintf("the same %d steps with snapshot none and no from (each a fresh sandbox): submit → the run.succeeded event at the client", steps), steps)
	b.rows[schema.WorkflowRetry] = newRow(schema.WorkflowRetry,
		fmt.Sprintf("retry of step %d of a %d-step chain from its snapshot: the failed attempt's end → the step's success", retrySteps, retrySteps), 0)
	b.rows[schema.WorkflowRetryRun] = newRow(schema.WorkflowRetryRun,
		fmt.Sprintf("that %d-step run, the retry included: submit → the run.succeeded event at the client", retrySteps), retrySteps)
	b.rows[schema.WorkflowScratch] = newRow(schema.WorkflowScratch,
		fmt.Sprintf("the same %d steps run afresh from scratch, every step passing: submit → the run.succeeded event at the client", retrySteps), retrySteps)
	b.rows[schema.WorkflowChainLight].Check = fmt.Sprintf("step k printed k lines of the chain's file (the state carried through %d snapshots)", steps-1)
	b.rows[schema.WorkflowChainNone].Check = "every step printed 1 (each started fresh)"
	b.rows[schema.WorkflowRetry].Check = "the second attempt started from the same snapshot as the first and saw the predecessor's files, not the failed attempt's"
	b.rows[schema.WorkflowScratch].Check = "step k printed k"

	samplers := []sampler{
		{"baseline", b.baseline},
		{"baseline (create carrying the exec)", b.baselineExec},
		{"chain, light snapshots", func(ctx context.Context, rec bool) error { return b.chain(ctx, schema.WorkflowChainLight, true, rec) }},
		{"chain, no snapshots", func(ctx context.Context, rec bool) error { return b.chain(ctx, schema.WorkflowChainNone, false, rec) }},
		{"retry", b.retry},
		{"scratch", b.scratch},
	}
	rng := rand.New(rand.NewPCG(b.o.Seed, b.o.Seed^0x9e3779b97f4a7c15))
	order := make([]int, len(samplers))
	for i := range order {
		order[i] = i
	}
	for round := range b.o.Warmup + b.o.Rounds {
		if ctx.Err() != nil {
			return
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		runtime.GC()
		record := round >= b.o.Warmup
		for _, k := range order {
			if err := samplers[k].run(ctx, record); err != nil {
				fail(b.rep, "round %d, %s: %v", round+1, samplers[k].name, err)
			}
		}
		if record && (round+1-b.o.Warmup)%5 == 0 {
			b.logf("%d of %d rounds", round+1-b.o.Warmup, b.o.Rounds)
		}
	}
}

// failed counts a failed sample of kind when the round is measured.
func (b *bench) failed(kind string, record bool, err error) error {
	if record && err != nil {
		b.rows[kind].Failures++
	}
	return err
}

// stepExec is the baseline's process: the command of the chain's steps
// (chainScript, shell builtins in one sh), so that the ratios measure
// what a workflow adds to one create → first exec of the same command.
func stepExec() api.Exec {
	return api.Exec{Args: []string{"/bin/sh", "-c", chainScript}, Env: []string{"MOAT_STEP_ID=baseline"}}
}

// baseline times one cold create → first exec of the steps' command, two
// requests; the sandbox is deleted afterwards, untimed.
func (b *bench) baseline(ctx context.Context, record bool) error {
	cctx, cancel := context.WithTimeout(ctx, b.o.callTimeout)
	defer cancel()
	t0 := time.Now()
	sb, err := b.c.CreateSandbox(cctx, api.CreateSandbox{})
	if err != nil {
		return b.failed(schema.WorkflowBaseline, record, fmt.Errorf("create: %w", err))
	}
	res, err := sb.Exec(cctx, stepExec())
	d := time.Since(t0)
	if err == nil {
		err = checkTrue(res.ExitCode, res.Error, sb.Snapshot())
	}
	if derr := sb.Delete(cctx); err == nil && derr != nil {
		err = fmt.Errorf("delete: %w", derr)
	}
	if err == nil && record {
		b.rows[schema.WorkflowBaseline].add(stats.Ms(d))
	}
	return b.failed(schema.WorkflowBaseline, record, err)
}

// baselineExec times the same as one request, a create carrying the
// exec.
func (b *bench) baselineExec(ctx context.Context, record bool) error {
	cctx, cancel := context.WithTimeout(ctx, b.o.callTimeout)
	defer cancel()
	t0 := time.Now()
	sb, res, err := b.c.CreateSandboxExec(cctx, api.CreateSandbox{}, stepExec())
	d := time.Since(t0)
	if err == nil {
		err = checkTrue(res.ExitCode, res.Error, sb.Snapshot())
	}
	if sb != nil {
		if derr := sb.Delete(cctx); err == nil && derr != nil {
			err = fmt.Errorf("delete: %w", derr)
		}
	}
	if err == nil && record {
		b.rows[schema.WorkflowBaselineExec].add(stats.Ms(d))
	}
	return b.failed(schema.WorkflowBaselineExec, record, err)
}

// errPooled is a baseline create a warm pool served: not a cold create.
var errPooled = errors.New("served by a warm pool: not a cold create")

// checkTrue checks the answer of the baseline's command in a cold sandbox.
func checkTrue(exit int, msg string, info *api.Sandbox) error {
	if exit != 0 {
		return fmt.Errorf("the step's command: exit %d %s", exit, msg)
	}
	if info != nil && info.Pooled {
		return errPooled
	}
	return nil
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
