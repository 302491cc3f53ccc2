package render

import (
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/bench/schema"
)

// goalDaemonRatio is the durable exec throughput's goal: no slower than
// the daemon before issue 17.
var goalDaemonRatio = goal{">=", 1.0, "×", ""}

// floodGoal is a flood's goal: the daemon's peak RSS growth at most the
// bound it documents (GoalKiB; runs that did not record it: the budget
// plus 25%), in MiB.
func floodGoal(f *schema.Flood) goal {
	target := float64(f.GoalKiB) / 1024
	if f.GoalKiB == 0 {
		target = float64(f.MemoryBudget) * 1.25 / (1 << 20)
	}
	return goal{"<=", target, "MiB", ""}
}

func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

// daemonSection computes bench/daemon's figures: the output floods, the
// durable exec throughput and the auth flood against the daemon before
// issue 17, and BenchmarkRecordCall of both trees.
func daemonSection(in *Inputs, a *analysis) *section {
	sec := &section{Bench: "daemon", File: "daemon.json"}
	a.grp, a.bench = gDaemon, "daemon"
	f := in.Daemon
	if f == nil {
		a.missing("The daemon under exhaustion: output floods, durable exec throughput and the auth flood against the daemon before issue 17 (bench/daemon): not run in this invocation (no daemon.json).")
		for _, fig := range []string{"output flood: daemon peak RSS growth", "durable exec throughput, new / old"} {
			a.row(headRow{Figure: fig, Goal: "—", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		}
		return sec
	}
	sec.Ran = true
	c := f.Config
	oldLine := "no old daemon"
	if o := f.Old; o != nil && o.SkippedReason == "" {
		oldLine = fmt.Sprintf("the old daemon (\"today\") is commit %s (%s), built from `git archive` by the benchmark: %s",
			firstN(o.Commit, 12), oneLine(o.Subject), orDash(o.Version))
	} else if o != nil {
		oldLine = "no old daemon: " + oneLine(o.SkippedReason)
		a.missing("bench/daemon's comparisons with the daemon before issue 17: %s.", strings.TrimSuffix(oneLine(o.SkippedReason), "."))
	}
	sec.Meta = fmt.Sprintf("Run: commit %s, %s, load average %s at its start and %s at its end (other work was running on the machine: read the figures with that in mind); %.0f s in all. "+
		"Command: %s. New daemon: %s; %s.",
		orDash(f.Commit), orDash(f.Date), orDash(loadAvg(f.LoadAvgStart)), orDash(loadAvg(f.LoadAvgEnd)), f.DurationSec,
		code(f.Command), orDash(f.Versions["moat"]), oldLine)

	var b strings.Builder
	// The output floods.
	if len(f.Flood) > 0 {
		b.WriteString("### Output flood\n\n")
		fmt.Fprintf(&b, "%d concurrent execs printing %d MiB each (`yes flood | head -c %d`; `output_limit` = `max_limit`, `concurrent`, spread over %d tenants, one sandbox each) "+
			"and, started at the same moment, %d background processes printing %d MiB each, every one followed by a reader (`…/output?follow=true`). "+
			"The daemon's VmRSS is sampled every %d ms from an idle baseline (its sandboxes made; VmHWM reset there), and read again %.0f s after the sandboxes are deleted.\n\n",
			c.Execs, c.ExecMiB, c.ExecMiB<<20, c.Tenants, c.Background, c.BackgroundMiB, c.SampleEveryMs, c.AfterSec)
		t := newTable("output budget (daemon / tenant)", ">baseline RSS MiB", ">peak RSS growth MiB", "goal", "result", ">growth after the end MiB", ">flood s", ">exec p50 / p99 ms")
		acc := newTable("output budget", ">printed MiB", "exec answers whole / truncated", "output files whole / MiB", ">background received MiB", ">lost_bytes (events)", "every byte accounted")
		for i := range f.Flood {
			fl := &f.Flood[i]
			g := floodGoal(fl)
			growth := float64(fl.PeakGrowthKiB) / 1024
			id := "daemon.flood." + figKey(fl.Key)
			met := a.goalFig(id+".peak_growth_mib", "output flood, "+fl.Name+": daemon peak RSS growth", "MiB", growth, "lower", g)
			after := float64(fl.AfterEndGrowthKiB) / 1024
			a.fig(id+".after_end_growth_mib", fmt.Sprintf("output flood, %s: daemon RSS growth %.0f s after the sandboxes end", fl.Name, fl.AfterSec), "MiB", after, "lower")
			a.fig(id+".baseline_rss_mib", "output flood, "+fl.Name+": daemon RSS at the baseline", "MiB", float64(fl.BaselineRSSKiB)/1024, "lower")
			a.fig(id+".lost_bytes", "output flood, "+fl.Name+": background bytes reported lost", "bytes", float64(fl.Background.LostBytes), "")
			accounted := 0.0
			if fl.Accounted {
				accounted = 1
			}
			a.goalFig(id+".accounted", "output flood, "+fl.Name+": every byte accounted (1 yes, 0 no)", "", accounted, "higher", goal{">=", 1, "", ""})
			budget := sizeName(fl.MemoryBudget) + " / " + sizeName(fl.TenantMemoryBudget)
			ems := "—"
			if s := fl.ExecMs; s != nil && s.N > 0 {
				ems = num(s.P50) + " / " + num(s.P99)
			}
			t.add(budget, mib(float64(fl.BaselineRSSKiB)), fmt.Sprintf("%s (%s of the budget)", mib(float64(fl.PeakGrowthKiB)), ratio(growth*(1<<20)/float64(fl.MemoryBudget))),
				g.String(), verdict(met), mib(float64(fl.AfterEndGrowthKiB)), fmt.Sprintf("%.1f", fl.FloodSec), ems)
			acc.add(budget, fmt.Sprintf("%.0f", float64(fl.Exec.Printed+fl.Background.Printed)/(1<<20)),
				fmt.Sprintf("%d / %d of %d", fl.Exec.Whole, fl.Exec.Truncated, fl.Exec.N),
				fmt.Sprintf("%d of %d / %.1f", fl.Exec.WholeFiles, fl.Exec.Files, float64(fl.Exec.FileBytes)/(1<<20)),
				fmt.Sprintf("%.1f", float64(fl.Background.Received)/(1<<20)),
				fmt.Sprintf("%d (%d)", fl.Background.LostBytes, fl.Background.LostEvents), yesNo(fl.Accounted))
			a.row(headRow{Figure: fmt.Sprintf("output flood (%s), daemon peak RSS growth", budget), Goal: "≤ documented bound (" + trimNum(g.target) + " MiB)",
				P50: fmt.Sprintf("+%s MiB", mib(float64(fl.PeakGrowthKiB))), P95: "—", P99: "—",
				Ratio:  fmt.Sprintf("%s of the budget; +%s MiB %.0f s after the end", ratio(growth*(1<<20)/float64(fl.MemoryBudget)), mib(float64(fl.AfterEndGrowthKiB)), fl.AfterSec),
				Result: verdict(met)})
			a.row(headRow{Figure: fmt.Sprintf("output flood (%s), every byte printed accounted for", budget), Goal: "all",
				P50: fmt.Sprintf("%.0f MiB printed", float64(fl.Exec.Printed+fl.Background.Printed)/(1<<20)), P95: "—", P99: "—",
				Ratio: fmt.Sprintf("%.1f MiB of it reported lost (lost_bytes)", float64(fl.Background.LostBytes)/(1<<20)), Result: verdict(fl.Accounted)})
			if !fl.Accounted {
				a.missing("bench/daemon's output flood, %s: not every byte printed was accounted for (see its section).", fl.Name)
			}
		}
		b.WriteString(t.String())
		b.WriteString("\nWhere the bytes went: an exec's answer holds its whole stream, or says truncated and an output file under `<data>/output` holds it (spilled once the budget refused, or kept because it is longer than a store row's preview); " +
			"a background process's bytes are received by its reader or reported in a lost event's `lost_bytes`.\n\n")
		b.WriteString(acc.String())
		b.WriteString("\n")
		for _, fl := range f.Flood {
			for _, e := range fl.AccountingErrors {
				fmt.Fprintf(&b, "- %s: %s\n", fl.Name, oneLine(e))
			}
			for _, e := range fl.Errors {
				fmt.Fprintf(&b, "- %s, failed: %s\n", fl.Name, code(firstN(e, 300)))
			}
		}
		b.WriteString("\n")
	} else {
		a.missing("bench/daemon's output flood: not run (`--flood=false`).")
	}

	// Durable exec throughput.
	if tp := f.Throughput; tp != nil && len(tp.Levels) > 0 {
		b.WriteString("### Durable exec throughput, new daemon against old\n\n")
		fmt.Fprintf(&b, "%s: the end-to-end cost of a call whose record is durable. Each client calls in a loop for %.0f s per round; %d rounds, each running every level on both daemons in a shuffled order; calls/s is the calls answered over the time taken.\n\n",
			code(tp.Exec), tp.WindowSec, tp.Rounds)
		t := newTable(">clients", ">new calls/s", ">new p50 / p95 / p99 ms", ">old calls/s", ">old p50 / p95 / p99 ms", ">new / old calls/s", "goal", "result")
		for _, l := range tp.Levels {
			cell := func(s *schema.TPSide) (string, string) {
				if s == nil {
					return "—", "—"
				}
				p50, p95, p99 := statCells(s.Latency)
				return fmt.Sprintf("%.0f", s.CallsPerS), p50 + " / " + p95 + " / " + p99
			}
			nc, nl := cell(l.New)
			oc, ol := cell(l.Old)
			id := fmt.Sprintf("daemon.exec.c%d", l.Clients)
			res := "not measured: no old daemon"
			if l.New != nil {
				a.fig(id+".new.calls_per_s", fmt.Sprintf("durable exec, %d client(s), new daemon, calls/s", l.Clients), "calls/s", l.New.CallsPerS, "higher")
				if l.New.Latency != nil {
					a.fig(id+".new.p50_ms", fmt.Sprintf("durable exec, %d client(s), new daemon, p50", l.Clients), "ms", l.New.Latency.P50, "lower")
					a.fig(id+".new.p99_ms", fmt.Sprintf("durable exec, %d client(s), new daemon, p99", l.Clients), "ms", l.New.Latency.P99, "lower")
				}
			}
			if l.Old != nil {
				a.fig(id+".old.calls_per_s", fmt.Sprintf("durable exec, %d client(s), old daemon, calls/s", l.Clients), "calls/s", l.Old.CallsPerS, "higher")
			}
			if l.Ratio != nil {
				res = verdict(a.goalFig(id+".ratio", fmt.Sprintf("durable exec, %d client(s), calls/s new / old", l.Clients), "×", *l.Ratio, "higher", goalDaemonRatio))
			} else {
				a.missing("bench/daemon's durable exec throughput at %d client(s): no ratio (a daemon missing).", l.Clients)
			}
			t.add(fmt.Sprint(l.Clients), nc, nl, oc, ol, ratio(ptr(l.Ratio)), goalDaemonRatio.String(), res)
			hp50, hp95, hp99 := "—", "—", "—"
			if l.New != nil && l.New.Latency != nil {
				hp50, hp95, hp99 = statCells(l.New.Latency)
				hp50, hp95, hp99 = hp50+" ms", hp95+" ms", hp99+" ms"
			}
			rcell := ratio(ptr(l.Ratio))
			if l.New != nil && l.Old != nil {
				rcell = fmt.Sprintf("%s (%.0f vs %.0f calls/s)", rcell, l.New.CallsPerS, l.Old.CallsPerS)
			}
			a.row(headRow{Figure: fmt.Sprintf("durable exec throughput (`/bin/true`), %d client(s): new / old daemon", l.Clients), Goal: goalDaemonRatio.String(),
				P50: hp50, P95: hp95, P99: hp99, Ratio: rcell, Result: res})
		}
		b.WriteString(t.String())
		b.WriteString("\n")
		for _, l := range tp.Levels {
			for _, s := range []*schema.TPSide{l.New, l.Old} {
				if s != nil && s.Errors > 0 {
					fmt.Fprintf(&b, "- %d client(s): %d failed call(s), first: %s\n", l.Clients, s.Errors, code(firstN(strings.Join(s.FirstErrors, "; "), 300)))
				}
			}
		}
		var rounds []string
		for _, l := range tp.Levels {
			if l.New != nil && l.Old != nil {
				rounds = append(rounds, fmt.Sprintf("%d: new %s, old %s", l.Clients, joinNums(l.New.RoundCallsPerS), joinNums(l.Old.RoundCallsPerS)))
			}
		}
		if len(rounds) > 0 {
			fmt.Fprintf(&b, "Calls/s of each round, by clients: %s.\n\n", strings.Join(rounds, "; "))
		}
	} else {
		a.missing("bench/daemon's durable exec throughput: not run (`--rounds 0`).")
	}

	// BenchmarkRecordCall.
	if r := f.Record; r != nil {
		b.WriteString("### Records per second in-process (`BenchmarkRecordCall`)\n\n")
		fmt.Fprintf(&b, "What the daemon writes for every exec (the call's start in the store, then its end in the store and on the audit tape, fsync included), without HTTP or a sandbox: %s in each tree, %d rounds alternating, the mean of the rounds. The old tree: %s.\n\n",
			code(r.Command), r.Rounds, orDash(r.OldSource))
		t := newTable(">writers", ">new records/s", ">old records/s", ">new / old")
		for _, w := range r.Writers {
			old := "—"
			if w.Old != nil {
				old = fmt.Sprintf("%.0f", *w.Old)
			}
			t.add(fmt.Sprint(w.Writers), fmt.Sprintf("%.0f", w.New), old, ratio(ptr(w.Ratio)))
			id := fmt.Sprintf("daemon.record.w%d", w.Writers)
			a.fig(id+".new.calls_per_s", fmt.Sprintf("BenchmarkRecordCall, %d writer(s), new", w.Writers), "calls/s", w.New, "higher")
			if w.Old != nil {
				a.fig(id+".old.calls_per_s", fmt.Sprintf("BenchmarkRecordCall, %d writer(s), old", w.Writers), "calls/s", *w.Old, "higher")
			}
			if w.Ratio != nil {
				a.fig(id+".ratio", fmt.Sprintf("BenchmarkRecordCall, %d writer(s), new / old", w.Writers), "×", *w.Ratio, "higher")
			}
		}
		b.WriteString(t.String())
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "- failed: %s\n", code(firstN(e, 300)))
		}
		b.WriteString("\n")
	} else {
		a.missing("bench/daemon's BenchmarkRecordCall: not run (`--record=false`).")
	}

	// The auth flood.
	if au := f.Auth; au != nil && (au.New != nil || au.Old != nil) {
		b.WriteString("### Auth flood\n\n")
		fmt.Fprintf(&b, "%s from %d clients on one address, %.0f s per round and daemon, %d round(s) alternating. The audit events are the `auth.denied` lines the flood added to the tape, read after the daemon stopped (the new daemon writes its counts every interval and when it stops).\n\n",
			oneLine(au.Request), au.Clients, au.WindowSec, au.Rounds)
		t := newTable("daemon", ">requests", ">answered/s", ">401", ">429", ">audit events", ">per 1000 requests", ">tape bytes per 1000", ">failures the events count")
		for _, s := range []*schema.AuthSide{au.New, au.Old} {
			if s == nil {
				continue
			}
			t.add(s.Daemon, fmt.Sprint(s.Requests), fmt.Sprintf("%.0f", s.PerSec), fmt.Sprint(s.Unauthorized), fmt.Sprint(s.Limited),
				fmt.Sprint(s.AuditEvents+s.EventsMissing), num(s.EventsPer1000), fmt.Sprintf("%.0f", s.BytesPer1000), fmt.Sprint(s.AuditCounted))
			id := "daemon.auth." + figKey(s.Daemon)
			a.fig(id+".answered_per_s", "auth flood, "+s.Daemon+" daemon, bad-token requests answered per second", "req/s", s.PerSec, "higher")
			a.fig(id+".events_per_1000", "auth flood, "+s.Daemon+" daemon, audit events per 1000 bad-token requests", "events", s.EventsPer1000, "lower")
			a.fig(id+".bytes_per_1000", "auth flood, "+s.Daemon+" daemon, audit tape bytes per 1000 bad-token requests", "bytes", s.BytesPer1000, "lower")
			if s.Other > 0 {
				fmt.Fprintf(&b, "- %s: %d request(s) failed or answered otherwise, first: %s\n", s.Daemon, s.Other, code(firstN(strings.Join(s.FirstOther, "; "), 300)))
			}
		}
		b.WriteString(t.String())
		if au.RateRatio != nil && au.EventsRatio != nil {
			fmt.Fprintf(&b, "\nNew / old: %s the answers per second; audit events per 1000 requests %s against %s.\n",
				ratio(*au.RateRatio), num(au.New.EventsPer1000), num(au.Old.EventsPer1000))
		}
		b.WriteString("\n")
	} else {
		a.missing("bench/daemon's auth flood: not run (`--auth-rounds 0`).")
	}

	// The daemons.
	if len(f.Daemons) > 0 {
		var ds []string
		for _, d := range f.Daemons {
			ds = append(ds, fmt.Sprintf("%s: SIGTERM → exit in %s ms, exited 0: %v, %d of %d log lines at WARN or ERROR", d.Role, num(d.StopMs), d.ExitedOK, d.LogProblems, d.LogLines))
		}
		fmt.Fprintf(&b, "Daemons: %s.\n", strings.Join(ds, "; "))
	}
	if f.Failed {
		b.WriteString("\n**The run failed** (bench/daemon exited non-zero):\n\n")
		for _, e := range f.Errors {
			fmt.Fprintf(&b, "- %s\n", code(firstN(e, 300)))
		}
		for _, fl := range f.Flood {
			if !fl.Accounted {
				fmt.Fprintf(&b, "- the output flood with %s: not every byte printed was accounted for (above)\n", fl.Name)
			}
		}
		for _, d := range f.Daemons {
			if !d.ExitedOK {
				fmt.Fprintf(&b, "- the %s daemon did not exit 0 after SIGTERM\n", d.Role)
			}
		}
		a.missing("bench/daemon reported failures (see its section): its figures may be incomplete.")
	}
	sec.Body = b.String()
	return sec
}

func joinNums(vs []float64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(s, ", ")
}
