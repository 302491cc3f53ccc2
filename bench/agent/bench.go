package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
	"github.com/moat-sandbox/moat/client"
)

// toolCommand is the command of every tool call; execArgs the baseline's
// process.
const toolCommand = "true"

var execArgs = []string{"true"}

// agentName is the benchmark's one agent.
const agentName = "bench"

// bench is one run: the fake provider, the daemon and its client.
type bench struct {
	o    *options
	rep  *schema.Agent
	logf func(string, ...any)
	fake *fakeModel
	d    *moatd.Daemon
	c    *client.Client
	// n numbers the runs (their markers).
	n int
}

// daemonConfig is the daemon's config file: no warm pool, and room for
// every run of the concurrency figures at once.
func daemonConfig(runs int) string {
	return fmt.Sprintf("# bench/agent\n[agent]\nmax_runs = %d\n", max(runs, 1)+1)
}

// modelsFile is the daemon's models file: the fake provider.
func modelsFile(baseURL, keyFile string, maxConcurrency int) string {
	return fmt.Sprintf("providers:\n  - name: fake\n    kind: openai\n    base_url: %q\n    model: m\n    api_key_file: %q\n    max_concurrency: %d\n",
		baseURL, keyFile, maxConcurrency)
}

// document is the agents document of every run.
func document(calls int) string {
	return fmt.Sprintf("agents:\n  - name: %s\n    model: m\n    tools: [shell_exec]\nmax_turns: %d\n", agentName, calls+1)
}

// execute starts the provider and the daemon, measures, and stops them;
// failures go to rep.
func execute(ctx context.Context, o *options, rep *schema.Agent, logf func(string, ...any)) {
	bin := o.Moat
	rep.Versions["moat"] = machine.Version(bin, "version")
	b := &bench{o: o, rep: rep, logf: logf}
	var err error
	if b.fake, err = newFakeModel(toolCommand); err != nil {
		fail(rep, "the fake provider: %v", err)
		return
	}
	defer b.fake.close()
	tmp, err := os.MkdirTemp("", "moat-bench-agent-")
	if err != nil {
		fail(rep, "temporary directory: %v", err)
		return
	}
	defer os.RemoveAll(tmp)
	cfg, models, key := filepath.Join(tmp, "config.toml"), filepath.Join(tmp, "models.yaml"), filepath.Join(tmp, "key")
	for _, f := range []struct{ path, data string }{
		{cfg, daemonConfig(o.runs)},
		{key, "bench-key\n"},
		{models, modelsFile(b.fake.baseURL(), key, o.maxConcurrency)},
	} {
		if err := os.WriteFile(f.path, []byte(f.data), 0o600); err != nil {
			fail(rep, "%v", err)
			return
		}
	}
	b.d, err = moatd.Start(ctx, bin, "moat-bench-agent-", []string{"--config", cfg, "--models", models, "--store", filepath.Join(tmp, "store")}, 30*time.Second)
	if err != nil {
		fail(rep, "start the daemon: %v", err)
		return
	}
	rep.Daemon.Command = machine.ShellQuote(b.d.Argv)
	rep.Daemon.URL = b.d.URL
	logf("daemon pid %d listening on %s; fake provider at %s", b.d.PID, b.d.URL, b.fake.baseURL())
	defer b.stopDaemon()
	if b.c, err = client.New(client.WithHTTP(b.d.URL, b.d.Token)); err != nil {
		fail(rep, "client: %v", err)
		return
	}
	defer b.c.Close()
	if o.Rounds > 0 {
		b.overhead(ctx)
	}
	if o.runs > 0 && ctx.Err() == nil {
		b.concurrency(ctx)
	}
}

// startRun starts one run of calls tool calls and returns its id.
func (b *bench) startRun(ctx context.Context, calls int) (string, error) {
	b.n++
	m := fmt.Sprintf("bench-run-%d", b.n)
	b.fake.expect(m, calls)
	r, err := b.c.AgentRun(ctx, api.CreateAgentRun{Document: document(calls), Agent: agentName,
		Task: fmt.Sprintf("%s: run `%s` %d times with shell_exec, then answer done.", m, toolCommand, calls)})
	if err != nil {
		return "", err
	}
	return r.ID, nil
}

// await waits for run id's end and checks it: succeeded with the answer
// "done" after calls tool calls.
func (b *bench) await(ctx context.Context, id string, calls int) error {
	r, err := b.c.WaitAgentRun(ctx, id)
	if err != nil {
		return err
	}
	tools := 0
	for _, a := range r.Agents {
		tools += a.ToolCalls
	}
	switch {
	case r.State != api.AgentSucceeded:
		return fmt.Errorf("run %s %s: %s", id, r.State, r.Error)
	case r.Answer != "done" || tools != calls:
		return fmt.Errorf("run %s: answer %q after %d tool calls, want \"done\" after %d", id, r.Answer, tools, calls)
	}
	return nil
}

