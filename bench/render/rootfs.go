package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/bench/internal/stats"
)

// rootfsKinds are bench/rootfs's kinds in report order, with what each
// times and its goal.
var rootfsKinds = []struct {
	kind, what string
	goal       *goal
}{
	{"warm", "warm start: create served by the warm pool → first `echo` (API)", &goalWarm},
	{"warm-runtime", "warm claim, the sandbox's share (health check, limits, first `echo`; no control plane)", nil},
	{"cold-host", "cold create → first `echo`, host template (API)", nil},
	{"cold-oci", "cold create → first `echo`, OCI-imported template (API)", nil},
	{"snapshot", "snapshot of a sandbox with files written (paused during the call)", nil},
	{"fork", "fork: create from that snapshot → first `echo` (API)", &goalFork},
}

func rootfsSection(in *Inputs, a *analysis, plots *plotSet) *section {
	sec := &section{Bench: "rootfs", File: "rootfs.json"}
	a.grp, a.bench = gWarm, "rootfs"
	f := in.Rootfs
	if f == nil {
		a.missing("Warm pools, templates, snapshots and forks (bench/rootfs): not run in this invocation (no rootfs.json).")
		a.row(headRow{Figure: "warm start from the pool (create → first `echo`)", Goal: goalWarm.String(), P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		a.row(headRow{Figure: "fork from a snapshot (create → first `echo`)", Goal: goalFork.String(), P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		return sec
	}
	sec.Ran = true
	sec.Meta = fmt.Sprintf("Run: commit %s, %s, load average at start %s; %d rounds after %d warm-up rounds, the kinds in a random order each round (seed %d), %d snapshot(s) with %d fork(s) each%s. Command: %s.",
		orDash(f.Commit), orDash(f.Date), orDash(loadAvg(f.LoadAvgStart)), f.Rounds, f.Warmup, f.Seed,
		f.Config.SnapshotRounds, f.Config.Forks, took(f.DurationSec), code(f.Command))

	kinds := slices.Collect(maps.Keys(f.Kinds))
	slices.Sort(kinds)
	order := []string{}
	for _, k := range rootfsKinds {
		order = append(order, k.kind)
	}
	for _, k := range kinds {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	what := func(kind string) (string, *goal) {
		for _, k := range rootfsKinds {
			if k.kind == kind {
				return k.what, k.goal
			}
		}
		return kind, nil
	}
	get := func(kind string) *stats.Summary {
		if s, ok := f.Kinds[kind]; ok && s.N > 0 {
			return &s
		}
		return nil
	}
	host := get("cold-host")

	t := newTable("kind", "what is timed", "goal", ">n", ">p50 ms", ">p95 ms", ">p99 ms", ">max ms", "result")
	var rows []BoxRow
	for _, k := range order {
		w, g := what(k)
		s := get(k)
		if s == nil {
			t.add(k, w, goalText(g), "0", "—", "—", "—", "—", "not measured")
			a.missing("bench/rootfs `%s`: no measured run in rootfs.json.", k)
			if g != nil {
				a.row(headRow{Figure: w, Goal: g.String(), P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not measured"})
			}
			continue
		}
		id := "rootfs." + k
		a.statFigs(id, "rootfs "+k, "ms", s)
		result := "—"
		if g != nil {
			result = verdict(a.setGoal(id+".p50_ms", *g))
		}
		t.add(k, w, goalText(g), fmt.Sprint(s.N), num(s.P50), num(s.P95), num(s.P99), num(s.Max), result)

		if k != "snapshot" {
			r := "—"
			switch {
			case k == "warm" && host != nil:
				r = "cold-host / warm " + ratio(host.P50/s.P50)
			case k == "warm-runtime" && get("warm") != nil:
				r = "of the warm claim's p50: " + fmt.Sprintf("%.0f%%", 100*s.P50/get("warm").P50)
			case (k == "cold-oci" || k == "fork") && host != nil:
				r = k + " / cold-host " + ratio(s.P50/host.P50)
			}
			a.row(headRow{Figure: w, Goal: goalText(g), P50: num(s.P50) + " ms", P95: num(s.P95) + " ms", P99: num(s.P99) + " ms", Ratio: r, Result: result})
		}
		if xs := f.Samples[k]; len(xs) > 0 {
			br := BoxRow{Label: k, Samples: xs}
			if g != nil {
				br.Goal = g.target
			}
			rows = append(rows, br)
		}
	}
	var b strings.Builder
	b.WriteString(t.String())
	b.WriteString("\n")
	if f.PoolTries > 0 {
		fmt.Fprintf(&b, "- Warm pool hits: %d of %d claims (a miss is a cold create and is not counted as warm).\n", f.PoolHits, f.PoolTries)
		a.fig("rootfs.pool_hit_ratio", "rootfs warm pool hits / claims", "×", float64(f.PoolHits)/float64(f.PoolTries), "higher")
	}
	if sn := get("snapshot"); sn != nil {
		fmt.Fprintf(&b, "- Snapshot: %d MiB written before each; %.1f MiB stored per snapshot on average, %d entries; p50 %s ms.\n",
			f.Snapshot.MiB, f.Snapshot.MeanBytes/(1<<20), f.Snapshot.Entries, num(sn.P50))
		a.fig("rootfs.snapshot.stored_mib", "rootfs snapshot, MiB stored", "MiB", f.Snapshot.MeanBytes/(1<<20), "")
	}
	if w, h := get("warm"), host; w != nil && h != nil {
		fmt.Fprintf(&b, "- A warm claim against a cold create of the host template: %s vs %s ms at p50 (%s).\n", num(w.P50), num(h.P50), slower(w.P50, h.P50))
	}
	if o, h := get("cold-oci"), host; o != nil && h != nil {
		fmt.Fprintf(&b, "- The OCI template against the host template, cold: %s vs %s ms at p50 (%s).\n", num(o.P50), num(h.P50), ratio(o.P50/h.P50))
	}
	if f.Failures > 0 {
		fmt.Fprintf(&b, "\n**%d measured run(s) failed** (bench/rootfs exited non-zero).\n", f.Failures)
		a.missing("bench/rootfs: %d measured run(s) failed; their kinds have fewer samples.", f.Failures)
		for _, e := range f.Errors {
			fmt.Fprintf(&b, "- %s\n", code(firstN(e, 300)))
		}
	} else {
		runErrors(&b, a, &f.Run)
	}
	sec.Body = b.String()
	if len(rows) > 0 {
		ref := plots.add(sec, &BoxPlot{Name: "rootfs", Title: "Warm pool, templates, snapshot and fork (bench/rootfs)",
			XLabel: "ms (log scale); red tick: the goal of the row (p50)", Rows: rows, Log: true},
			"Latency per bench/rootfs kind")
		ref.Note = boxNote + goalNote
	} else {
		a.missing("The bench/rootfs plot: rootfs.json holds no samples.")
	}
	return sec
}

func goalText(g *goal) string {
	if g == nil {
		return "—"
	}
	return g.String()
}

// took says how long a run took, when it recorded it: "; 81 s in all".
func took(sec float64) string {
	if sec <= 0 {
		return ""
	}
	return fmt.Sprintf("; %.0f s in all", sec)
}
