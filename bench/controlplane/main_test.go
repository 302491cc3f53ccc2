package main

import (
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/internal/procfs"
	"github.com/moat-sandbox/moat/bench/render"
	"github.com/moat-sandbox/moat/bench/schema"
)

func TestParseHistograms(t *testing.T) {
	text := strings.Join([]string{
		`moat_call_duration_seconds_bucket{op="process.exec",le="0.001"} 0`,
		`moat_call_duration_seconds_bucket{op="process.exec",le="0.002"} 50`,
		`moat_call_duration_seconds_bucket{op="process.exec",le="0.01"} 100`,
		`moat_call_duration_seconds_bucket{op="process.exec",le="+Inf"} 100`,
		`moat_call_duration_seconds_sum{op="process.exec"} 0.3`,
		`moat_calls_total{op="process.exec",code="ok"} 100`,
	}, "\n")
	got := parseHistograms(text, "moat_call_duration_seconds")
	if len(got) != 1 || math.Abs(got["process.exec"]["0.5"]-2) > 1e-9 || math.Abs(got["process.exec"]["0.99"]-9.84) > 1e-9 {
		t.Errorf("parseHistograms = %v", got)
	}
}

func TestFinishRatios(t *testing.T) {
	seq := func(name, kind string, samples ...float64) *row {
		r := newRow(name, "sequential", kind, "")
		r.SamplesMs = samples
		return r
	}
	burst := func(name, kind string, samples ...float64) *row {
		r := newRow(name, "bursts of 10", kind, "")
		r.SamplesMs = samples
		return r
	}
	tti := []*row{
		seq("moat API", schema.KindAPI, 8, 8, 8),
		seq("run", schema.KindRun, 4, 4),
		seq("bwrap", schema.KindBwrap, 2),
		burst("moat API", schema.KindAPI, 30),
		burst("bwrap", schema.KindBwrap, 10),
	}
	exec := newRow("exec", "", "", "")
	exec.SamplesMs = []float64{2, 4}
	rep := &schema.Controlplane{Run: schema.Run{Bench: "controlplane"}}
	finish(rep, tti, exec)
	api := rep.TTI[0]
	if api.N != 3 || api.RatioToBwrap == nil || *api.RatioToBwrap != 4 || api.RatioToMoatRun == nil || *api.RatioToMoatRun != 2 {
		t.Errorf("sequential: n %d, ratios %v %v", api.N, api.RatioToBwrap, api.RatioToMoatRun)
	}
	b := rep.TTI[3]
	if b.RatioToBwrap == nil || *b.RatioToBwrap != 3 || b.RatioToMoatRun != nil {
		t.Errorf("burst ratios %v %v (want 3 and none: no moat run burst row)", b.RatioToBwrap, b.RatioToMoatRun)
	}
	if rep.Exec == nil || rep.Exec.Stats == nil || rep.Exec.Stats.P50 != 3 {
		t.Errorf("exec row %+v", rep.Exec)
	}
	if rep.Failed {
		t.Error("failed without a failure")
	}
	tti[1].Failed = 1
	finish(rep, tti, exec)
	if !rep.Failed {
		t.Error("a failed sample did not fail the run")
	}
	// The markdown is bench/render's, from the results.
	md, err := render.Markdown(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| sequential | **moat API** | 3 | 8.000 |", "4.00×", "**The run failed**"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestMarkdownEmptyReport(t *testing.T) {
	rep := &schema.Controlplane{Run: schema.Run{Bench: "controlplane", Errors: []string{"starting the daemon: no"}}}
	finish(rep, nil, nil)
	md, err := render.Markdown(rep)
	if err != nil || !strings.Contains(md, "starting the daemon: no") {
		t.Errorf("markdown (%v):\n%s", err, md)
	}
}

func TestParseFlags(t *testing.T) {
	moat := filepath.Join(t.TempDir(), "moat")
	if err := os.WriteFile(moat, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--moat", moat, "--rounds", "7", "--seed", "3"}, io.Discard)
	if err != nil || o.Rounds != 7 || o.execCalls != 21 || o.Seed != 3 || o.Warmup != 5 || o.bursts() != 1 {
		t.Fatalf("parseFlags = %+v, %v", o, err)
	}
	for _, args := range [][]string{{"--moat", moat, "--burst", "0"}, {"--moat", moat, "--rounds", "0"}, {"--moat", filepath.Join(t.TempDir(), "none")}} {
		if _, err := parseFlags(args, io.Discard); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("parseFlags(%v) = %v, want a usage error", args, err)
		}
	}
}

func TestDescendants(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if got := procfs.Descendants(os.Getpid()); !slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("descendants(self) = %v, lacks %d", got, cmd.Process.Pid)
	}
	if m := snapshot(os.Getpid(), "t", 0, true); m.DaemonRSSKB <= 0 || m.SandboxProcs < 1 || m.SandboxPSSKB == nil {
		t.Errorf("snapshot = %+v", m)
	}
}