// overhead runs o.Warmup+o.Rounds runs one at a time, each followed by as
// many exec round trips of true in a live sandbox.
func (b *bench) overhead(ctx context.Context) {
	o, ov := b.o, &b.rep.Overhead
	cctx, cancel := context.WithTimeout(ctx, o.callTimeout)
	defer cancel()
	sb, err := b.c.CreateSandbox(cctx, api.CreateSandbox{})
	if err != nil {
		fail(b.rep, "the baseline's sandbox: %v", err)
		return
	}
	defer sb.Delete(context.WithoutCancel(ctx))
	var tool, first, execs, runs []float64
	for round := range o.Warmup + o.Rounds {
		record := round >= o.Warmup
		runtime.GC()
		b.fake.take()
		t0 := time.Now()
		id, err := b.startRun(cctx, o.calls)
		if err == nil {
			err = b.await(cctx, id, o.calls)
		}
		wall := time.Since(t0)
		gaps, _, _, bad := b.fake.take()
		if err == nil && len(bad) > 0 {
			err = fmt.Errorf("the provider refused %d requests; first: %s", len(bad), bad[0])
		}
		if err == nil && len(gaps) != o.calls {
			err = fmt.Errorf("%d tool calls timed, want %d", len(gaps), o.calls)
		}
		if err != nil {
			fail(b.rep, "overhead run %d: %v", round+1, err)
			if record {
				ov.Failures++
			}
			continue
		}
		var ex []float64
		for range o.calls {
			t1 := time.Now()
			res, err := sb.Exec(cctx, api.Exec{Args: execArgs})
			d := time.Since(t1)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d %s", res.ExitCode, res.Error)
			}
			if err != nil {
				fail(b.rep, "overhead run %d, the baseline's exec: %v", round+1, err)
				if record {
					ov.Failures++
				}
				break
			}
			ex = append(ex, stats.Ms(d))
		}
		if !record {
			continue
		}
		for _, g := range gaps {
			if g.call == 1 {
				first = append(first, g.ms)
			} else {
				tool = append(tool, g.ms)
			}
		}
		execs = append(execs, ex...)
		runs = append(runs, stats.Ms(wall))
		b.logf("overhead run %d: %d tool calls in %s", round+1-o.Warmup, o.calls, wall.Round(time.Millisecond))
	}
	ov.ToolCall, ov.FirstCall, ov.Exec, ov.Run = stats.Of(tool), stats.Of(first), stats.Of(execs), stats.Of(runs)
	ov.ToolCallSamples, ov.ExecSamples = nonNil(tool), nonNil(execs)
}

// concurrency starts o.runs runs at once and waits for them all.
func (b *bench) concurrency(ctx context.Context) {
	o, cc := b.o, &b.rep.Concurrency
	cctx, cancel := context.WithTimeout(ctx, o.callTimeout)
	defer cancel()
	runtime.GC()
	b.fake.take()
	cc.Runs = o.runs
	ids := make([]string, 0, o.runs)
	t0 := time.Now()
	for range o.runs {
		id, err := b.startRun(cctx, o.concurrentCalls)
		if err != nil {
			fail(b.rep, "concurrency: start a run: %v", err)
			cc.Failures++
			continue
		}
		ids = append(ids, id)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, id := range ids {
		wg.Go(func() {
			err := b.await(cctx, id, o.concurrentCalls)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fail(b.rep, "concurrency: %v", err)
				cc.Failures++
				return
			}
			cc.Succeeded++
		})
	}
	wg.Wait()
	cc.WallMs = stats.Ms(time.Since(t0))
	gaps, model, peak, bad := b.fake.take()
	if len(bad) > 0 {
		fail(b.rep, "concurrency: the provider refused %d requests; first: %s", len(bad), bad[0])
	}
	if peak > o.maxConcurrency {
		fail(b.rep, "concurrency: %d model requests in flight at once, above max_concurrency %d", peak, o.maxConcurrency)
	}
	var tool, first []float64
	for _, g := range gaps {
		if g.call == 1 {
			first = append(first, g.ms)
		} else {
			tool = append(tool, g.ms)
		}
	}
	cc.ToolCall, cc.FirstCall, cc.Model, cc.PeakInFlight = stats.Of(tool), stats.Of(first), stats.Of(model), peak
	cc.ToolCallSamples = nonNil(tool)
	if cc.ToolCall != nil {
		b.logf("concurrency: %d runs, %d succeeded in %.0f ms; tool call p50 %.2f ms p99 %.2f ms; %d model requests in flight at most",
			o.runs, cc.Succeeded, cc.WallMs, cc.ToolCall.P50, cc.ToolCall.P99, peak)
	}
}

// nonNil is xs, or an empty slice for nil.
func nonNil(xs []float64) []float64 {
	if xs == nil {
		return []float64{}
	}
	return xs
}

// stopDaemon stops the daemon and records its log's warnings.
func (b *bench) stopDaemon() {
	took, err := b.d.Stop(5 * time.Minute)
	if err != nil && !errors.Is(err, context.Canceled) {
		fail(b.rep, "daemon: %v", err)
	}
	sv := &b.rep.Daemon
	sv.StopMs, sv.ExitedOK = stats.Ms(took), err == nil
	sv.LogLines, sv.LogProblems, sv.FirstProblems = b.d.LogProblems()
}
