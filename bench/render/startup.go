package render

import (
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/bench/schema"
)

// startupPeers are the systems moat's cold start is compared with in the
// headline, in order.
var startupPeers = []struct{ name, label string }{
	{"bare", "no sandbox, `/bin/true`"},
	{"bwrap", "bubblewrap"},
	{"runc", "runc"},
	{"crun", "crun"},
	{"runsc", "gVisor `runsc`"},
}

// startupSection computes bench/startup's figures, headline rows and
// section body.
func startupSection(in *Inputs, a *analysis, plots *plotSet) *section {
	sec := &section{Bench: "startup", File: "startup.json"}
	a.grp, a.bench = gCold, "startup"
	f := in.Startup
	if f == nil {
		a.missing("Cold start (bench/startup), and with it moat against bare, bubblewrap, runc, crun and gVisor: not run in this invocation (no startup.json).")
		a.row(headRow{Figure: "cold start, `moat run -- /bin/true`", Goal: "p50 ≤ bubblewrap p50", P50: "—", P95: "—", P99: "—", Ratio: "—",
			Result: "not run in this invocation"})
		return sec
	}
	sec.Ran = true
	sec.Meta = fmt.Sprintf("Run: commit %s, %s, load average at start %s; %d measured rounds after %d warm-up rounds, seed %d, %.0f s.",
		orDash(f.Commit), orDash(f.Date), orDash(loadAvg(f.LoadAvgStart)), f.Rounds, f.Warmup, f.Seed, f.DurationSec)

	moat := f.System("moat")
	bare := f.System("bare")
	for _, s := range f.Systems {
		if !s.Measured() {
			continue
		}
		id := "startup." + s.Name
		title := "cold start, " + s.Name
		a.fig(id+".n", title+", runs", "count", float64(s.N), "")
		a.fig(id+".p50_ms", title+", p50", "ms", *s.P50, "lower")
		a.fig(id+".p95_ms", title+", p95", "ms", ptr(s.P95), "lower")
		a.fig(id+".p99_ms", title+", p99", "ms", ptr(s.P99), "lower")
		a.fig(id+".mean_ms", title+", mean", "ms", ptr(s.Mean), "lower")
		if bare.Measured() && s.Name != "bare" {
			a.fig(id+".ratio_to_bare", title+", p50 / bare p50", "×", *s.P50 / *bare.P50, "lower")
		}
	}

	// Headline: moat, then moat against each peer.
	moatOK := moat.Measured()
	bwrap := f.System("bwrap")
	switch {
	case !moatOK:
		a.row(headRow{Figure: "cold start, `moat run -- /bin/true`", Goal: "p50 ≤ bubblewrap p50", P50: "—", P95: "—", P99: "—", Ratio: "—",
			Result: "not measured: " + rowStatus(moat)})
	case bwrap.Measured():
		r := *moat.P50 / *bwrap.P50
		met := a.goalFig("startup.moat.ratio_to_bwrap", "cold start, moat p50 / bubblewrap p50 (goal: at or below bubblewrap)", "×", r, "lower",
			goal{"<=", 1, "", ""})
		a.row(headRow{Figure: "cold start, `moat run -- /bin/true`", Goal: "p50 ≤ bubblewrap p50",
			P50: num(*moat.P50) + " ms", P95: num(ptr(moat.P95)) + " ms", P99: num(ptr(moat.P99)) + " ms",
			Ratio: "moat / bwrap " + ratio(r), Result: verdict(met) + " (" + slower(*moat.P50, *bwrap.P50) + " than bubblewrap)"})
	default:
		a.row(headRow{Figure: "cold start, `moat run -- /bin/true`", Goal: "p50 ≤ bubblewrap p50",
			P50: num(*moat.P50) + " ms", P95: num(ptr(moat.P95)) + " ms", P99: num(ptr(moat.P99)) + " ms", Ratio: "—",
			Result: "not measured: bubblewrap " + rowStatus(bwrap)})
	}
	for _, p := range startupPeers {
		s := f.System(p.name)
		fig := "cold start, " + p.label
		if !s.Measured() {
			a.row(headRow{Figure: fig, Goal: "—", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: rowStatus(s)})
			continue
		}
		row := headRow{Figure: fig, Goal: "—", P50: num(*s.P50) + " ms", P95: num(ptr(s.P95)) + " ms", P99: num(ptr(s.P99)) + " ms", Ratio: "—", Result: "—"}
		if moatOK {
			r := *moat.P50 / *s.P50
			if id := "startup.moat.ratio_to_" + p.name; !a.ids[id] {
				a.fig(id, "cold start, moat p50 / "+p.name+" p50", "×", r, "lower")
			}
			row.Ratio = "moat / " + p.name + " " + ratio(r)
			row.Result = "moat " + slower(*moat.P50, *s.P50)
		}
		a.row(row)
	}
	if proxy := f.System("moat-proxy"); moatOK && proxy.Measured() {
		a.grp = gProxy
		d := *proxy.P50 - *moat.P50
		met := a.goalFig("startup.net_proxy.added_p50_ms", "start-up cost of --net proxy (moat-proxy p50 − moat p50)", "ms", d, "lower", goalProxyStart)
		a.row(headRow{Figure: "start-up cost of `--net proxy` (moat-proxy p50 − moat p50)", Goal: goalProxyStart.String(),
			P50: fmt.Sprintf("%+.3f ms", d), P95: "—", P99: "—", Ratio: "moat-proxy / moat " + ratio(*proxy.P50 / *moat.P50), Result: verdict(met)})
	}

	// The section: every system, then what the differences say.
	t := newTable("system", ">n", ">p50 ms", ">p95 ms", ">p99 ms", ">mean ms", ">p50 / moat p50", ">p50 / bare p50", "note")
	for i := range f.Systems {
		s := &f.Systems[i]
		if !s.Measured() {
			t.add(s.Name, "—", "—", "—", "—", "—", "—", "—", rowStatus(s))
			continue
		}
		rm, rb := "—", "—"
		if moatOK {
			rm = ratio(*s.P50 / *moat.P50)
		}
		if bare.Measured() {
			rb = ratio(*s.P50 / *bare.P50)
		}
		note := ""
		if s.Failed > 0 {
			note = fmt.Sprintf("%d failed run(s)", s.Failed)
		}
		name := s.Name
		if name == "moat" {
			name = "**moat**"
		}
		t.add(name, fmt.Sprint(s.N), num(*s.P50), num(ptr(s.P95)), num(ptr(s.P99)), num(ptr(s.Mean)), rm, rb, note)
	}
	var b strings.Builder
	b.WriteString(t.String())
	b.WriteString("\n")
	diff := func(x, y string, what string) {
		sx, sy := f.System(x), f.System(y)
		if sx.Measured() && sy.Measured() {
			d := *sx.P50 - *sy.P50
			fmt.Fprintf(&b, "- %s: %s p50 − %s p50 = %+.3f ms (%s).\n", what, x, y, d, ratio(*sx.P50 / *sy.P50))
		}
	}
	if moatOK && bwrap.Measured() {
		fmt.Fprintf(&b, "- moat against bubblewrap: %s at the median (%s vs %s ms), p95 %s vs %s ms.\n",
			slower(*moat.P50, *bwrap.P50), num(*moat.P50), num(*bwrap.P50), num(ptr(moat.P95)), num(ptr(bwrap.P95)))
	}
	diff("moat", "moat-nolimits", "the cgroup limits")
	diff("moat-proxy", "moat", "`--net proxy`")
	diff("moat-repo", "moat", "a protected repository as the workspace (moat)")
	diff("bwrap-repo", "bwrap", "the same repository bound (bubblewrap)")
	if bare.Measured() && moatOK {
		fmt.Fprintf(&b, "- moat's own cost over the floor: moat p50 − bare p50 = %.3f ms.\n", *moat.P50-*bare.P50)
	}
	b.WriteString("\nRows and exact commands:\n\n")
	for _, s := range f.Systems {
		if s.Command != "" {
			fmt.Fprintf(&b, "- **%s**: %s. %s\n", s.Name, strings.TrimSuffix(oneLine(s.About), "."), code(s.Command))
		} else {
			st := strings.TrimSuffix(rowStatus(&s), ".")
			fmt.Fprintf(&b, "- **%s**: %s. **%s%s**.\n", s.Name, strings.TrimSuffix(oneLine(s.About), "."), strings.ToUpper(st[:1]), st[1:])
		}
		if s.Failed > 0 && len(s.Errors) > 0 {
			fmt.Fprintf(&b, "  First failure: %s\n", code(firstN(s.Errors[0], 300)))
		}
	}
	sec.Body = b.String()

	for i := range f.Systems {
		s := &f.Systems[i]
		switch {
		case s.SkippedReason != "":
			a.missing("bench/startup `%s`: skipped: %s.", s.Name, strings.TrimSuffix(oneLine(s.SkippedReason), "."))
		case !s.Measured():
			a.missing("bench/startup `%s`: %s.", s.Name, rowStatus(s))
		}
	}
	for _, p := range startupPeers {
		if f.System(p.name) == nil {
			a.missing("bench/startup `%s`: not a system of this run (no row in startup.json).", p.name)
		}
	}

	// The plot: every measured system's samples.
	var rows []BoxRow
	var undrawn []string
	for _, s := range f.Systems {
		if s.Measured() && len(s.SamplesMs) > 0 {
			rows = append(rows, BoxRow{Label: s.Name, Samples: s.SamplesMs})
		} else {
			undrawn = append(undrawn, s.Name)
		}
	}
	if len(rows) > 0 {
		ref := plots.add(sec, &BoxPlot{Name: "startup", Title: "Cold start of /bin/true (bench/startup)",
			XLabel: "fork → exit, ms (log scale)", Rows: rows, Log: true},
			"Cold-start latency per system")
		ref.Note = boxNote
		if len(undrawn) > 0 {
			ref.Note += " Not drawn (no samples; reasons in the table above): " + strings.Join(undrawn, ", ") + "."
		}
	} else {
		a.missing("The cold-start plot: startup.json holds no samples.")
	}
	return sec
}

// rowStatus says why a startup system has no figures.
func rowStatus(s *schema.StartupSystem) string {
	switch {
	case s == nil:
		return "not in this run (no row in startup.json)"
	case s.SkippedReason != "":
		return "skipped: " + oneLine(s.SkippedReason)
	case s.Measured():
		return "measured"
	case len(s.Errors) > 0:
		return fmt.Sprintf("failed (%d failed runs; first: %s)", s.Failed, code(firstN(s.Errors[0], 200)))
	default:
		return "no successful run"
	}
}
