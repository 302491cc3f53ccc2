package render

import (
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// The goals of issue 23 (the agent runner).
var (
	// goalAgentOverhead: a tool call's p50 (the model's answer out → its
	// result back to the model) over one exec round trip's p50.
	goalAgentOverhead = goal{"<=", 1.2, "×", "p50"}
	// goalAgentSpread: with many runs on one model client, the tool
	// latency's p99 over its p50 (no head-of-line blocking).
	goalAgentSpread = goal{"<=", 2, "×", "p99"}
)

// Headline figures of bench/agent.
const (
	agentOverFig   = "agent: tool-call overhead (model asks → result back to the model) against an exec round trip"
	agentSpreadFig = "agent: tool latency with many runs on one model client, p99 / p50"
)

func agentSection(in *Inputs, a *analysis, plots *plotSet) *section {
	sec := &section{Bench: "agent", File: "agent.json"}
	a.grp, a.bench = gAgent, "agent"
	f := in.Agent
	if f == nil {
		a.missing("Agent runs (bench/agent): not run in this invocation (no agent.json).")
		a.row(headRow{Figure: agentOverFig, Goal: "p50 ≤ 1.2× the exec round trip", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		a.row(headRow{Figure: agentSpreadFig, Goal: "p99 ≤ 2× p50", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		return sec
	}
	sec.Ran = true
	cfg := f.Config
	sec.Meta = fmt.Sprintf("Run: commit %s, %s, load average %s at its start and %s at its end; %d overhead runs of %d tool calls after %d warm-up runs; %d runs at once of %d tool calls each, the provider's max_concurrency %d%s. Command: %s; daemon: %s.",
		orDash(f.Commit), orDash(f.Date), orDash(loadAvg(f.LoadAvgStart)), orDash(loadAvg(f.LoadAvgEnd)), f.Rounds, cfg.Calls, f.Warmup,
		cfg.ConcurrentRuns, cfg.ConcurrentCalls, cfg.MaxConcurrency, took(f.DurationSec), code(f.Command), code(f.Daemon.Command))

	var b strings.Builder
	b.WriteString(agentTable(f, a).String())
	b.WriteString("\n")
	agentOverhead(&b, f, a)
	agentSpread(&b, f, a)
	if sv := f.Daemon; sv.Command != "" {
		fmt.Fprintf(&b, "- Daemon: SIGTERM → exit in %s ms, exited 0: %v; %d log lines, %d at WARN or ERROR.\n", num(sv.StopMs), sv.ExitedOK, sv.LogLines, sv.LogProblems)
		for _, l := range sv.FirstProblems {
			fmt.Fprintf(&b, "  - %s\n", code(firstN(l, 300)))
		}
	}
	fmt.Fprintf(&b, "- Timing: %s.\n", oneLine(cfg.Timing))
	runErrors(&b, a, &f.Run)
	sec.Body = b.String()
	agentPlot(sec, f, plots, a)
	return sec
}

// agentStats is s, nil when it has no sample.
func agentStats(s *stats.Summary) *stats.Summary {
	if s == nil || s.N == 0 {
		return nil
	}
	return s
}

// agentTable is the table of every timed quantity.
func agentTable(f *schema.Agent, a *analysis) *table {
	t := newTable("row", "what is timed", ">n", ">p50 ms", ">p95 ms", ">p99 ms", ">max ms")
	for _, r := range []struct {
		id, what string
		s        *stats.Summary
	}{
		{"tool-call", fmt.Sprintf("one run at a time: a tool call (shell_exec of `%s`, not a run's first), the model's answer out → the next request in", f.Config.Tool), f.Overhead.ToolCall},
		{"first-call", "one run at a time: a run's first tool call, which also makes the agent's sandbox", f.Overhead.FirstCall},
		{"exec", fmt.Sprintf("the baseline: one exec round trip of `%s` in a live sandbox through the SDK", strings.Join(f.Config.Exec, " ")), f.Overhead.Exec},
		{"run", fmt.Sprintf("one run of %d tool calls, agent.create → its end (client side)", f.Config.Calls), f.Overhead.Run},
		{"concurrent-tool-call", fmt.Sprintf("%d runs at once: a tool call (not a run's first)", f.Concurrency.Runs), f.Concurrency.ToolCall},
		{"concurrent-first-call", fmt.Sprintf("%d runs at once: a run's first tool call (its sandbox made meanwhile)", f.Concurrency.Runs), f.Concurrency.FirstCall},
		{"concurrent-model", "the fake provider's own time per request (it answers at once)", f.Concurrency.Model},
	} {
		s := agentStats(r.s)
		a.statFigs("agent."+r.id, "agent "+r.id, "ms", s)
		n, p50, p95, p99, mx := "0", "—", "—", "—", "—"
		if s != nil {
			n, mx = fmt.Sprint(s.N), num(s.Max)
			p50, p95, p99 = statCells(s)
		}
		t.add(code(r.id), r.what, n, p50, p95, p99, mx)
	}
	return t
}

// agentOverhead judges a tool call against the exec round trip.
func agentOverhead(b *strings.Builder, f *schema.Agent, a *analysis) {
	tool, ex := agentStats(f.Overhead.ToolCall), agentStats(f.Overhead.Exec)
	if tool == nil || ex == nil {
		a.row(headRow{Figure: agentOverFig, Goal: "p50 ≤ 1.2× the exec round trip", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not measured"})
		a.missing("bench/agent: the tool-call overhead or its baseline has no measured sample (--rounds 0, or every run failed).")
		return
	}
	r := tool.P50 / ex.P50
	met := a.goalFig("agent.tool_call.ratio_to_exec", "agent: a tool call p50 / an exec round trip p50", "×", r, "lower", goalAgentOverhead)
	p50, p95, p99 := msCells(tool)
	a.row(headRow{Figure: agentOverFig, Goal: "p50 ≤ 1.2× the exec round trip", P50: p50, P95: p95, P99: p99,
		Ratio: "/ exec " + ratio(r) + " (exec p50 " + num(ex.P50) + " ms)", Result: verdict(met)})
	fmt.Fprintf(b, "- **Tool-call overhead**: a tool call took %s ms at p50 from the model's answer asking for it to its result reaching the model, against %s ms for one exec round trip of the same command's kind in a live sandbox: %s (%s ms more). The goal (≤ 1.2×) is %s. Beyond the exec, a tool call's time holds the answer's parsing, the call's judgment, its events and the conversation journalled, and the next model request made and sent.\n",
		num(tool.P50), num(ex.P50), ratio(r), num(tool.P50-ex.P50), strings.Trim(verdict(met), "*"))
	if first := agentStats(f.Overhead.FirstCall); first != nil {
		fmt.Fprintf(b, "- A run's first tool call also makes the agent's sandbox: %s ms at p50.\n", num(first.P50))
	}
}

// agentSpread judges the tool latency's spread with many runs at once.
func agentSpread(b *strings.Builder, f *schema.Agent, a *analysis) {
	cc := f.Concurrency
	s := agentStats(cc.ToolCall)
	if s == nil {
		a.row(headRow{Figure: agentSpreadFig, Goal: "p99 ≤ 2× p50", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not measured"})
		a.missing("bench/agent: the concurrency figures have no measured sample (--runs 0, or every run failed).")
		return
	}
	r := s.P99 / s.P50
	met := a.goalFig("agent.concurrent.p99_over_p50", "agent: tool latency p99 / p50 with many runs on one model client", "×", r, "lower", goalAgentSpread)
	p50, p95, p99 := msCells(s)
	a.row(headRow{Figure: fmt.Sprintf("%s (%d runs, max_concurrency %d)", agentSpreadFig, cc.Runs, f.Config.MaxConcurrency), Goal: "p99 ≤ 2× p50",
		P50: p50, P95: p95, P99: p99, Ratio: "p99 / p50 " + ratio(r), Result: verdict(met)})
	fmt.Fprintf(b, "- **Concurrency**: %d runs started at once on the daemon's one model client (%d succeeded in %s ms), %d tool calls each: a tool call took %s ms at p50 and %s ms at p99, p99 %s the p50. The goal (p99 ≤ 2× p50) is %s. The provider had at most %d requests in flight (its max_concurrency %d).\n",
		cc.Runs, cc.Succeeded, num(cc.WallMs), f.Config.ConcurrentCalls, num(s.P50), num(s.P99), ratio(r), strings.Trim(verdict(met), "*"), cc.PeakInFlight, f.Config.MaxConcurrency)
}

// agentPlot draws the tool calls' and the baseline's distributions.
func agentPlot(sec *section, f *schema.Agent, plots *plotSet, a *analysis) {
	var rows []BoxRow
	if len(f.Overhead.ExecSamples) > 0 {
		rows = append(rows, BoxRow{Label: "exec round trip", Samples: f.Overhead.ExecSamples})
	}
	if len(f.Overhead.ToolCallSamples) > 0 {
		br := BoxRow{Label: "tool call, one run", Samples: f.Overhead.ToolCallSamples}
		if ex := agentStats(f.Overhead.Exec); ex != nil {
			br.Goal = goalAgentOverhead.target * ex.P50
		}
		rows = append(rows, br)
	}
	if len(f.Concurrency.ToolCallSamples) > 0 {
		br := BoxRow{Label: fmt.Sprintf("tool call, %d runs", f.Concurrency.Runs), Samples: f.Concurrency.ToolCallSamples}
		if s := agentStats(f.Concurrency.ToolCall); s != nil {
			br.Goal = goalAgentSpread.target * s.P50
		}
		rows = append(rows, br)
	}
	if len(rows) == 0 {
		a.missing("The bench/agent plot: agent.json holds no samples.")
		return
	}
	ref := plots.add(sec, &BoxPlot{Name: "agent", Title: "Agent tool calls against the exec round trip (bench/agent)",
		XLabel: "ms (log scale); red tick: the row's goal", Rows: rows, Log: true},
		"A tool call's time outside the model, one run at a time and with many at once, against an exec round trip")
	ref.Note = boxNote + goalNote
}
