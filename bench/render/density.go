package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

func densitySection(in *Inputs, a *analysis, plots *plotSet) *section {
	sec := &section{Bench: "density", File: "density.json"}
	a.grp, a.bench = gDensity, "density"
	f := in.Density
	if f == nil {
		a.missing("Density and scaling (bench/density): not run in this invocation (no density.json): no live-sandbox count, memory per sandbox or start latency under load.")
		a.row(headRow{Figure: "density: live sandboxes held at once", Goal: goalDensityLive.String(), P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		a.row(headRow{Figure: "density: moat memory (PSS) per live sandbox", Goal: "< 2 MiB", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		a.grp = gScaling
		a.row(headRow{Figure: "scaling: start latency vs live sandboxes", Goal: "—", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		return sec
	}
	sec.Ran = true
	sec.Meta = fmt.Sprintf("Run: commit %s, %s, load average %s at its start and %s at its end; levels %s, %d samples per level after %d warm-up. Command: %s; daemon: %s.",
		orDash(f.Commit), orDash(f.Date), orDash(loadAvg(f.LoadAvgStart)), orDash(loadAvg(f.LoadAvgEnd)),
		strings.Trim(strings.Join(strings.Fields(fmt.Sprint(f.Config.Levels)), ", "), "[]"), f.Rounds, f.Warmup,
		code(f.Command), code(f.Daemon.Command))

	d := f.Density
	gLive, gPSS := goalDensityLive, goalDensityPSS
	var b strings.Builder

	// The density goal: sandboxes held, and moat's memory per sandbox.
	liveMet := a.goalFig("density.live", "density: most live sandboxes held at once", "sandboxes", float64(d.Live), "higher", gLive)
	a.row(headRow{Figure: "density: live sandboxes held at once", Goal: gLive.String(), P50: fmt.Sprint(d.Live), P95: "—", P99: "—",
		Ratio: "of the goal " + ratio(float64(d.Live)/gLive.target), Result: verdict(liveMet)})
	pssKnown := d.MoatPSSPerSandboxKiB > 0
	pssMet := false
	if pssKnown {
		pssMet = a.goalFig("density.moat_pss_per_sandbox_kib", fmt.Sprintf("density: moat PSS per sandbox at %d live", d.Live), "KiB", d.MoatPSSPerSandboxKiB, "lower", gPSS)
		a.row(headRow{Figure: fmt.Sprintf("density: moat memory (PSS) per sandbox at %d live", d.Live),
			Goal: fmt.Sprintf("< %s MiB (%s KiB)", trimNum(gPSS.target/1024), trimNum(gPSS.target)),
			P50:  fmt.Sprintf("%s KiB (%s MiB)", num(d.MoatPSSPerSandboxKiB), mib(d.MoatPSSPerSandboxKiB)), P95: "—", P99: "—",
			Ratio: "of the goal " + ratio(d.MoatPSSPerSandboxKiB/gPSS.target), Result: verdict(pssMet)})
	} else {
		a.missing("bench/density recorded no memory per sandbox.")
	}
	both := liveMet && pssMet
	fmt.Fprintf(&b, "**%d live idle sandboxes held at once**", d.Live)
	if pssKnown {
		fmt.Fprintf(&b, "; moat's memory %s KiB (%s MiB) PSS per sandbox there", num(d.MoatPSSPerSandboxKiB), mib(d.MoatPSSPerSandboxKiB))
	}
	fmt.Fprintf(&b, ". The goal (≥ %s sandboxes at < %s KiB each) is %s.\n\n", trimNum(gLive.target), trimNum(gPSS.target), strings.Trim(verdict(both), "*"))

	// Levels.
	t := newTable(">live", ">fill s", ">create p50 ms", ">create → echo p50 / p95 / p99 ms", ">`moat run` p50 / p95 / p99 ms",
		">moat PSS KiB / sandbox", ">of which inits", ">system KiB / sandbox", ">kernel KiB / sandbox", ">threads / sandbox")
	three := func(s *stats.Summary) string {
		p50, p95, p99 := statCells(s)
		return p50 + " / " + p95 + " / " + p99
	}
	var first *schema.DensityLevel
	for i := range f.Levels {
		lv := &f.Levels[i]
		mm := lv.Memory
		create := "—"
		if lv.Create != nil && lv.Create.N > 0 {
			create = num(lv.Create.P50)
		}
		t.add(fmt.Sprint(lv.Live), num(lv.FillSec), create, three(lv.TTI), three(lv.Run),
			num(mm.MoatPSSPerSandboxKiB), num(mm.InitPSSPerSandboxKiB), num(mm.SystemPerSandboxKiB), num(mm.KernelPerSandboxKiB),
			fmt.Sprintf("%.1f", mm.ThreadsPerSandbox))

		id := fmt.Sprintf("density.L%d", lv.Live)
		a.statFigs(id+".tti", fmt.Sprintf("create → echo at %d live", lv.Live), "ms", lv.TTI)
		a.statFigs(id+".run", fmt.Sprintf("moat run at %d live", lv.Live), "ms", lv.Run)
		a.fig(id+".moat_pss_per_sandbox_kib", fmt.Sprintf("moat PSS per sandbox at %d live", lv.Live), "KiB", mm.MoatPSSPerSandboxKiB, "lower")
		a.fig(id+".system_per_sandbox_kib", fmt.Sprintf("system memory per sandbox at %d live", lv.Live), "KiB", mm.SystemPerSandboxKiB, "lower")
		a.fig(id+".kernel_per_sandbox_kib", fmt.Sprintf("kernel memory per sandbox at %d live", lv.Live), "KiB", mm.KernelPerSandboxKiB, "lower")

		// Headline: scaling, one row per level and kind.
		a.grp = gScaling
		for _, k := range []struct {
			what string
			s    *stats.Summary
			base func(*schema.DensityLevel) *stats.Summary
		}{
			{"create → first `echo` (API)", lv.TTI, func(l *schema.DensityLevel) *stats.Summary { return l.TTI }},
			{"`moat run -- /bin/true`", lv.Run, func(l *schema.DensityLevel) *stats.Summary { return l.Run }},
		} {
			fig := fmt.Sprintf("scaling: %s at %d live", k.what, lv.Live)
			if k.s == nil || k.s.N == 0 {
				a.row(headRow{Figure: fig, Goal: "—", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not measured"})
				continue
			}
			r := "—"
			if first != nil && first != lv {
				if bs := k.base(first); bs != nil && bs.P50 > 0 {
					r = fmt.Sprintf("vs %d live %s", first.Live, ratio(k.s.P50/bs.P50))
				}
			}
			a.row(headRow{Figure: fig, Goal: "—", P50: num(k.s.P50) + " ms", P95: num(k.s.P95) + " ms", P99: num(k.s.P99) + " ms", Ratio: r, Result: "—"})
		}
		if first == nil {
			first = lv
		}
	}
	if len(f.Levels) > 0 {
		a.grp = gDensity
		last := f.Levels[len(f.Levels)-1]
		a.row(headRow{Figure: fmt.Sprintf("density: system memory per sandbox at %d live (MemAvailable's fall, kernel included)", last.Live),
			Goal: "—", P50: fmt.Sprintf("%s KiB (%s MiB)", num(last.Memory.SystemPerSandboxKiB), mib(last.Memory.SystemPerSandboxKiB)),
			P95: "—", P99: "—", Ratio: fmt.Sprintf("kernel %s KiB of it", num(last.Memory.KernelPerSandboxKiB)), Result: "—"})
	}
	b.WriteString(t.String())
	b.WriteString("\n")
	for _, want := range f.Config.Levels {
		if !slices.ContainsFunc(f.Levels, func(l schema.DensityLevel) bool { return l.Live == want }) {
			msg := fmt.Sprintf("bench/density level %d live: not reached in this run", want)
			if len(f.Errors) > 0 {
				msg += "; first error: " + code(firstN(f.Errors[0], 200))
			}
			a.missing("%s.", msg)
			fmt.Fprintf(&b, "- Level %d: not reached.\n", want)
		}
	}
	if p := d.Projection; p != nil {
		limits := maps.Clone(p.Limits)
		if limits == nil {
			limits = map[string]int{}
		}
		names := slices.Sorted(maps.Keys(limits))
		slices.SortStableFunc(names, func(x, y string) int { return limits[x] - limits[y] })
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %d", n, limits[n]))
			a.fig("density.projection."+n, "projected sandboxes allowed by "+n+" (estimate)", "sandboxes", float64(limits[n]), "higher")
		}
		max := p.Max
		if max == 0 && len(names) > 0 {
			max = limits[names[0]]
		}
		if max > 0 {
			fmt.Fprintf(&b, "- Projection (bench/density's estimate from the costs measured at %d live, not a measurement): about %d sandboxes, bound first by %s (%s).\n",
				d.Live, max, orDash(p.Limit), strings.Join(parts, ", "))
		}
	}
	if td := f.Teardown; td != nil && td.Deleted > 0 {
		p50, p95, _ := statCells(td.Delete)
		fmt.Fprintf(&b, "- Teardown: %d sandboxes deleted in %.1f s (delete p50 %s ms, p95 %s ms).\n", td.Deleted, td.Sec, p50, p95)
	}
	if sv := f.Daemon; sv.Command != "" {
		fmt.Fprintf(&b, "- Daemon: SIGTERM → exit in %s ms, exited 0: %v; %d log lines, %d at WARN or ERROR.\n", num(sv.StopMs), sv.ExitedOK, sv.LogLines, sv.LogProblems)
		for _, l := range sv.FirstProblems {
			fmt.Fprintf(&b, "  - %s\n", code(firstN(l, 300)))
		}
	}
	if f.Failed || len(f.Errors) > 0 {
		fmt.Fprintf(&b, "\n**bench/density reported %d failure(s)**:\n\n", len(f.Errors))
		for _, e := range f.Errors {
			fmt.Fprintf(&b, "- %s\n", code(firstN(e, 300)))
		}
		a.missing("bench/density reported failures (see its section): its figures may be incomplete.")
	}
	sec.Body = b.String()

	// Plots: latency and memory against the live count.
	var lat, mem []Series
	add := func(ss *[]Series, name string, dash bool, color int, y func(*schema.DensityLevel) (float64, bool)) {
		s := Series{Name: name, Dashed: dash, Color: color}
		for i := range f.Levels {
			if v, ok := y(&f.Levels[i]); ok && f.Levels[i].Live > 0 {
				s.X = append(s.X, float64(f.Levels[i].Live))
				s.Y = append(s.Y, v)
			}
		}
		if len(s.X) > 0 {
			*ss = append(*ss, s)
		}
	}
	st := func(get func(*schema.DensityLevel) *stats.Summary, q func(*stats.Summary) float64) func(*schema.DensityLevel) (float64, bool) {
		return func(l *schema.DensityLevel) (float64, bool) {
			if s := get(l); s != nil && s.N > 0 {
				return q(s), true
			}
			return 0, false
		}
	}
	tti := func(l *schema.DensityLevel) *stats.Summary { return l.TTI }
	run := func(l *schema.DensityLevel) *stats.Summary { return l.Run }
	p50 := func(s *stats.Summary) float64 { return s.P50 }
	p95 := func(s *stats.Summary) float64 { return s.P95 }
	add(&lat, "create → echo (API), p50", false, 1, st(tti, p50))
	add(&lat, "create → echo (API), p95", true, 1, st(tti, p95))
	add(&lat, "moat run -- /bin/true, p50", false, 2, st(run, p50))
	add(&lat, "moat run -- /bin/true, p95", true, 2, st(run, p95))
	positive := func(get func(*schema.DensityLevel) float64) func(*schema.DensityLevel) (float64, bool) {
		return func(l *schema.DensityLevel) (float64, bool) { v := get(l) / 1024; return v, v > 0 }
	}
	add(&mem, "moat PSS per sandbox (its processes + daemon growth)", false, 1, positive(func(l *schema.DensityLevel) float64 { return l.Memory.MoatPSSPerSandboxKiB }))
	add(&mem, "system per sandbox (MemAvailable's fall, kernel included)", false, 2, positive(func(l *schema.DensityLevel) float64 { return l.Memory.SystemPerSandboxKiB }))
	add(&mem, "kernel per sandbox (slab, stacks, page tables)", false, 3, positive(func(l *schema.DensityLevel) float64 { return l.Memory.KernelPerSandboxKiB }))
	if len(lat) > 0 {
		plots.add(sec, &LinePlot{Name: "scaling", Title: "Start latency vs live sandboxes (bench/density)",
			XLabel: "live idle sandboxes (log scale)", YLabel: "start latency, ms", Series: lat, LogX: true,
			HLine: goalTTI.target, HLineLabel: "goal: create → echo p50 < " + trimNum(goalTTI.target) + " ms"},
			"Start latency (p50 and p95 of create → echo and of moat run) against the number of live sandboxes")
	} else {
		a.missing("The scaling plot: density.json holds no latency per level.")
	}
	if len(mem) > 0 {
		plots.add(sec, &LinePlot{Name: "memory", Title: "Memory per sandbox vs live sandboxes (bench/density)",
			XLabel: "live idle sandboxes (log scale)", YLabel: "MiB per sandbox", Series: mem, LogX: true,
			HLine: gPSS.target / 1024, HLineLabel: fmt.Sprintf("goal: moat PSS < %s MiB", trimNum(gPSS.target/1024)), YFromZero: true},
			"Memory per sandbox against the number of live sandboxes, with the goal")
	} else {
		a.missing("The memory plot: density.json holds no memory per level.")
	}
	return sec
}
