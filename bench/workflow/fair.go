package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// fairness runs the fairness workflow --fair-runs times.
func (b *bench) fairness(ctx context.Context) *schema.WorkflowFairness {
	o := b.o
	f := &schema.WorkflowFairness{Steps: o.fairSteps, CPUs: o.fairCPUs, WindowSec: o.fairWindow.Seconds(), SettleSec: o.fairSettle.Seconds(),
		LeadSec: o.fairLead.Seconds(),
		Method: fmt.Sprintf("%d steps of `bash -c` in one parallel group with budget.cpus %s, snapshot none, no max_parallel. "+
			"Each sleeps until a common start (%s after the submit), then spins in a loop of shell builtins; "+
			"%s after the start (every step spinning by then) and at the end, %s later, it prints the clock and bash's `times` "+
			"(its own and its children's CPU): its CPU time in that window over the window's length is its rate in CPUs. "+
			"Group CPUs = the sum of the steps' rates; a step's deviation = its rate / the mean rate − 1. "+
			"A step that began to spin after the measurement's start is late.",
			o.fairSteps, strconv.FormatFloat(o.fairCPUs, 'f', -1, 64), o.fairLead, o.fairSettle, o.fairWindow),
		Runs: []schema.WorkflowFairRun{}}
	for i := range o.fairRuns {
		if ctx.Err() != nil {
			break
		}
		fr := b.fairRun(ctx)
		f.Runs = append(f.Runs, fr)
		b.logf("fairness run %d of %d: %s, group %.3f CPUs (results: %.3f; other processes %.3f, CPUs busy %v), rate deviation max %.1f%% p95 %.1f%%, %d late, %d of %d reported, ready after %.1f s, spinning after %.0f ms",
			i+1, o.fairRuns, fr.State, fr.GroupCPUs, fr.APIGroupCPUs, fr.OtherCPUs, fr.HostCPUBusy, fr.MaxDevPct, fr.P95DevPct, fr.Late, fr.Reported, o.fairSteps, fr.ReadySec, fr.SpinSpreadMs)
	}
	return f
}

// fairRun runs the fairness workflow once and analyses what its steps
// reported.
func (b *bench) fairRun(ctx context.Context) schema.WorkflowFairRun {
	o := b.o
	submit := time.Now()
	start := submit.Add(o.fairLead)
	w := window{startUs: start.UnixMicro(), fromUs: start.Add(o.fairSettle).UnixMicro(), endUs: start.Add(o.fairSettle + o.fairWindow).UnixMicro()}
	stepTimeout := o.fairLead + o.fairSettle + o.fairWindow + o.callTimeout
	// The machine's CPUs in the window: what the group did not get may
	// have gone to other processes.
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	windowEnd := time.UnixMicro(w.endUs)
	host := hostBusy(hctx, time.UnixMicro(w.fromUs), windowEnd)
	out, err := b.runWorkflow(ctx, fairDoc("bench-fairness", o.fairSteps, o.fairCPUs, w, stepTimeout), stepTimeout+o.callTimeout)
	if time.Now().Before(windowEnd) {
		hcancel() // the run ended before its window did: no reading
	}
	hr := <-host
	fr := schema.WorkflowFairRun{Steps: []schema.WorkflowFairStep{}}
	if out != nil {
		fr.WallSec = out.wall.Seconds()
		if out.run != nil {
			fr.Run, fr.State = out.run.ID, out.run.State
		}
	}
	if err != nil {
		fr.Error = err.Error()
		fail(b.rep, "fairness: %v", err)
	}
	if out == nil || out.run == nil {
		return fr
	}
	var in []fairInput
	for i := 1; i <= o.fairSteps; i++ {
		id := stepID("b", i, o.fairSteps)
		s := findStep(out.run, id)
		if s == nil || s.Result == nil {
			fail(b.rep, "fairness run %s: step %s has no result", out.run.ID, id)
			continue
		}
		rp, err := parseReport(s.Result.Stdout)
		if err != nil {
			fail(b.rep, "fairness run %s: step %s: %v", out.run.ID, id, err)
			continue
		}
		in = append(in, fairInput{id: id, report: rp, apiCPUMs: s.Result.CPUUserMs + s.Result.CPUSysMs})
	}
	analyse(&fr, in, w, o.fairSteps)
	if hr.err == nil {
		fr.HostCPUBusy = hr.busy
		var sum float64
		for _, v := range hr.busy {
			sum += v
		}
		fr.OtherCPUs = round(math.Max(0, sum-fr.GroupCPUs), 4)
	} else if err == nil {
		fail(b.rep, "fairness: reading /proc/stat in the window: %v", hr.err)
	}
	if len(in) > 0 {
		last := slices.MaxFunc(in, func(x, y fairInput) int { return int(x.report.arriveUs - y.report.arriveUs) })
		fr.ReadySec = float64(last.report.arriveUs-submit.UnixMicro()) / 1e6
	}
	if fr.Late > 0 {
		b.logf("fairness: %d step(s) began to spin after the measurement's start: raise --fair-lead (every step was ready %.1f s after the submit) or --fair-settle (the last began to spin %.0f ms after the start)",
			fr.Late, fr.ReadySec, fr.SpinSpreadMs)
	}
	return fr
}

