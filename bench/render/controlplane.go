package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/bench/schema"
)

// modeKey turns a row's mode ("sequential", "bursts of 10") into the
// part of a figure ID: "sequential", "bursts".
func modeKey(mode string) string {
	if strings.HasPrefix(mode, "burst") {
		return "bursts"
	}
	if mode == "" {
		return "sequential"
	}
	return strings.ReplaceAll(mode, " ", "_")
}

// controlplaneSection computes bench/controlplane's figures: time to
// interactive through the API and its references, the exec round trip,
// the soak and memory.
func controlplaneSection(in *Inputs, a *analysis, plots *plotSet) *section {
	sec := &section{Bench: "controlplane", File: "controlplane.json"}
	a.grp, a.bench = gTTI, "controlplane"
	f := in.Controlplane
	if f == nil {
		a.missing("Time to interactive through the API, the exec round trip and the soak (bench/controlplane): not run in this invocation (no controlplane.json).")
		for _, fig := range []string{"time to interactive (API), sequential", "time to interactive (API), bursts"} {
			a.row(headRow{Figure: fig, Goal: goalTTI.String(), P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		}
		a.grp = gExec
		a.row(headRow{Figure: "exec round trip in an existing sandbox", Goal: goalExec.String(), P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		return sec
	}
	sec.Ran = true
	c := f.Config
	sec.Meta = fmt.Sprintf("Run: commit %s, %s, load average %s at its start and %s at its end; %d sequential samples after %d warm-up rounds, "+
		"%d burst(s) of %d, %d exec calls, soak of %d sandboxes for %.0f s; %.0f s in all. Command: %s; daemon: %s.",
		orDash(f.Commit), orDash(f.Date), orDash(loadAvg(f.LoadAvgStart)), orDash(loadAvg(f.LoadAvgEnd)),
		f.Rounds, f.Warmup, c.Bursts, c.Burst, c.ExecCalls, c.SoakSandboxes, c.SoakSec, f.DurationSec,
		code(f.Command), code(f.Daemon.Command))

	var b strings.Builder
	// Time to interactive.
	t := newTable("mode", "row", ">n", ">p50 ms", ">p95 ms", ">p99 ms", ">mean ms", ">p50 / bwrap p50", ">p50 / moat run p50", "note")
	for i := range f.TTI {
		r := &f.TTI[i]
		name := r.Name
		if r.Kind == schema.KindAPI {
			name = "**" + name + "**"
		}
		if r.Stats == nil || r.Stats.N == 0 {
			note := "no successful sample"
			if r.SkippedReason != "" {
				note = "skipped: " + oneLine(r.SkippedReason)
				a.missing("bench/controlplane %s, %s: skipped: %s.", r.Name, r.Mode, strings.TrimSuffix(oneLine(r.SkippedReason), "."))
			} else {
				a.missing("bench/controlplane %s, %s: no successful sample (%d failed).", r.Name, r.Mode, r.Failed)
			}
			t.add(r.Mode, name, "0", "—", "—", "—", "—", "—", "—", note)
			continue
		}
		s := r.Stats
		rb, rm := "—", "—"
		if bw := schema.Row(f.TTI, r.Mode, schema.KindBwrap); bw != nil && bw.Stats != nil && bw.Stats.P50 > 0 {
			rb = ratio(s.P50 / bw.Stats.P50)
		}
		if mr := schema.Row(f.TTI, r.Mode, schema.KindRun); mr != nil && mr.Stats != nil && mr.Stats.P50 > 0 {
			rm = ratio(s.P50 / mr.Stats.P50)
		}
		note := ""
		if r.Failed > 0 {
			note = fmt.Sprintf("%d failed sample(s)", r.Failed)
		}
		t.add(r.Mode, name, fmt.Sprint(s.N), num(s.P50), num(s.P95), num(s.P99), num(s.Mean), rb, rm, note)

		id := "controlplane.tti." + modeKey(r.Mode) + "." + r.Kind
		a.statFigs(id, "time to interactive, "+r.Name+", "+r.Mode, "ms", s)
		if r.Create != nil {
			a.fig(id+".create.p50_ms", "time to interactive, "+r.Name+", "+r.Mode+": create call, p50", "ms", r.Create.P50, "lower")
		}
		if r.FirstExec != nil {
			a.fig(id+".first_exec.p50_ms", "time to interactive, "+r.Name+", "+r.Mode+": first exec, p50", "ms", r.FirstExec.P50, "lower")
		}
	}
	b.WriteString("### Time to interactive\n\n")
	b.WriteString(t.String())
	b.WriteString("\n")
	for _, r := range f.TTI {
		if r.Create != nil && r.FirstExec != nil {
			fmt.Fprintf(&b, "- %s, %s: create p50 %s ms (p99 %s), first echo p50 %s ms (p99 %s).\n", r.Name, r.Mode,
				num(r.Create.P50), num(r.Create.P99), num(r.FirstExec.P50), num(r.FirstExec.P99))
		}
	}
	if bu := f.Bursts; bu != nil && bu.Makespan != nil && bu.Makespan.N > 0 {
		fmt.Fprintf(&b, "- Burst makespan (start of a burst of %d until its last echo answered): p50 %s ms, max %s ms, %d burst(s).\n",
			bu.Size, num(bu.Makespan.P50), num(bu.Makespan.Max), bu.Makespan.N)
		a.fig("controlplane.bursts.makespan.p50_ms", fmt.Sprintf("burst of %d, makespan, p50", bu.Size), "ms", bu.Makespan.P50, "lower")
	}
	seen := map[string]bool{}
	for _, r := range f.TTI {
		if r.Command != "" && !seen[r.Name] {
			seen[r.Name] = true
			fmt.Fprintf(&b, "- %s: %s\n", r.Name, code(r.Command))
		}
	}
	b.WriteString("\n")

	for _, k := range []struct{ kind, what string }{{schema.KindBwrap, "bubblewrap"}, {schema.KindRun, "`moat run`"}} {
		if !slices.ContainsFunc(f.TTI, func(r schema.ControlplaneRow) bool { return r.Kind == k.kind }) {
			a.missing("bench/controlplane's one-shot %s reference: not in this run (bench/controlplane `--refs=false`, or the system is missing).", k.what)
		}
	}

	// Headline: the API's rows.
	for _, r := range f.TTI {
		if r.Kind != schema.KindAPI {
			continue
		}
		fig := "time to interactive (API create → first `echo`), " + r.Mode
		if r.Stats == nil || r.Stats.N == 0 {
			a.row(headRow{Figure: fig, Goal: goalTTI.String(), P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not measured: no successful sample"})
			continue
		}
		s := r.Stats
		met := a.setGoal("controlplane.tti."+modeKey(r.Mode)+".api.p50_ms", goalTTI)
		var ratios []string
		if bw := schema.Row(f.TTI, r.Mode, schema.KindBwrap); bw != nil && bw.Stats != nil && bw.Stats.P50 > 0 {
			ratios = append(ratios, "API / bwrap one-shot "+ratio(s.P50/bw.Stats.P50))
		}
		if mr := schema.Row(f.TTI, r.Mode, schema.KindRun); mr != nil && mr.Stats != nil && mr.Stats.P50 > 0 {
			ratios = append(ratios, "API / `moat run` "+ratio(s.P50/mr.Stats.P50))
		}
		a.row(headRow{Figure: fig, Goal: goalTTI.String(), P50: num(s.P50) + " ms", P95: num(s.P95) + " ms", P99: num(s.P99) + " ms",
			Ratio: orDash(strings.Join(ratios, "; ")), Result: verdict(met)})
		if bw := schema.Row(f.TTI, r.Mode, schema.KindBwrap); r.Mode == "sequential" && bw != nil && bw.Stats != nil && bw.Stats.P50 > 0 {
			rr := s.P50 / bw.Stats.P50
			met := a.goalFig("controlplane.tti.sequential.api.ratio_to_bwrap", "API create (no pool) → first `echo`, p50 / bwrap p50", "×", rr, "lower", goalAPIBwrap)
			a.row(headRow{Figure: "API create (no pool) → first `echo` / bwrap", Goal: goalAPIBwrap.String(), P50: num(s.P50) + " ms", P95: num(s.P95) + " ms", P99: num(s.P99) + " ms",
				Ratio: ratio(rr), Result: verdict(met)})
		}
	}
	// The create that carries its first exec, against bubblewrap: the
	// same goal as the two calls (the figure the goal is about, in one
	// request).
	if r := schema.Row(f.TTI, "sequential", schema.KindAPIExec); r != nil && r.Stats != nil && r.Stats.N > 0 {
		if bw := schema.Row(f.TTI, "sequential", schema.KindBwrap); bw != nil && bw.Stats != nil && bw.Stats.P50 > 0 {
			s := r.Stats
			rr := s.P50 / bw.Stats.P50
			met := a.goalFig("controlplane.tti.sequential.api-create-exec.ratio_to_bwrap", "API create carrying its first `echo`, p50 / bwrap p50", "×", rr, "lower", goalAPIBwrap)
			a.row(headRow{Figure: "API create carrying its first `echo` (one request) / bwrap", Goal: goalAPIBwrap.String(), P50: num(s.P50) + " ms", P95: num(s.P95) + " ms", P99: num(s.P99) + " ms",
				Ratio: ratio(rr), Result: verdict(met)})
		}
	}
	// The warm claim, against a bare fork+exec of /bin/true.
	if w := schema.Row(f.TTI, "sequential", schema.KindWarm); w != nil && w.Stats != nil && w.Stats.N > 0 && w.RatioToBareTrue != nil {
		s := w.Stats
		met := a.goalFig("controlplane.tti.sequential.api-warm.ratio_to_bare_true", "warm-pool claim → first `echo`, p50 / bare `/bin/true` p50", "×", *w.RatioToBareTrue, "lower", goalWarmBare)
		a.row(headRow{Figure: "warm-pool claim → first `echo` (API) / bare `/bin/true`", Goal: goalWarmBare.String(), P50: num(s.P50) + " ms", P95: num(s.P95) + " ms", P99: num(s.P99) + " ms",
			Ratio: ratio(*w.RatioToBareTrue), Result: verdict(met)})
	}

	// Exec round trip.
	a.grp = gExec
	if r := f.Exec; r != nil && r.Stats != nil && r.Stats.N > 0 {
		s := r.Stats
		a.statFigs("controlplane.exec", "exec round trip", "ms", s)
		met := a.setGoal("controlplane.exec.p50_ms", goalExec)
		a.row(headRow{Figure: "exec round trip (`echo` in an existing sandbox)", Goal: goalExec.String(),
			P50: num(s.P50) + " ms", P95: num(s.P95) + " ms", P99: num(s.P99) + " ms", Ratio: "—", Result: verdict(met)})
		if r.RatioToBareTrue != nil {
			met := a.goalFig("controlplane.exec.ratio_to_bare_true", "exec round trip, p50 / bare `/bin/true` p50", "×", *r.RatioToBareTrue, "lower", goalExecBare)
			a.row(headRow{Figure: "exec round trip / bare `/bin/true`", Goal: goalExecBare.String(),
				P50: num(s.P50) + " ms", P95: num(s.P95) + " ms", P99: num(s.P99) + " ms", Ratio: ratio(*r.RatioToBareTrue), Result: verdict(met)})
		}
		b.WriteString("### Exec round trip\n\n")
		et := newTable(">n", ">p50 ms", ">p95 ms", ">p99 ms", ">mean ms", ">min ms", ">max ms")
		et.add(fmt.Sprint(s.N), num(s.P50), num(s.P95), num(s.P99), num(s.Mean), num(s.Min), num(s.Max))
		b.WriteString(et.String())
		b.WriteString("\n")
	} else {
		a.missing("bench/controlplane's exec round trip: no successful call in controlplane.json.")
		a.row(headRow{Figure: "exec round trip (`echo` in an existing sandbox)", Goal: goalExec.String(), P50: "—", P95: "—", P99: "—", Ratio: "—",
			Result: "not measured: no successful call"})
	}

	// Soak.
	a.grp = gSoak
	if s := f.Soak; s != nil {
		b.WriteString("### Soak\n\n")
		st := newTable("figure", ">value")
		st.add("sandboxes driven at once", fmt.Sprint(s.Sandboxes))
		st.add("elapsed, s", fmt.Sprintf("%.1f", s.ElapsedSec))
		st.add("calls", fmt.Sprint(s.Calls))
		st.add("errors", fmt.Sprint(s.Errors))
		st.add("calls/s", fmt.Sprintf("%.1f", s.Throughput))
		if len(s.PerSecond) > 0 {
			// The last bucket holds only the file calls that followed an
			// exec started before the deadline: not a full second.
			full := s.PerSecond[:min(len(s.PerSecond), max(1, int(c.SoakSec)))]
			lo, hi := full[0].Calls, full[0].Calls
			for _, p := range full {
				lo, hi = min(lo, p.Calls), max(hi, p.Calls)
			}
			worst := s.PerSecond[0]
			for _, p := range s.PerSecond {
				if p.MaxMs > worst.MaxMs {
					worst = p
				}
			}
			st.add(fmt.Sprintf("calls started per second, min / max over its %d full seconds", len(full)), fmt.Sprintf("%d / %d", lo, hi))
			st.add("slowest call, ms (second of the soak)", fmt.Sprintf("%s (%d)", num(worst.MaxMs), worst.T))
		}
		a.fig("controlplane.soak.calls_per_s", "soak, calls per second", "calls/s", s.Throughput, "higher")
		a.goalFig("controlplane.soak.errors", "soak, failed calls", "count", float64(s.Errors), "lower", goal{"<", 1, "", ""})
		if l := s.Latency; l != nil {
			st.add("every call, p50 / p95 / p99 / max, ms", fmt.Sprintf("%s / %s / %s / %s", num(l.P50), num(l.P95), num(l.P99), num(l.Max)))
			a.fig("controlplane.soak.latency.p50_ms", "soak, every call, p50", "ms", l.P50, "lower")
			a.fig("controlplane.soak.latency.p99_ms", "soak, every call, p99", "ms", l.P99, "lower")
		}
		for _, k := range slices.Sorted(maps.Keys(s.ByKind)) {
			if l := s.ByKind[k]; l != nil {
				st.add(fmt.Sprintf("%s (n=%d), p50 / p95 / p99 / max, ms", k, l.N), fmt.Sprintf("%s / %s / %s / %s", num(l.P50), num(l.P95), num(l.P99), num(l.Max)))
			}
		}
		if l := s.Create; l != nil {
			st.add("create of the soak's sandboxes, p50 / p99, ms", fmt.Sprintf("%s / %s", num(l.P50), num(l.P99)))
		}
		if l := s.Delete; l != nil {
			st.add("their delete, p50 / p99, ms", fmt.Sprintf("%s / %s", num(l.P50), num(l.P99)))
		}
		st.add("daemon VmRSS before / peak / last, MiB", fmt.Sprintf("%s / %s / %s", mib(float64(s.DaemonRSSStartKB)), mib(float64(s.DaemonRSSPeakKB)), mib(float64(s.DaemonRSSLastKB))))
		st.add("daemon VmHWM, MiB", mib(float64(s.DaemonHWMKB)))
		a.fig("controlplane.soak.daemon_rss_peak_kib", "soak, daemon VmRSS at its peak", "KiB", float64(s.DaemonRSSPeakKB), "lower")
		st.add("sandbox processes at their peak: count, summed VmRSS MiB", fmt.Sprintf("%d, %s", s.SandboxPeakProcs, mib(float64(s.SandboxPeakRSSKB))))
		if s.SandboxEndPSSKB != nil && s.Sandboxes > 0 {
			per := float64(*s.SandboxEndPSSKB) / float64(s.Sandboxes)
			st.add("sandbox processes at the end: summed PSS MiB (per sandbox)", fmt.Sprintf("%s (%s)", mib(float64(*s.SandboxEndPSSKB)), mib(per)))
			a.fig("controlplane.soak.sandbox_pss_per_sandbox_kib", "soak, sandbox processes' PSS per sandbox at the end", "KiB", per, "lower")
		}
		b.WriteString(st.String())
		b.WriteString("\n")
		if len(s.ServerLatency) > 0 {
			b.WriteString("The daemon's own view (its `/metrics` histograms over the whole run, quantiles estimated as histogram_quantile does, ms):")
			for _, op := range slices.Sorted(maps.Keys(s.ServerLatency)) {
				q := s.ServerLatency[op]
				fmt.Fprintf(&b, " %s p50 %s, p99 %s;", op, num(q["0.5"]), num(q["0.99"]))
			}
			b.WriteString("\n\n")
		}
		for _, e := range s.FirstErrors {
			fmt.Fprintf(&b, "- soak error: %s\n", code(firstN(e, 300)))
		}
		fig := fmt.Sprintf("soak: %d sandboxes for %.0f s, every call", s.Sandboxes, s.ElapsedSec)
		p50, p95, p99 := statCells(s.Latency)
		a.row(headRow{Figure: fig, Goal: "0 errors", P50: p50 + " ms", P95: p95 + " ms", P99: p99 + " ms",
			Ratio: fmt.Sprintf("%.0f calls/s, %d calls", s.Throughput, s.Calls), Result: verdict(s.Errors == 0) + fmt.Sprintf(" (%d errors)", s.Errors)})
	} else {
		a.missing("bench/controlplane's soak: not run (`--soak 0`).")
	}

	// Memory between phases.
	if len(f.Memory) > 0 {
		b.WriteString("### Memory between phases\n\n")
		mt := newTable("phase", ">at s", ">daemon VmRSS MiB", ">daemon VmHWM MiB", ">threads", ">fds", ">sandbox procs", ">their VmRSS MiB", ">their PSS MiB")
		for _, s := range f.Memory {
			pss := "—"
			if s.SandboxPSSKB != nil {
				pss = mib(float64(*s.SandboxPSSKB))
			}
			mt.add(s.Phase, fmt.Sprintf("%.1f", s.AtSec), mib(float64(s.DaemonRSSKB)), mib(float64(s.DaemonHWMKB)), fmt.Sprint(s.DaemonThreads),
				fmt.Sprint(s.DaemonFDs), fmt.Sprint(s.SandboxProcs), mib(float64(s.SandboxRSSKB)), pss)
		}
		b.WriteString(mt.String())
		b.WriteString("\n")
	}
	d := f.Daemon
	fmt.Fprintf(&b, "Daemon: %d connections opened over the run (keep-alive); SIGTERM → exit in %s ms, exited 0: %v; %d log lines, %d at WARN or ERROR.\n",
		d.Connections, num(d.StopMs), d.ExitedOK, d.LogLines, d.LogProblems)
	if len(d.FirstProblems) > 0 {
		b.WriteString("\nThe first of them:\n\n")
	}
	for _, l := range d.FirstProblems {
		fmt.Fprintf(&b, "- %s\n", code(firstN(l, 300)))
	}
	if f.Failed {
		b.WriteString("\n**The run failed** (bench/controlplane exited non-zero):\n\n")
		for _, e := range f.Errors {
			fmt.Fprintf(&b, "- %s\n", code(firstN(e, 300)))
		}
		a.missing("bench/controlplane reported failures (see its section): its figures may be incomplete.")
	}
	sec.Body = b.String()

	// The plot: the TTI rows and the exec round trip.
	var rows []BoxRow
	for _, r := range f.TTI {
		if len(r.SamplesMs) == 0 {
			continue
		}
		br := BoxRow{Label: ttiLabel(r), Samples: r.SamplesMs}
		if r.Kind == schema.KindAPI {
			br.Goal = goalTTI.target
		}
		rows = append(rows, br)
	}
	if r := f.Exec; r != nil && len(r.SamplesMs) > 0 {
		rows = append(rows, BoxRow{Label: "exec round trip", Samples: r.SamplesMs, Goal: goalExec.target})
	}
	if len(rows) > 0 {
		ref := plots.add(sec, &BoxPlot{Name: "tti", Title: "Time to interactive and exec round trip (bench/controlplane)",
			XLabel: "ms (log scale); red tick: the goal of the row (p50)", Rows: rows, Log: true},
			"Time to interactive through the API, the one-shot references and the exec round trip")
		ref.Note = boxNote + goalNote
	} else {
		a.missing("The time-to-interactive plot: controlplane.json holds no samples.")
	}
	return sec
}

// ttiLabel names a TTI row on the plot's axis.
func ttiLabel(r schema.ControlplaneRow) string {
	name := map[string]string{schema.KindAPI: "API create→echo", schema.KindRun: "moat run echo", schema.KindBwrap: "bwrap echo", schema.KindBare: "bare echo",
		schema.KindWarm: "API warm claim→echo", schema.KindBareTrue: "bare /bin/true", schema.KindAPIExec: "API create+echo, one request"}[r.Kind]
	if name == "" {
		name = r.Name
	}
	mode := r.Mode
	if strings.HasPrefix(mode, "bursts of ") {
		mode = "burst " + strings.TrimPrefix(mode, "bursts of ")
	}
	return name + ", " + mode
}
