package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/render"
	"github.com/moat-sandbox/moat/bench/schema"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/workflow"
)

func TestParseFlags(t *testing.T) {
	moat := filepath.Join(t.TempDir(), "moat")
	if err := os.WriteFile(moat, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--steps", "1"}, {"--fair-steps", "0"}, {"--fair-runs", "-1"}, {"--fair-window", "10ms"}, {"--fair-lead", "0s"},
		{"--fair-cpus", "0"}, {"--call-timeout", "0s"}, {"--rounds", "0", "--fair-runs", "0"}, {"--warmup", "-1"}, {"extra"},
	} {
		if _, err := parseFlags(append([]string{"--moat", moat}, args...), io.Discard); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("parseFlags(%v) = %v, want a usage error", args, err)
		}
	}
	o, err := parseFlags([]string{"--moat", moat}, io.Discard)
	if err != nil || o.steps != 10 || o.fairSteps != 100 || o.fairRuns != 1 || o.fairCPUs != 1 || o.fairLead != 10*time.Second || o.fairSettle != 2*time.Second || o.Rounds != 30 || o.Warmup != 2 || o.Seed == 0 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	if o, err := parseFlags([]string{"--moat", moat, "--rounds", "0"}, io.Discard); err != nil || o.Rounds != 0 {
		t.Errorf("--rounds 0 (only the fairness): %+v, %v", o, err)
	}
}

// compile checks a document as the daemon does.
func compile(t *testing.T, doc string) *workflow.Plan {
	t.Helper()
	p, err := workflow.Compile([]byte(doc), workflow.Options{CPUs: 2})
	if err != nil {
		t.Fatalf("the document does not compile: %v\n%s", err, doc)
	}
	return p
}

