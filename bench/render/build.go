package render

import (
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// The goals of issue 22 (sandboxed builds).
var (
	// goalBuildOverhead: a real build's p50 as a moat build over its p50
	// directly on the host.
	goalBuildOverhead = goal{"<=", 1.05, "×", "p50"}
	// goalBuildFixed: a trivial build's p50 over one cold create → first
	// exec's p50.
	goalBuildFixed = goal{"<=", 1.5, "×", "p50"}
)

func buildSection(in *Inputs, a *analysis, plots *plotSet) *section {
	sec := &section{Bench: "build", File: "build.json"}
	a.grp, a.bench = gBuild, "build"
	f := in.Build
	overFig := "build: a C build as a moat build against the same build on the host"
	fixedFig := "build: fixed cost of a trivial build, no output"
	outFig := "build: fixed cost of a trivial build with a 1-file output"
	if f == nil {
		a.missing("Sandboxed builds (bench/build): not run in this invocation (no build.json).")
		for _, r := range []struct{ fig, goal string }{
			{overFig, "p50 ≤ 1.05× the host's"}, {fixedFig, "p50 ≤ 1.5× cold create → first exec"}, {outFig, "p50 ≤ 1.5× cold create → first exec"},
		} {
			a.row(headRow{Figure: r.fig, Goal: r.goal, P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		}
		return sec
	}
	sec.Ran = true
	cfg := f.Config
	sec.Meta = fmt.Sprintf("Run: commit %s, %s, load average %s at its start and %s at its end; the fixed cost's rows %d rounds after %d warm-up rounds, the real build's %d after %d, interleaved in the same rounds in a random order (seed %d); the real build %d units × %d functions (%d files, %s KiB of source), %s; gcc %s%s. Command: %s; daemon: %s.",
		orDash(f.Commit), orDash(f.Date), orDash(loadAvg(f.LoadAvgStart)), orDash(loadAvg(f.LoadAvgEnd)), f.Rounds, f.Warmup, cfg.BuildRounds, cfg.BuildWarmup, f.Seed,
		cfg.Units, cfg.Funcs, cfg.SourceFiles, num(float64(cfg.SourceBytes)/1024), code(strings.Join(cfg.Command, " ")), orDash(f.Versions["gcc"]),
		took(f.DurationSec), code(f.Command), code(f.Daemon.Command))

	var b strings.Builder
	b.WriteString(buildRowTable(f, a).String())
	b.WriteString("\n")
	buildOverhead(&b, f, a, overFig)
	buildFixed(&b, f, a, fixedFig, outFig)
	if sv := f.Daemon; sv.Command != "" {
		fmt.Fprintf(&b, "- Daemon: SIGTERM → exit in %s ms, exited 0: %v; %d log lines, %d at WARN or ERROR.\n", num(sv.StopMs), sv.ExitedOK, sv.LogLines, sv.LogProblems)
		for _, l := range sv.FirstProblems {
			fmt.Fprintf(&b, "  - %s\n", code(firstN(l, 300)))
		}
	}
	fmt.Fprintf(&b, "- Timing: %s.\n", oneLine(cfg.Timing))
	runErrors(&b, a, &f.Run)
	sec.Body = b.String()
	buildPlot(sec, f, plots, a)
	return sec
}

// buildStats is a row's statistics, nil when it has no sample.
func buildStats(r *schema.BuildRow) *stats.Summary {
	if r == nil || r.Stats == nil || r.Stats.N == 0 {
		return nil
	}
	return r.Stats
}

// buildRef is the kind of the row a row's p50 is compared with: the
// host's build for the sandbox's, the baseline for the trivial builds.
func buildRef(kind string) string {
	switch kind {
	case schema.BuildSandbox:
		return schema.BuildHost
	case schema.BuildTrivial, schema.BuildTrivialOutput:
		return schema.BuildBaseline
	}
	return ""
}

// buildRowTable is the table of every row.
func buildRowTable(f *schema.Build, a *analysis) *table {
	t := newTable("row", "what is timed", ">n", ">p50 ms", ">p95 ms", ">p99 ms", ">max ms", ">daemon's duration_ms p50", ">Build call p50 ms", ">p50 / reference p50", ">failed")
	for i := range f.Rows {
		r := &f.Rows[i]
		s := buildStats(r)
		a.statFigs("build."+r.Kind, "build "+r.Kind, "ms", s)
		n, p50, p95, p99, mx := "0", "—", "—", "—", "—"
		if s != nil {
			n, mx = fmt.Sprint(s.N), num(s.Max)
			p50, p95, p99 = statCells(s)
		} else {
			a.missing("bench/build `%s`: no measured sample in build.json.", r.Kind)
		}
		dur, call, rel := "—", "—", "—"
		if r.Duration != nil && r.Duration.N > 0 {
			dur = num(r.Duration.P50)
			a.fig("build."+r.Kind+".duration.p50_ms", "build "+r.Kind+", the daemon's duration_ms, p50", "ms", r.Duration.P50, "lower")
		}
		if r.Call != nil && r.Call.N > 0 {
			call = num(r.Call.P50)
		}
		if ref := buildStats(f.Row(buildRef(r.Kind))); ref != nil && s != nil {
			rel = ratio(s.P50/ref.P50) + " of `" + buildRef(r.Kind) + "`"
		}
		t.add(code(r.Kind), r.What, n, p50, p95, p99, mx, dur, call, rel, fmt.Sprint(r.Failures))
	}
	return t
}

// msCells are a summary's percentiles with their unit.
func msCells(s *stats.Summary) (string, string, string) {
	p50, p95, p99 := statCells(s)
	return p50 + " ms", p95 + " ms", p99 + " ms"
}

// buildOverhead judges the sandboxed build against the host's.
func buildOverhead(b *strings.Builder, f *schema.Build, a *analysis, fig string) {
	host, sb := buildStats(f.Row(schema.BuildHost)), buildStats(f.Row(schema.BuildSandbox))
	if host == nil || sb == nil {
		a.row(headRow{Figure: fig, Goal: "p50 ≤ 1.05× the host's", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not measured"})
		a.missing("bench/build: the real build has no measured sample on the host or in the sandbox (--build-rounds 0, or every sample failed).")
		return
	}
	r := sb.P50 / host.P50
	met := a.goalFig("build.sandbox.ratio_to_host", "build: a C build as a moat build p50 / the same on the host p50", "×", r, "lower", goalBuildOverhead)
	p50, p95, p99 := msCells(sb)
	a.row(headRow{Figure: fmt.Sprintf("%s (%d units, host p50 %s s)", fig, f.Config.Units, trimNum(host.P50/1000)), Goal: "p50 ≤ 1.05× the host's",
		P50: p50, P95: p95, P99: p99, Ratio: "/ host " + ratio(r) + " (" + pct((r-1)*100) + ")", Result: verdict(met)})
	fmt.Fprintf(b, "- **Overhead**: the C build took %s ms at p50 as a moat build against %s ms directly on the host: %s (%s, %s ms). The goal (≤ 1.05×) is %s.",
		num(sb.P50), num(host.P50), ratio(r), pct((r-1)*100), num(sb.P50-host.P50), strings.Trim(verdict(met), "*"))
	if row := f.Row(schema.BuildSandbox); row.Duration != nil && row.Duration.N > 0 && row.Call != nil && row.Call.N > 0 {
		fmt.Fprintf(b, " Of it the daemon's own duration_ms was %s ms at p50, the Build call %s ms; the artifact's download the rest.",
			num(row.Duration.P50), num(row.Call.P50))
	}
	b.WriteString("\n")
	switch c := f.Config; {
	case c.HostProgram == "" || c.SandboxProgram == "":
	case c.HostProgram == c.SandboxProgram:
		fmt.Fprintf(b, "- Both builds made the same program (sha256 %s): the same compiler, flags and environment.\n", code(c.HostProgram[:min(16, len(c.HostProgram))]+"…"))
	default:
		fmt.Fprintf(b, "- **The programs differ** (host sha256 %s, sandbox %s): the two builds did not see the same compiler or environment.\n", code(c.HostProgram), code(c.SandboxProgram))
	}
	if c := f.Config; len(c.SandboxEnv) > 0 {
		fmt.Fprintf(b, "- Environment: the sandbox's build had %s; the host's build %s. CPU quota of the build's sandbox: %s.\n",
			code(strings.Join(c.SandboxEnv, " ")), code(strings.Join(envNames(c.HostEnv), " ")), cpuQuota(c.CPUs))
	}
	if row := f.Row(schema.BuildSandbox); row.PeakMemoryBytes > 0 {
		fmt.Fprintf(b, "- Peak memory of the build's sandbox: %s MiB.\n", mib(float64(row.PeakMemoryBytes)/1024))
	}
}

// envNames are the names of KEY=VALUE pairs.
func envNames(env []string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		out[i], _, _ = strings.Cut(kv, "=")
	}
	return out
}

func cpuQuota(cpus float64) string {
	if cpus <= 0 {
		return "none"
	}
	return trimNum(cpus) + " CPUs"
}

// buildFixed judges the trivial builds against the baseline.
func buildFixed(b *strings.Builder, f *schema.Build, a *analysis, fixedFig, outFig string) {
	base := buildStats(f.Row(schema.BuildBaseline))
	if base != nil {
		p50, p95, p99 := msCells(base)
		a.row(headRow{Figure: "build: baseline, cold API create carrying its first exec of `true` (no pool)", Goal: "—", P50: p50, P95: p95, P99: p99, Ratio: "—", Result: "—"})
	}
	var del float64 // the baseline's delete p50, 0 when not timed
	if r := f.Row(schema.BuildBaseline); base != nil && r.Delete != nil && r.Delete.N > 0 {
		del = r.Delete.P50
		a.fig("build.baseline.delete.p50_ms", "build: the baseline's sandbox delete (untimed in its samples), p50", "ms", del, "lower")
	}
	for _, c := range []struct{ kind, fig, what string }{
		{schema.BuildTrivial, fixedFig, "a trivial build (a one-file source, `true`, no output)"},
		{schema.BuildTrivialOutput, outFig, "the same build collecting that file as its output, with the artifact's download,"},
	} {
		row := f.Row(c.kind)
		s := buildStats(row)
		if s == nil || base == nil {
			a.row(headRow{Figure: c.fig, Goal: "p50 ≤ 1.5× cold create → first exec", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not measured"})
			a.missing("bench/build: `%s` or the baseline has no measured sample (--rounds 0, or every sample failed).", c.kind)
			continue
		}
		r := s.P50 / base.P50
		met := a.goalFig("build."+c.kind+".ratio_to_baseline", "build: "+c.kind+" p50 / cold create → first exec p50", "×", r, "lower", goalBuildFixed)
		p50, p95, p99 := msCells(s)
		a.row(headRow{Figure: c.fig, Goal: "p50 ≤ 1.5× cold create → first exec", P50: p50, P95: p95, P99: p99, Ratio: "/ baseline " + ratio(r), Result: verdict(met)})
		fmt.Fprintf(b, "- **Fixed cost**: %s took %s ms at p50, %s the cold create → first exec of the same daemon (%s ms). The goal (≤ 1.5×) is %s.",
			c.what, num(s.P50), ratio(r), num(base.P50), strings.Trim(verdict(met), "*"))
		if row.Duration != nil && row.Duration.N > 0 {
			d := row.Duration.P50
			a.fig("build."+c.kind+".outside_duration.p50_ms", "build "+c.kind+", client wall p50 − the daemon's duration_ms p50", "ms", s.P50-d, "lower")
			fmt.Fprintf(b, " The daemon's own duration_ms (the build's start to its end as the daemon records them: the source's check, the sandbox's create, the command and the outputs' collection; the sandbox is deleted after the answer, as a create's is after it) was %s ms at p50; the other %s ms are outside it: the HTTP request, the settings' checks, the build's records in the store and the answer", num(d), num(s.P50-d))
			if row.Call != nil && row.Call.N > 0 && c.kind == schema.BuildTrivialOutput {
				fmt.Fprintf(b, ", and the artifact's download (%s ms after the Build call's %s ms at p50)", num(s.P50-row.Call.P50), num(row.Call.P50))
			}
			b.WriteString(".")
		}
		b.WriteString("\n")
	}
	if del > 0 {
		fmt.Fprintf(b, "- Neither side waits for its sandbox's deletion (a build deletes it after its answer; the baseline's delete, untimed in its samples, took %s ms at p50); create → first exec → delete is %s ms",
			num(del), num(base.P50+del))
		if s := buildStats(f.Row(schema.BuildTrivial)); s != nil {
			fmt.Fprintf(b, ", and the trivial build %s of that", ratio(s.P50/(base.P50+del)))
		}
		b.WriteString(".\n")
	}
}

// buildPlot draws every row's distribution on a log axis, the goals as
// ticks from their reference's p50.
func buildPlot(sec *section, f *schema.Build, plots *plotSet, a *analysis) {
	var rows []BoxRow
	add := func(kind, label string, g *goal) {
		r := f.Row(kind)
		if r == nil || len(r.Samples) == 0 {
			return
		}
		br := BoxRow{Label: label, Samples: r.Samples}
		if ref := buildStats(f.Row(buildRef(kind))); g != nil && ref != nil {
			br.Goal = g.target * ref.P50
		}
		rows = append(rows, br)
	}
	add(schema.BuildHost, "C build on the host", nil)
	add(schema.BuildSandbox, "the same as a moat build", &goalBuildOverhead)
	add(schema.BuildBaseline, "cold create → first exec", nil)
	add(schema.BuildTrivial, "trivial build, no output", &goalBuildFixed)
	add(schema.BuildTrivialOutput, "trivial build, 1-file output", &goalBuildFixed)
	if len(rows) == 0 {
		a.missing("The bench/build plot: build.json holds no samples.")
		return
	}
	ref := plots.add(sec, &BoxPlot{Name: "build", Title: "Sandboxed builds against the host and a cold create → first exec (bench/build)",
		XLabel: "ms (log scale); red tick: the row's goal (p50), from its reference's p50", Rows: rows, Log: true},
		"A C build on the host and as a moat build; a trivial build's fixed cost against a cold create → first exec")
	ref.Note = boxNote + goalNote
}
