package render

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// The goals of issue 21 (workflows).
var (
	// goalWfChain: a chain's per-step overhead p50 over one cold create →
	// first exec's p50.
	goalWfChain = goal{"<=", 1.5, "×", "p50"}
	// goalWfRetry: the retry from a snapshot's p50 over the same.
	goalWfRetry = goal{"<=", 1, "×", "p50"}
	// goalWfGroup: |the group's CPUs in the window / its budget − 1|.
	goalWfGroup = goal{"<=", 5, "%", ""}
	// goalWfShare: the largest |rate / mean rate − 1| of a step (its
	// share of the group's CPU against a fair one).
	goalWfShare = goal{"<=", 5, "%", ""}
)

func workflowSection(in *Inputs, a *analysis, plots *plotSet) *section {
	sec := &section{Bench: "workflow", File: "workflow.json"}
	a.grp, a.bench = gWorkflow, "workflow"
	f := in.Workflow
	chainFig := "workflow: per-step overhead of a sequential chain from snapshots"
	retryFig := "workflow: retry of a failed step from its snapshot"
	groupFig := "workflow: CPU-bound steps under one budget, the group's CPU"
	shareFig := "workflow: CPU-bound steps under one budget, each step's share against fair"
	if f == nil {
		a.missing("Workflows (bench/workflow): not run in this invocation (no workflow.json).")
		for _, r := range []struct{ fig, goal string }{
			{chainFig, "p50 ≤ 1.5× cold create → first exec"}, {retryFig, "p50 ≤ 1× cold create → first exec"},
			{groupFig, "within ±5% of the budget"}, {shareFig, "within ±5% of fair"},
		} {
			a.row(headRow{Figure: r.fig, Goal: r.goal, P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		}
		return sec
	}
	sec.Ran = true
	cfg := f.Config
	fairness := "no fairness run"
	if f.Fairness != nil {
		fairness = fmt.Sprintf("%d fairness run(s) of %d steps, budget.cpus %s, spinning from %s s after the submit, measured over %s s after %s s of settling",
			len(f.Fairness.Runs), f.Fairness.Steps, trimNum(f.Fairness.CPUs), trimNum(f.Fairness.LeadSec), trimNum(f.Fairness.WindowSec), trimNum(f.Fairness.SettleSec))
	}
	sec.Meta = fmt.Sprintf("Run: commit %s, %s, load average %s at its start and %s at its end; %d rounds after %d warm-up rounds, the rows in a random order each round (seed %d); chains of %d steps, the retry's of %d; %s%s. Command: %s; daemon: %s.",
		orDash(f.Commit), orDash(f.Date), orDash(loadAvg(f.LoadAvgStart)), orDash(loadAvg(f.LoadAvgEnd)), f.Rounds, f.Warmup, f.Seed,
		cfg.ChainSteps, cfg.RetrySteps, fairness, took(f.DurationSec), code(f.Command), code(f.Daemon.Command))

	var b strings.Builder
	base := wfStats(f.Row(schema.WorkflowBaseline))
	b.WriteString(wfRowTable(f, a, base).String())
	b.WriteString("\n")
	wfGoals(&b, f, a, base, chainFig, retryFig)
	wfPhases(&b, f)
	wfFairness(&b, f, a, groupFig, shareFig)
	if sv := f.Daemon; sv.Command != "" {
		fmt.Fprintf(&b, "\n- Daemon: SIGTERM → exit in %s ms, exited 0: %v; %d log lines, %d at WARN or ERROR.\n", num(sv.StopMs), sv.ExitedOK, sv.LogLines, sv.LogProblems)
		for _, l := range sv.FirstProblems {
			fmt.Fprintf(&b, "  - %s\n", code(firstN(l, 300)))
		}
	}
	runErrors(&b, a, &f.Run)
	sec.Body = b.String()
	wfPlot(sec, f, base, plots, a)
	return sec
}

// wfStats is a row's statistics, nil when it has no sample.
func wfStats(r *schema.WorkflowRow) *stats.Summary {
	if r == nil || r.Stats == nil || r.Stats.N == 0 {
		return nil
	}
	return r.Stats
}

// wfRowTable is the table of every row, with the figures of each.
func wfRowTable(f *schema.Workflow, a *analysis, base *stats.Summary) *table {
	t := newTable("row", "what is timed", ">n", ">p50 ms", ">p95 ms", ">p99 ms", ">max ms", ">per step p50 / p95 / p99 ms", ">p50 / baseline p50", "checked", ">failed")
	for i := range f.Rows {
		r := &f.Rows[i]
		s := wfStats(r)
		id := "workflow." + r.Kind
		a.statFigs(id, "workflow "+r.Kind, "ms", s)
		perStep, rel := "—", "—"
		if r.PerStep != nil && r.PerStep.N > 0 {
			p50, p95, p99 := statCells(r.PerStep)
			perStep = p50 + " / " + p95 + " / " + p99
			a.statFigs(id+".per_step", "workflow "+r.Kind+", per step", "ms", r.PerStep)
		}
		if s != nil && base != nil && r.Kind != schema.WorkflowBaseline {
			v := s.P50
			if r.PerStep != nil && r.PerStep.N > 0 {
				v = r.PerStep.P50
			}
			rel = ratio(v / base.P50)
			if r.PerStep != nil && r.PerStep.N > 0 {
				rel += " per step"
			}
		}
		checked := "—"
		if r.Check != "" {
			checked = fmt.Sprintf("%d: %s", r.Checked, r.Check)
		}
		n, p50, p95, p99, mx := "0", "—", "—", "—", "—"
		if s != nil {
			n, mx = fmt.Sprint(s.N), num(s.Max)
			p50, p95, p99 = statCells(s)
		}
		t.add(code(r.Kind), r.What, n, p50, p95, p99, mx, perStep, rel, checked, fmt.Sprint(r.Failures))
		if s == nil {
			a.missing("bench/workflow `%s`: no measured run in workflow.json.", r.Kind)
		}
	}
	return t
}

// wfGoals judges the chain and the retry against the baseline.
func wfGoals(b *strings.Builder, f *schema.Workflow, a *analysis, base *stats.Summary, chainFig, retryFig string) {
	light, none := f.Row(schema.WorkflowChainLight), f.Row(schema.WorkflowChainNone)
	retry, scratch := wfStats(f.Row(schema.WorkflowRetry)), wfStats(f.Row(schema.WorkflowScratch))
	baseCells := func(s *stats.Summary) (string, string, string) {
		p50, p95, p99 := statCells(s)
		return p50 + " ms", p95 + " ms", p99 + " ms"
	}
	if base != nil {
		p50, p95, p99 := baseCells(base)
		a.row(headRow{Figure: "workflow: baseline, cold API create → first exec of the steps' command (no pool)", Goal: "—", P50: p50, P95: p95, P99: p99, Ratio: "—", Result: "—"})
	}

	// The chain: per step against the baseline.
	steps := f.Config.ChainSteps
	if light != nil && light.PerStep != nil && light.PerStep.N > 0 && base != nil {
		ps := light.PerStep
		r := ps.P50 / base.P50
		met := a.goalFig("workflow.chain-light.per_step.ratio_to_baseline", fmt.Sprintf("workflow: %d-step chain from snapshots, per-step p50 / cold create → first exec p50", steps), "×", r, "lower", goalWfChain)
		p50, p95, p99 := baseCells(ps)
		a.row(headRow{Figure: fmt.Sprintf("%s (%d steps, submit → succeeded, / %d)", chainFig, steps, steps), Goal: "p50 ≤ 1.5× cold create → first exec",
			P50: p50, P95: p95, P99: p99, Ratio: "per step / baseline " + ratio(r), Result: verdict(met)})
		fmt.Fprintf(b, "- **Chain**: %d steps, each from its predecessor's light snapshot, took %s ms at p50 from the submit to the run's success: %s ms per step, %s the cold create → first exec of the same daemon (%s ms). The goal (per step ≤ 1.5×) is %s.\n",
			steps, num(light.Stats.P50), num(ps.P50), ratio(r), num(base.P50), strings.Trim(verdict(met), "*"))
		if none != nil && none.PerStep != nil && none.PerStep.N > 0 {
			n := none.PerStep.P50
			a.fig("workflow.chain-none.per_step.ratio_to_baseline", fmt.Sprintf("workflow: %d-step chain without snapshots, per-step p50 / cold create → first exec p50", steps), "×", n/base.P50, "lower")
			fmt.Fprintf(b, "- Without snapshots (each step a fresh sandbox, nothing kept): %s ms per step (%s the baseline); the snapshots and the starts from them cost %s ms per step at p50.\n",
				num(n), ratio(n/base.P50), num(ps.P50-n))
		}
	} else {
		a.row(headRow{Figure: chainFig, Goal: "p50 ≤ 1.5× cold create → first exec", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not measured"})
		a.missing("bench/workflow: the chain or the baseline has no measured sample; no per-step overhead.")
	}

	// The retry: against the baseline and the scratch run.
	if retry != nil && base != nil {
		r := retry.P50 / base.P50
		met := a.goalFig("workflow.retry.ratio_to_baseline", "workflow: retry from a snapshot p50 / cold create → first exec p50", "×", r, "lower", goalWfRetry)
		rel := "/ baseline " + ratio(r)
		p50, p95, p99 := baseCells(retry)
		fmt.Fprintf(b, "- **Retry**: step %d of a %d-step chain failed and was retried from the snapshot it started from in %s ms at p50 (failed attempt's end → the step's success), %s the baseline. The goal (≤ 1×) is %s.",
			f.Config.RetrySteps, f.Config.RetrySteps, num(retry.P50), ratio(r), strings.Trim(verdict(met), "*"))
		if scratch != nil {
			rs := retry.P50 / scratch.P50
			a.fig("workflow.retry.ratio_to_scratch", "workflow: retry from a snapshot p50 / the chain run from scratch p50", "×", rs, "lower")
			rel += "; / scratch run " + ratio(rs)
			fmt.Fprintf(b, " Running the %d steps again from scratch takes %s ms at p50: the retry is %s.", f.Config.RetrySteps, num(scratch.P50), slower(retry.P50, scratch.P50))
		}
		b.WriteString("\n")
		a.row(headRow{Figure: retryFig + fmt.Sprintf(" (step %d of %d)", f.Config.RetrySteps, f.Config.RetrySteps), Goal: "p50 ≤ 1× cold create → first exec",
			P50: p50, P95: p95, P99: p99, Ratio: rel, Result: verdict(met)})
	} else {
		a.row(headRow{Figure: retryFig, Goal: "p50 ≤ 1× cold create → first exec", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not measured"})
		a.missing("bench/workflow: the retry or the baseline has no measured sample.")
	}
	if ex := wfStats(f.Row(schema.WorkflowBaselineExec)); ex != nil && base != nil {
		fmt.Fprintf(b, "- The baseline as one request (a create carrying its exec): %s ms at p50, %s the two requests of the baseline (the engine makes this one per step).\n", num(ex.P50), ratio(ex.P50/base.P50))
	}
}

// wfPhases writes the phases of the chain's and the retry's steps.
func wfPhases(b *strings.Builder, f *schema.Workflow) {
	for _, kind := range []string{schema.WorkflowChainLight, schema.WorkflowChainNone, schema.WorkflowRetry} {
		r := f.Row(kind)
		if r == nil || len(r.Phases) == 0 {
			continue
		}
		fmt.Fprintf(b, "\nWhere the time of `%s` goes, between the run's events (the daemon's clock; every step of every measured run):\n\n", kind)
		t := newTable("between", ">n", ">p50 ms", ">p95 ms", ">max ms")
		for _, p := range r.Phases {
			if p.Stats == nil || p.Stats.N == 0 {
				continue
			}
			t.add(p.Name, fmt.Sprint(p.Stats.N), num(p.Stats.P50), num(p.Stats.P95), num(p.Stats.Max))
		}
		b.WriteString(t.String())
	}
}

// wfFairness writes the fairness runs and judges the worst complete one.
func wfFairness(b *strings.Builder, f *schema.Workflow, a *analysis, groupFig, shareFig string) {
	fa := f.Fairness
	notMeasured := func(why string) {
		a.row(headRow{Figure: groupFig, Goal: "within ±5% of the budget", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: why})
		a.row(headRow{Figure: shareFig, Goal: "within ±5% of fair", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: why})
	}
	if fa == nil || len(fa.Runs) == 0 {
		notMeasured("not measured")
		a.missing("bench/workflow: no fairness run (--fair-runs 0, or the run stopped before it).")
		return
	}
	fmt.Fprintf(b, "\n**Budget fairness**: %s\n\n", oneLine(fa.Method))
	t := newTable("run", "state", ">ready s", ">all spinning after ms", ">reported", ">late", ">group CPUs in the window", ">group CPUs from the results",
		">machine busy (other processes)", ">rate deviation max", ">p95", "result")
	var worst *schema.WorkflowFairRun
	worstScore := -1.0
	for i := range fa.Runs {
		r := &fa.Runs[i]
		complete := r.State == "succeeded" && r.Reported == fa.Steps && r.GroupCPUs > 0
		res := "incomplete"
		if complete {
			gd := math.Abs(r.GroupCPUs/fa.CPUs-1) * 100
			res = verdict(goalWfGroup.met(gd) && goalWfShare.met(r.MaxDevPct))
			if score := math.Max(gd, r.MaxDevPct); score > worstScore {
				worst, worstScore = r, score
			}
		}
		t.add(code(orDash(r.Run)), orDash(r.State), fmt.Sprintf("%.2f", r.ReadySec), num(r.SpinSpreadMs), fmt.Sprint(r.Reported), fmt.Sprint(r.Late),
			fmt.Sprintf("%.3f (%s)", r.GroupCPUs, pct((r.GroupCPUs/fa.CPUs-1)*100)), fmt.Sprintf("%.3f", r.APIGroupCPUs), hostCell(r),
			fmt.Sprintf("%.1f%%", r.MaxDevPct), fmt.Sprintf("%.1f%%", r.P95DevPct), res)
	}
	b.WriteString(t.String())
	if worst == nil {
		notMeasured("not measured: no complete run")
		a.missing("bench/workflow: no fairness run completed (every step succeeded and reported); see its errors.")
		return
	}
	gd := math.Abs(worst.GroupCPUs/fa.CPUs-1) * 100
	a.fig("workflow.fair.group_cpus", fmt.Sprintf("workflow: %d steps under budget.cpus %s, the group's CPUs in the window", fa.Steps, trimNum(fa.CPUs)), "CPUs", worst.GroupCPUs, "")
	gMet := a.goalFig("workflow.fair.group_dev_pct", "workflow: the group's CPU against its budget, |deviation|", "%", gd, "lower", goalWfGroup)
	sMet := a.goalFig("workflow.fair.max_dev_pct", "workflow: a step's CPU share against fair, largest |deviation|", "%", worst.MaxDevPct, "lower", goalWfShare)
	a.fig("workflow.fair.p95_dev_pct", "workflow: a step's CPU share against fair, p95 |deviation|", "%", worst.P95DevPct, "lower")
	a.fig("workflow.fair.spin_spread_ms", "workflow: fairness steps, the last one spinning after the start", "ms", worst.SpinSpreadMs, "lower")
	a.fig("workflow.fair.late", "workflow: fairness steps that began to spin after the measurement's start", "steps", float64(worst.Late), "lower")
	runs := ""
	if len(fa.Runs) > 1 {
		runs = fmt.Sprintf(", the worst of %d runs", len(fa.Runs))
	}
	a.row(headRow{Figure: fmt.Sprintf("%s (%d steps, budget.cpus %s, %s s window%s)", groupFig, fa.Steps, trimNum(fa.CPUs), trimNum(fa.WindowSec), runs),
		Goal: "within ±5% of the budget", P50: fmt.Sprintf("%.3f CPUs", worst.GroupCPUs), P95: "—", P99: "—",
		Ratio: "of the budget " + pct((worst.GroupCPUs/fa.CPUs-1)*100), Result: verdict(gMet)})
	a.row(headRow{Figure: fmt.Sprintf("%s (1/%d)%s", shareFig, fa.Steps, runs), Goal: "within ±5% of fair",
		P50: fmt.Sprintf("max %.1f%%", worst.MaxDevPct), P95: fmt.Sprintf("%.1f%%", worst.P95DevPct), P99: "—", Ratio: "—", Result: verdict(sMet)})

	fmt.Fprintf(b, "\n- The group used %.3f CPUs in the window against a budget of %s (%s; goal within ±5%%: %s); each step's rate deviated from a fair one (1/%d of the group's) by at most %.1f%%, %.1f%% at p95 (goal within ±5%%: %s)%s.\n",
		worst.GroupCPUs, trimNum(fa.CPUs), pct((worst.GroupCPUs/fa.CPUs-1)*100), strings.Trim(verdict(gMet), "*"),
		fa.Steps, worst.MaxDevPct, worst.P95DevPct, strings.Trim(verdict(sMet), "*"), runs)
	if len(worst.Steps) > 0 {
		lo, hi := worst.Steps[0], worst.Steps[0]
		for _, s := range worst.Steps {
			if s.CPUs < lo.CPUs {
				lo = s
			}
			if s.CPUs > hi.CPUs {
				hi = s
			}
		}
		fair := worst.GroupCPUs / float64(len(worst.Steps))
		fmt.Fprintf(b, "- CPU rate per step in the window: fair %.5f CPUs (%s ms of CPU over %s s); least %.5f (`%s`), most %.5f (`%s`).\n",
			fair, num(fair*fa.WindowSec*1000), trimNum(fa.WindowSec), lo.CPUs, lo.ID, hi.CPUs, hi.ID)
	}
	if len(worst.HostCPUBusy) > 0 {
		fmt.Fprintf(b, "- In the window the machine's CPUs were busy %s; other processes than the group's used %.3f CPUs.", busyList(worst.HostCPUBusy), worst.OtherCPUs)
		if worst.GroupCPUs < fa.CPUs*0.95 && worst.OtherCPUs > 0.05 {
			b.WriteString(" The group fell short of its budget while other processes ran: a budget smaller than the machine is confined to its share of the CPUs, which it shares with whatever else runs there, so this figure needs a quiet machine.")
		}
		b.WriteString("\n")
		a.fig("workflow.fair.other_cpus", "workflow: other processes' CPUs during the fairness window", "CPUs", worst.OtherCPUs, "lower")
	}
	fmt.Fprintf(b, "- Every sandbox was ready %.2f s after the submit; the last step began to spin %s ms after the common start (waking %d sleepers inside one budget).\n",
		worst.ReadySec, num(worst.SpinSpreadMs), fa.Steps)
	fmt.Fprintf(b, "- From the steps' results (cpu_user_ms + cpu_sys_ms of each whole process, its shell's start, its sleep and the settling included) the group used %.3f CPUs from the start to the end.\n", worst.APIGroupCPUs)
	if worst.Late > 0 {
		fmt.Fprintf(b, "- **%d step(s) began to spin after the measurement's start**: not every step ran through the window, which skews the rates; a larger --fair-lead (the last sandbox was ready %.2f s after the submit, the start was %s s after it) or --fair-settle avoids it.\n",
			worst.Late, worst.ReadySec, trimNum(fa.LeadSec))
		a.missing("bench/workflow fairness: %d step(s) began to spin late; the rates are skewed by it.", worst.Late)
	}
	for _, r := range fa.Runs {
		if r.Error != "" {
			fmt.Fprintf(b, "- Run %s: %s\n", orDash(r.Run), code(firstN(r.Error, 300)))
		}
	}
}

// wfPlot draws the per-step distributions against the baseline, with
// the goals as ticks.
func wfPlot(sec *section, f *schema.Workflow, base *stats.Summary, plots *plotSet, a *analysis) {
	var rows []BoxRow
	add := func(kind, label string, perStep bool, g *goal) {
		r := f.Row(kind)
		if r == nil || len(r.Samples) == 0 {
			return
		}
		xs := r.Samples
		if perStep && r.Steps > 0 {
			xs = make([]float64, len(r.Samples))
			for i, v := range r.Samples {
				xs[i] = v / float64(r.Steps)
			}
		}
		br := BoxRow{Label: label, Samples: xs}
		if g != nil && base != nil {
			br.Goal = g.target * base.P50
		}
		rows = append(rows, br)
	}
	add(schema.WorkflowBaseline, "baseline: create → exec", false, nil)
	add(schema.WorkflowBaselineExec, "create carrying the exec", false, nil)
	add(schema.WorkflowChainLight, "chain from snapshots, per step", true, &goalWfChain)
	add(schema.WorkflowChainNone, "chain without snapshots, per step", true, nil)
	add(schema.WorkflowRetry, "retry from the snapshot", false, &goalWfRetry)
	add(schema.WorkflowScratch, "the "+strconv.Itoa(f.Config.RetrySteps)+" steps from scratch", false, nil)
	if len(rows) == 0 {
		a.missing("The bench/workflow plot: workflow.json holds no samples.")
		return
	}
	ref := plots.add(sec, &BoxPlot{Name: "workflow", Title: "Workflows against one cold create → first exec (bench/workflow)",
		XLabel: "ms (log scale); red tick: the row's goal (p50), from the baseline's p50", Rows: rows, Log: true},
		"Workflow step overhead and retry against the cold create → first exec")
	ref.Note = boxNote + goalNote
}

// hostCell is a fairness run's machine load: its CPUs' busy fractions and
// the other processes' CPUs.
func hostCell(r *schema.WorkflowFairRun) string {
	if len(r.HostCPUBusy) == 0 {
		return "—"
	}
	return fmt.Sprintf("%s (%.3f)", busyList(r.HostCPUBusy), r.OtherCPUs)
}

// busyList writes per-CPU busy fractions: "cpu0 100%, cpu1 35%".
func busyList(busy []float64) string {
	parts := make([]string, len(busy))
	for i, v := range busy {
		parts[i] = fmt.Sprintf("cpu%d %.0f%%", i, v*100)
	}
	return strings.Join(parts, ", ")
}