// The documents are valid workflows of the shape each row needs.
func TestDocuments(t *testing.T) {
	p := compile(t, chainDoc("c", 10, true))
	if len(p.Steps) != 10 || p.Steps[0].ID != "s01" || p.Steps[0].From != "" || p.Steps[9].ID != "s10" || p.Steps[9].From != "s09" {
		t.Errorf("chain from snapshots: %+v", p.Steps)
	}
	for i, s := range p.Steps {
		if s.Snapshot != workflow.SnapshotLight || s.Sh != chainScript || (i > 0 && !contains(s.Waits, p.Steps[i-1].ID)) {
			t.Errorf("chain step %s: snapshot %q, waits %v", s.ID, s.Snapshot, s.Waits)
		}
	}
	p = compile(t, chainDoc("c", 10, false))
	for _, s := range p.Steps {
		if s.Snapshot != workflow.SnapshotNone || s.From != "" {
			t.Errorf("chain without snapshots, step %s: snapshot %q, from %q", s.ID, s.Snapshot, s.From)
		}
	}
	p = compile(t, retryDoc("r", 3, true))
	last := p.Steps[2]
	if last.ID != "s3" || last.From != "s2" || last.Snapshot != workflow.SnapshotNone || last.Retry.Attempts != 2 ||
		last.Retry.From != workflow.FromSnapshot || last.Sh != retryScript || p.Steps[1].Snapshot != workflow.SnapshotLight {
		t.Errorf("retry chain: %+v", last)
	}
	p = compile(t, retryDoc("r", 3, false))
	if last := p.Steps[2]; last.Sh != chainScript || last.Retry.Attempts > 1 {
		t.Errorf("scratch chain: %+v", last)
	}
	p = compile(t, fairDoc("f", 100, 1, window{1_000_000, 2_000_000, 3_000_000}, 90*time.Second))
	if len(p.Steps) != 100 || len(p.Groups) != 1 {
		t.Fatalf("fairness: %d steps, %d groups", len(p.Steps), len(p.Groups))
	}
	g := p.Groups[0]
	if g.Mode != workflow.Parallel || g.MaxParallel != 0 || g.Budget == nil || g.Budget.CPUs != 1 {
		t.Errorf("fairness group: %+v budget %+v", g, g.Budget)
	}
	for _, s := range p.Steps {
		if len(s.Waits) != 0 || s.Timeout != 90*time.Second || s.Snapshot != workflow.SnapshotNone || s.Args[0] != "/bin/bash" {
			t.Errorf("fairness step %s: waits %v, timeout %s, args %q", s.ID, s.Waits, s.Timeout, s.Args)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// The fairness script, run by the host's bash over a short window,
// prints a report that parses, its loop inside the window.
func TestFairScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	start := time.Now().Add(100 * time.Millisecond)
	w := window{startUs: start.UnixMicro(), fromUs: start.Add(50 * time.Millisecond).UnixMicro(), endUs: start.Add(250 * time.Millisecond).UnixMicro()}
	out, err := exec.Command(bash, "-c", fairScript(w)).Output()
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseReport(string(out))
	if err != nil {
		t.Fatal(err)
	}
	if r.arriveUs > w.startUs || r.spinUs < w.startUs || r.beginUs < w.fromUs || r.endUs < w.endUs {
		t.Errorf("report %+v against the window %+v:\n%s", r, w, out)
	}
	if cpu, wall := r.cpuEndMs-r.cpuBeginMs, float64(r.endUs-r.beginUs)/1000; cpu <= 0 || cpu > wall+20 {
		t.Errorf("CPU in a %.0f ms window: %.0f ms", wall, cpu)
	}
}

func TestParseReport(t *testing.T) {
	good := "arrive 100\nspin 500\nbegin 1000\n0m0.002s 0m0.001s\n0m0.001s 0m0.000s\nend 21000\n0m0.020s 0m0.002s\n0m1.001s 0m0,000s\n"
	r, err := parseReport(good)
	if err != nil {
		t.Fatal(err)
	}
	if r.arriveUs != 100 || r.spinUs != 500 || r.beginUs != 1000 || r.endUs != 21000 || r.cpuBeginMs != 4 || math.Abs(r.cpuEndMs-1023) > 1e-9 {
		t.Errorf("parseReport = %+v", r)
	}
	for name, bad := range map[string]string{
		"short":        "arrive 1\nbegin 2\n",
		"no clock":     strings.Replace(good, "begin 1000", "begin x", 1),
		"bad times":    strings.Replace(good, "0m0.020s 0m0.002s", "0.020 0.002", 1),
		"end first":    strings.Replace(good, "end 21000", "end 10", 1),
		"wrong order":  strings.Replace(good, "arrive 100\nspin 500", "spin 500\narrive 100", 1),
		"no spin":      strings.Replace(good, "spin 500\n", "", 1),
		"one time":     strings.Replace(good, "0m0.020s 0m0.002s", "0m0.020s", 1),
		"CPU backward": strings.Replace(good, "0m0.020s 0m0.002s\n0m1.001s 0m0,000s", "0m0.000s 0m0.000s\n0m0.000s 0m0.000s", 1),
	} {
		if _, err := parseReport(bad); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestAnalyse(t *testing.T) {
	w := window{startUs: 1_000_000, fromUs: 3_000_000, endUs: 23_000_000} // a 20 s window after 2 s of settling
	rep := func(spinUs, beginUs int64, cpuMs float64) report {
		return report{arriveUs: 10, spinUs: spinUs, beginUs: beginUs, endUs: beginUs + 20_000_000, cpuBeginMs: 3, cpuEndMs: 3 + cpuMs}
	}
	in := []fairInput{
		{id: "b1", report: rep(w.startUs+2000, w.fromUs+300, 5200), apiCPUMs: 5710},
		{id: "b2", report: rep(w.startUs+3000, w.fromUs+100_000, 4800), apiCPUMs: 5310},
		{id: "b3", report: rep(w.fromUs+500_000, w.fromUs+500_000, 5000), apiCPUMs: 5508}, // late
		{id: "b4", report: rep(w.startUs+1000, w.fromUs+200, 5000), apiCPUMs: 5505},
	}
	var fr schema.WorkflowFairRun
	analyse(&fr, in, w, 5)
	if fr.Reported != 4 || fr.Late != 1 || math.Abs(fr.GroupCPUs-1) > 1e-9 || math.Abs(fr.APIGroupCPUs-22033.0/22000) > 1e-5 || fr.SpinSpreadMs != 2500 {
		t.Errorf("analyse: %+v", fr)
	}
	if fr.MaxDevPct != 4 || fr.Steps[0].DevPct != 4 || fr.Steps[1].DevPct != -4 || fr.Steps[3].DevPct != 0 || fr.Steps[0].CPUs != 0.26 {
		t.Errorf("deviations: max %v, steps %+v", fr.MaxDevPct, fr.Steps)
	}
	if s := fr.Steps[2]; s.BeginMs != 500 || s.SpinMs != 2500 || s.EndMs != 500 || s.WindowMs != 20000 || fr.Steps[0].ArriveMs != -999.99 {
		t.Errorf("times: %+v", s)
	}
	if !strings.Contains(fr.Error, "4 of 5 steps reported") {
		t.Errorf("a missing report is not noted: %q", fr.Error)
	}
	var idle schema.WorkflowFairRun
	analyse(&idle, []fairInput{{id: "b1", report: rep(w.startUs, w.fromUs, 0)}}, w, 1)
	if idle.Error == "" || idle.MaxDevPct != 0 {
		t.Errorf("no CPU at all: %+v", idle)
	}
}

// retryRun is a run whose step s3 failed once and passed once.
func retryRun(snap1, snap2 string) *api.WorkflowRun {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) *time.Time { v := t0.Add(time.Duration(ms) * time.Millisecond); return &v }
	return &api.WorkflowRun{ID: "wf-1", State: api.RunSucceeded, Steps: []api.WorkflowStep{{
		ID: "s3", State: api.StepSucceeded, Ended: at(160), Result: &sandbox.Result{Stdout: "3\n"},
		Attempts: []api.WorkflowAttempt{
			{Attempt: 1, StartSnapshot: snap1, State: api.StepFailed, Started: *at(0), Ended: at(100), Result: &sandbox.Result{ExitCode: 1}},
			{Attempt: 2, StartSnapshot: snap2, State: api.StepSucceeded, Started: *at(101), Ended: at(150), Result: &sandbox.Result{}},
		},
	}}}
}

func TestRetryCost(t *testing.T) {
	d, err := retryCost(retryRun("snap-a", "snap-a"), "s3")
	if err != nil || d != 60*time.Millisecond {
		t.Errorf("retryCost = %s, %v; want 60ms (the failed attempt's end to the step's end)", d, err)
	}
	if err := printed(retryRun("snap-a", "snap-a"), "s3", "3"); err != nil {
		t.Error(err)
	}
	if err := printed(retryRun("snap-a", "snap-a"), "s3", "4"); err == nil {
		t.Error("a wrong stdout passed")
	}
	for name, run := range map[string]*api.WorkflowRun{
		"another snapshot": retryRun("snap-a", "snap-b"),
		"fresh sandboxes":  retryRun("", ""),
	} {
		if _, err := retryCost(run, "s3"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	one := retryRun("snap-a", "snap-a")
	one.Steps[0].Attempts = one.Steps[0].Attempts[:1]
	if _, err := retryCost(one, "s3"); err == nil {
		t.Error("one attempt: accepted")
	}
	if _, err := retryCost(one, "s9"); err == nil {
		t.Error("a missing step: accepted")
	}
}

func TestPhases(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(seq uint64, ms int, typ, step string) api.WorkflowEvent {
		return api.WorkflowEvent{Seq: seq, Time: t0.Add(time.Duration(ms) * time.Millisecond), Type: typ, Step: step}
	}
	evs := []api.WorkflowEvent{
		ev(1, 0, api.WfRunStarted, ""),
		ev(2, 1, api.WfStepStarted, "s1"), ev(3, 20, api.WfStepSandbox, "s1"), ev(4, 30, api.WfStepSucceeded, "s1"),
		ev(6, 50, api.WfStepSandbox, "s2"), ev(5, 31, api.WfStepStarted, "s2"), ev(7, 60, api.WfStepSucceeded, "s2"), // out of order
		ev(8, 62, api.WfRunSucceeded, ""),
	}
	got := map[string][]float64{}
	for _, p := range phases(evs, nil) {
		got[p.name] = append(got[p.name], p.ms)
	}
	want := map[string][]float64{
		"run.started → step.started (first step)":                {1},
		"step.started → step.sandbox":                            {19, 19},
		"step.sandbox → step.succeeded":                          {10, 10},
		"handoff: step.succeeded (previous step) → step.started": {1},
		"step.succeeded (last step) → run.succeeded":             {2},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("phases = %v\nwant %v", got, want)
	}
	only := phases(evs, func(s string) bool { return s == "s2" })
	if len(only) != 3 || only[0].name != "handoff: step.succeeded (previous step) → step.started" {
		t.Errorf("phases of s2 = %+v", only)
	}
}

// The rows, ordered and summarised, render through bench/render with
// the goals judged against the baseline.
func TestRowsRender(t *testing.T) {
	rows := map[string]*row{}
	for kind, samples := range map[string][]float64{
		schema.WorkflowBaseline:   {20, 22, 24},
		schema.WorkflowChainLight: {250, 260, 270},
		schema.WorkflowRetry:      {15, 16, 17},
		schema.WorkflowScratch:    {90, 100, 110},
	} {
		steps := 0
		if kind == schema.WorkflowChainLight {
			steps = 10
		}
		r := newRow(kind, "what "+kind, steps)
		for _, v := range samples {
			r.add(v)
		}
		r.addPhases([]phase{{"a → b", 3}, {"b → c", 4}})
		rows[kind] = r
	}
	rep := &schema.Workflow{Run: schema.Run{Bench: "workflow"}, Config: schema.WorkflowConfig{ChainSteps: 10, RetrySteps: 3}, Rows: ordered(rows)}
	if len(rep.Rows) != 4 || rep.Rows[0].Kind != schema.WorkflowBaseline || rep.Rows[1].Kind != schema.WorkflowChainLight {
		t.Fatalf("ordered: %+v", rep.Rows)
	}
	if ps := rep.Row(schema.WorkflowChainLight).PerStep; ps == nil || ps.P50 != 26 {
		t.Errorf("per step: %+v", ps)
	}
	fail(rep, "round 2, retry: boom")
	md, err := render.Markdown(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"26.00 ms per step, 1.18× the cold create → first exec", "The goal (per step ≤ 1.5×) is met",
		"0.73× the baseline. The goal (≤ 1×) is met", "the retry is 6.25× faster",
		"| a → b | 1 |", "round 2, retry: boom", "not measured",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestCPUTimes(t *testing.T) {
	stat := func(cpu0, cpu1 string) string {
		return "cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 " + cpu0 + "\ncpu1 " + cpu1 + "\nintr 1 2 3\nctxt 99\n"
	}
	before, err := parseCPUTimes(strings.NewReader(stat("100 0 50 800 50 0 0 0 0 0", "10 0 10 900 0 0 0 80 0 0")))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseCPUTimes(strings.NewReader(stat("180 0 70 800 50 0 0 0 0 0", "30 0 10 960 0 0 0 100 7 7")))
	if err != nil {
		t.Fatal(err)
	}
	busy, err := after.busySince(before)
	// cpu0: 100 ticks, all busy; cpu1: 100 ticks, 20 busy (user), 60
	// idle, 20 stolen (guest time is in user already).
	if err != nil || len(busy) != 2 || busy[0] != 1 || busy[1] != 0.2 {
		t.Errorf("busySince = %v, %v", busy, err)
	}
	if _, err := parseCPUTimes(strings.NewReader("cpu 1 2 3 4 5\nintr 1\n")); err == nil {
		t.Error("a /proc/stat without per-CPU lines parsed")
	}
	if _, err := parseCPUTimes(strings.NewReader("cpu0 1 x 3 4 5\n")); err == nil {
		t.Error("a bad number parsed")
	}
	one, _ := parseCPUTimes(strings.NewReader("cpu0 1 2 3 4 5\n"))
	if _, err := after.busySince(one); err == nil {
		t.Error("readings of different CPU counts compared")
	}
	if _, err := readCPUTimes(); err != nil {
		t.Errorf("this machine's /proc/stat: %v", err)
	}
}