// report is what a fairness step printed: the clock (µs since the epoch)
// when it started, when its loop began, at the measurement's beginning
// and end, and its CPU time (ms, its own and its children's) at both.
type report struct {
	arriveUs, spinUs, beginUs, endUs int64
	cpuBeginMs, cpuEndMs             float64
}

// fairInput is one step's report and its result's CPU time.
type fairInput struct {
	id       string
	report   report
	apiCPUMs int64
}

// parseReport reads a fairness step's stdout (fairScript).
func parseReport(stdout string) (report, error) {
	var r report
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 8 {
		return r, fmt.Errorf("report of %d lines, want 8: %q", len(lines), firstN(stdout, 300))
	}
	clock := func(line, word string) (int64, error) {
		v, ok := strings.CutPrefix(line, word+" ")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if !ok || err != nil || n <= 0 {
			return 0, fmt.Errorf("want %q and a clock, got %q", word, line)
		}
		return n, nil
	}
	var err error
	for _, c := range []struct {
		line int
		word string
		v    *int64
	}{{0, "arrive", &r.arriveUs}, {1, "spin", &r.spinUs}, {2, "begin", &r.beginUs}, {5, "end", &r.endUs}} {
		if *c.v, err = clock(lines[c.line], c.word); err != nil {
			return r, err
		}
	}
	if r.cpuBeginMs, err = timesMs(lines[3], lines[4]); err != nil {
		return r, err
	}
	if r.cpuEndMs, err = timesMs(lines[6], lines[7]); err != nil {
		return r, err
	}
	if r.endUs <= r.beginUs || r.cpuEndMs < r.cpuBeginMs {
		return r, fmt.Errorf("the window's end (%d µs, %.0f ms of CPU) is not after its beginning (%d µs, %.0f ms)", r.endUs, r.cpuEndMs, r.beginUs, r.cpuBeginMs)
	}
	return r, nil
}

// timesMs sums the four times of bash's `times` (user and system of the
// shell, then of its children: "0m0.012s 0m0.004s"), in ms.
func timesMs(lines ...string) (float64, error) {
	var sum float64
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 2 {
			return 0, fmt.Errorf("not a line of times: %q", l)
		}
		for _, t := range f {
			m, s, ok := strings.Cut(strings.TrimSuffix(t, "s"), "m")
			mins, err1 := strconv.ParseFloat(m, 64)
			secs, err2 := strconv.ParseFloat(strings.ReplaceAll(s, ",", "."), 64)
			if !ok || !strings.HasSuffix(t, "s") || err1 != nil || err2 != nil {
				return 0, fmt.Errorf("not a time of times: %q", t)
			}
			sum += (mins*60 + secs) * 1000
		}
	}
	return sum, nil
}

// analyse fills fr from the steps' reports of a run in window w, n steps
// having run: each step's rate (CPU in its window over the window), the
// group's (their sum) and each rate's deviation from the mean.
func analyse(fr *schema.WorkflowFairRun, in []fairInput, w window, n int) {
	fr.Reported = len(in)
	if fr.Reported < n && fr.Error == "" {
		fr.Error = fmt.Sprintf("%d of %d steps reported", fr.Reported, n)
	}
	if len(in) == 0 {
		return
	}
	var apiTotal int64
	for _, x := range in {
		r := x.report
		st := schema.WorkflowFairStep{ID: x.id, APICPUMs: x.apiCPUMs, CPUMs: r.cpuEndMs - r.cpuBeginMs,
			WindowMs: float64(r.endUs-r.beginUs) / 1000,
			ArriveMs: float64(r.arriveUs-w.startUs) / 1000, SpinMs: float64(r.spinUs-w.startUs) / 1000,
			BeginMs: float64(r.beginUs-w.fromUs) / 1000, EndMs: float64(r.endUs-w.endUs) / 1000}
		st.CPUs = round(st.CPUMs/st.WindowMs, 5)
		fr.GroupCPUs += st.CPUMs / st.WindowMs
		apiTotal += x.apiCPUMs
		fr.SpinSpreadMs = math.Max(fr.SpinSpreadMs, st.SpinMs)
		if r.spinUs > w.fromUs {
			fr.Late++
		}
		fr.Steps = append(fr.Steps, st)
	}
	fr.GroupCPUs = round(fr.GroupCPUs, 5)
	fr.APIGroupCPUs = round(float64(apiTotal)/(float64(w.endUs-w.startUs)/1000), 5)
	mean := fr.GroupCPUs / float64(len(in))
	if mean <= 0 {
		fr.Error = strings.TrimPrefix(fr.Error+"; no step used CPU in its window", "; ")
		return
	}
	devs := make([]float64, 0, len(in))
	for i := range fr.Steps {
		st := &fr.Steps[i]
		st.DevPct = round((st.CPUMs/st.WindowMs/mean-1)*100, 2)
		devs = append(devs, math.Abs(st.DevPct))
	}
	slices.Sort(devs)
	fr.MaxDevPct = devs[len(devs)-1]
	fr.P95DevPct = round(stats.Percentile(devs, 0.95), 2)
}

// round rounds v to d decimals.
func round(v float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(v*p) / p
}
