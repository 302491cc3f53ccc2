package render

import (
	"fmt"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/bench/schema"
)

// seccompWorkloads are bench/syscall's syscall-heavy loops, to which the
// issue's 5% goal applies; the others are file I/O (path walks,
// Landlock, the sandbox's mounts and tmpfs).
var seccompWorkloads = []string{"getppid", "read-1B", "ioctl"}

func syscallSection(in *Inputs, a *analysis) *section {
	sec := &section{Bench: "syscall", File: "syscall.json"}
	a.grp, a.bench = gSyscall, "syscall"
	f := in.Syscall
	if f == nil {
		a.missing("Syscall and file I/O overhead inside the sandbox (bench/syscall): not run in this invocation (no syscall.json).")
		a.row(headRow{Figure: "syscall overhead inside the sandbox", Goal: goalSyscall.String(), P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		return sec
	}
	sec.Ran = true
	sec.Meta = fmt.Sprintf("Run: commit %s, %s, load average at start %s; %d rounds after %d warm-up rounds, inside and outside alternating in random order (seed %d).",
		orDash(f.Commit), orDash(f.Date), orDash(loadAvg(f.LoadAvgStart)), f.Rounds, f.Warmup, f.Seed)
	t := newTable("workload", "what", ">outside ns/op p50", ">inside ns/op p50", ">overhead (p50)", ">outside p95", ">inside p95",
		">outside p99", ">inside p99", "goal", "result")
	for _, group := range []bool{true, false} {
		for _, r := range f.Results {
			seccomp := slices.Contains(seccompWorkloads, r.Name)
			if seccomp != group {
				continue
			}
			over := r.OverheadPct
			if r.OutsideNs > 0 {
				over = (r.InsideNs/r.OutsideNs - 1) * 100
			}
			kind := "file I/O overhead"
			a.grp = gFileIO
			if seccomp {
				kind = "syscall overhead"
				a.grp = gSyscall
			}
			id := "syscall." + r.Name
			a.fig(id+".inside_ns", r.Name+", inside, ns/op p50", "ns", r.InsideNs, "lower")
			a.fig(id+".outside_ns", r.Name+", outside, ns/op p50", "ns", r.OutsideNs, "lower")
			g, res := "—", "—"
			if seccomp {
				g = goalSyscall.String()
				res = verdict(a.goalFig(id+".overhead_pct", kind+", "+r.Name+" (p50 inside / outside − 1)", "%", over, "lower", goalSyscall))
			} else {
				a.fig(id+".overhead_pct", kind+", "+r.Name+" (p50 inside / outside − 1)", "%", over, "lower")
			}
			t.add(r.Name, oneLine(r.What), fmt.Sprintf("%.1f", r.OutsideNs), fmt.Sprintf("%.1f", r.InsideNs), pct(over),
				fmt.Sprintf("%.1f", r.OutsideP95), fmt.Sprintf("%.1f", r.InsideP95),
				fmt.Sprintf("%.1f", r.OutsideP99), fmt.Sprintf("%.1f", r.InsideP99), g, res)
			a.row(headRow{Figure: kind + ": " + r.Name, Goal: g,
				P50: fmt.Sprintf("%.1f ns in, %.1f out", r.InsideNs, r.OutsideNs), P95: fmt.Sprintf("%.1f ns in, %.1f out", r.InsideP95, r.OutsideP95),
				P99: fmt.Sprintf("%.1f ns in, %.1f out", r.InsideP99, r.OutsideP99), Ratio: pct(over), Result: res})
		}
	}
	var b strings.Builder
	b.WriteString(t.String())
	var ops []string
	for _, r := range f.Results {
		if r.Ops > 0 {
			ops = append(ops, fmt.Sprintf("%s %d", r.Name, r.Ops))
		}
	}
	if len(ops) > 0 {
		fmt.Fprintf(&b, "\nOperations per loop: %s.\n", strings.Join(ops, ", "))
	}
	runErrors(&b, a, &f.Run)
	sec.Body = b.String()
	return sec
}

// runErrors writes the failures of a run's envelope, if it failed, and
// notes them as not measured.
func runErrors(b *strings.Builder, a *analysis, h *schema.Run) {
	if !h.Failed {
		return
	}
	fmt.Fprintf(b, "\n**The run failed** (bench/%s exited non-zero):\n\n", h.Bench)
	for _, e := range h.Errors {
		fmt.Fprintf(b, "- %s\n", code(firstN(e, 300)))
	}
	a.missing("bench/%s reported failures (see its section): its figures may be incomplete.", h.Bench)
}

func policySection(in *Inputs, a *analysis) *section {
	sec := &section{Bench: "policy", File: "policy.json"}
	a.grp, a.bench = gPolicy, "policy"
	f := in.Policy
	if f == nil {
		a.missing("Policy decisions (bench/policy): not run in this invocation (no policy.json).")
		a.row(headRow{Figure: "policy decision", Goal: goalPolicy.String(), P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		return sec
	}
	sec.Ran = true
	sec.Meta = fmt.Sprintf("Run: commit %s, %s; each request decided %d times after %d warm-up decisions, the requests in a random order (seed %d).",
		orDash(f.Commit), orDash(f.Date), f.Rounds, f.Warmup, f.Seed)
	t := newTable("request", "effect", ">p50 µs", ">p95 µs", ">p99 µs", ">max µs")
	var over []string
	for _, r := range f.Requests {
		u := r.Micros
		t.add(code(r.Request), r.Effect, num(u.P50), num(u.P95), num(u.P99), num(u.Max))
		if u.P99 >= goalPolicy.target {
			over = append(over, fmt.Sprintf("%s (p99 %s µs)", code(r.Request), num(u.P99)))
		}
	}
	mix := f.Mix.Micros
	t.add("**"+orDash(f.Mix.Request)+" (mix)**", "", "**"+num(mix.P50)+"**", "**"+num(mix.P95)+"**", "**"+num(mix.P99)+"**", num(mix.Max))
	a.statFigs("policy.mix", "policy decision, mix", "µs", &mix)
	met := a.setGoal("policy.mix.p99_us", goalPolicy)
	if mix.N == 0 {
		met = false
	}
	ratioCell := fmt.Sprintf("%d of %d requests with p99 ≥ %s µs", len(over), len(f.Requests), trimNum(goalPolicy.target))
	a.row(headRow{Figure: fmt.Sprintf("policy decision (mix of %d requests, 100 rules)", len(f.Requests)), Goal: goalPolicy.String(),
		P50: num(mix.P50) + " µs", P95: num(mix.P95) + " µs", P99: num(mix.P99) + " µs", Ratio: ratioCell, Result: verdict(met)})
	for _, r := range f.Requests {
		a.fig("policy."+figKey(r.Request)+".p50_us", "policy decision "+r.Request+", p50", "µs", r.Micros.P50, "lower")
		a.fig("policy."+figKey(r.Request)+".p99_us", "policy decision "+r.Request+", p99", "µs", r.Micros.P99, "lower")
	}
	var b strings.Builder
	b.WriteString(t.String())
	fmt.Fprintf(&b, "\n- Compiling the policy (three layers): p50 %s µs, p95 %s µs (%d runs).\n", num(f.Compile.P50), num(f.Compile.P95), f.Compile.N)
	a.fig("policy.compile.p50_us", "policy compile, p50", "µs", f.Compile.P50, "lower")
	if len(over) > 0 {
		fmt.Fprintf(&b, "- Requests whose p99 reaches the goal's %s µs: %s.\n", trimNum(goalPolicy.target), strings.Join(over, "; "))
	}
	if len(f.Spec) > 0 {
		b.WriteString("\nCompiling the policy into a sandbox spec, searching the bound workspace:\n\n")
		st := newTable("workspace", ">entries", ">searched", ">restrictions", ">p50 ms", ">p95 ms")
		for _, s := range f.Spec {
			st.add(s.Workspace, fmt.Sprint(s.Entries), fmt.Sprint(s.Walked), fmt.Sprint(s.Restrict), num(s.Micros.P50/1000), num(s.Micros.P95/1000))
			a.fig("policy.spec."+figKey(s.Workspace)+".p50_us", "sandbox spec compile, "+s.Workspace+", p50", "µs", s.Micros.P50, "lower")
		}
		b.WriteString(st.String())
	}
	runErrors(&b, a, &f.Run)
	sec.Body = b.String()
	return sec
}

// figKey turns a free-form name into part of a figure ID.
func figKey(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

func netproxySection(in *Inputs, a *analysis) *section {
	sec := &section{Bench: "netproxy", File: "netproxy.json"}
	a.grp, a.bench = gProxy, "netproxy"
	f := in.Netproxy
	if f == nil {
		a.missing("Egress proxy throughput and connect latency (bench/netproxy): not run in this invocation (no netproxy.json).")
		a.row(headRow{Figure: "egress proxy throughput", Goal: "p50 ≥ 80% of direct", P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		a.row(headRow{Figure: "egress proxy, added connect latency", Goal: goalConnect.String(), P50: "—", P95: "—", P99: "—", Ratio: "—", Result: "not run in this invocation"})
		return sec
	}
	sec.Ran = true
	sec.Meta = fmt.Sprintf("Run: commit %s, %s; a %d MiB download, %d rounds per way after %d warm-up rounds and %d fresh connections per way, the ways in a random order each round (seed %d).",
		orDash(f.Commit), orDash(f.Date), f.SizeBytes>>20, f.Rounds, f.Warmup, f.Connects, f.Seed)
	t := newTable("way", ">MB/s p50", ">slowest run MB/s", ">ratio to its reference (p50)", "goal", "result")
	var b strings.Builder
	for gi, group := range [][]schema.NetproxyRow{f.Throughput, f.Sandbox} {
		if len(group) == 0 {
			if gi == 1 {
				why := "bench/netproxy without a moat binary"
				if f.SandboxSkipped != "" {
					why = strings.TrimSuffix(oneLine(f.SandboxSkipped), ".")
				}
				a.missing("bench/netproxy inside a sandbox (curl in `moat run --net proxy`): not measured in this run (%s).", why)
			}
			continue
		}
		ref := group[0]
		for i, r := range group {
			id := "netproxy." + figKey(r.Name)
			a.fig(id+".mb_per_s.p50", r.Name+", throughput p50", "MB/s", r.MBps.P50, "higher")
			if i == 0 || ref.MBps.P50 <= 0 {
				t.add(r.Name+" (reference)", num(r.MBps.P50), num(r.MBps.Min), "1.00×", "—", "—")
				continue
			}
			rr := r.MBps.P50 / ref.MBps.P50
			met := a.goalFig(id+".ratio", r.Name+", throughput p50 / "+ref.Name+" p50", "×", rr, "higher", goalProxyRatio)
			t.add(r.Name, num(r.MBps.P50), num(r.MBps.Min), ratio(rr), "≥ 0.80×", verdict(met))
			a.row(headRow{Figure: "egress proxy throughput: " + r.Name, Goal: "p50 ≥ 80% of " + ref.Name,
				P50: num(r.MBps.P50) + " MB/s", P95: "—", P99: "—", Ratio: fmt.Sprintf("%s of %s (%s MB/s)", ratio(rr), ref.Name, num(ref.MBps.P50)), Result: verdict(met)})
		}
	}
	b.WriteString(t.String())
	if len(f.Latency) > 0 {
		fmt.Fprintf(&b, "\nConnect and a tiny request on a fresh connection, %d per way:\n\n", f.Connects)
		lt := newTable("way", ">p50 ms", ">p95 ms", ">p99 ms")
		for _, l := range f.Latency {
			lt.add(l.Name, num(l.Ms.P50), num(l.Ms.P95), num(l.Ms.P99))
			a.fig("netproxy.connect."+figKey(l.Name)+".p50_ms", "connect + request, "+l.Name+", p50", "ms", l.Ms.P50, "lower")
			a.fig("netproxy.connect."+figKey(l.Name)+".p99_ms", "connect + request, "+l.Name+", p99", "ms", l.Ms.P99, "lower")
		}
		b.WriteString(lt.String())
	}
	if len(f.Latency) >= 2 {
		direct, proxy := f.Latency[0], f.Latency[1]
		added := proxy.Ms.P50 - direct.Ms.P50
		met := a.goalFig("netproxy.connect.added_p50_ms", "added connect latency through the proxy, p50", "ms", added, "lower", goalConnect)
		fmt.Fprintf(&b, "\nAdded p50 connect latency (%s p50 − %s p50): %+.3f ms (goal %s): %s.\n", proxy.Name, direct.Name, added, goalConnect.String(), strings.Trim(verdict(met), "*"))
		a.row(headRow{Figure: "egress proxy, added connect latency (" + proxy.Name + " − " + direct.Name + ")", Goal: goalConnect.String(),
			P50: fmt.Sprintf("%+.3f ms", added), P95: fmt.Sprintf("%+.3f ms", proxy.Ms.P95-direct.Ms.P95), P99: fmt.Sprintf("%+.3f ms", proxy.Ms.P99-direct.Ms.P99),
			Ratio: "proxy / direct " + ratio(proxy.Ms.P50/direct.Ms.P50), Result: verdict(met)})
	} else {
		a.missing("bench/netproxy connect latency: fewer than two ways in netproxy.json.")
	}
	for _, fl := range f.Errors {
		fmt.Fprintf(&b, "\n**FAILED**: %s\n", code(firstN(fl, 300)))
	}
	if len(f.Errors) > 0 {
		a.missing("bench/netproxy: %d transfer(s) failed.", len(f.Errors))
	}
	sec.Body = b.String()
	return sec
}
