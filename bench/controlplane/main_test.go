package main

import (
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bench/internal/procfs"
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

func TestFinishRatiosAndGoals(t *testing.T) {
	rep := &report{
		TTI: []row{
			{Name: "moat API", Mode: "sequential", Kind: kindAPI, SamplesMs: []float64{8, 8, 8}},
			{Name: "run", Mode: "sequential", Kind: kindRun, SamplesMs: []float64{4, 4}},
			{Name: "bwrap", Mode: "sequential", Kind: kindBwrap, SamplesMs: []float64{2}},
			{Name: "moat API", Mode: "bursts of 10", Kind: kindAPI, SamplesMs: []float64{30}},
			{Name: "bwrap", Mode: "bursts of 10", Kind: kindBwrap, SamplesMs: []float64{10}},
		},
		Exec: &row{Name: "exec", SamplesMs: []float64{2, 4}},
	}
	finish(rep)
	api := rep.TTI[0]
	if api.RatioToBwrap == nil || *api.RatioToBwrap != 4 || api.RatioToMoatRun == nil || *api.RatioToMoatRun != 2 {
		t.Errorf("sequential ratios %v %v", api.RatioToBwrap, api.RatioToMoatRun)
	}
	burst := rep.TTI[3]
	if burst.RatioToBwrap == nil || *burst.RatioToBwrap != 3 || burst.RatioToMoatRun != nil {
		t.Errorf("burst ratios %v %v (want 3 and none: no moat run burst row)", burst.RatioToBwrap, burst.RatioToMoatRun)
	}
	if len(rep.Goals) != 3 || !*rep.Goals[0].Met || *rep.Goals[1].Met || *rep.Goals[2].Met {
		t.Errorf("goals %+v", rep.Goals)
	}
	if rep.Failed {
		t.Error("failed without a failure")
	}
	rep.TTI[1].Failed = 1
	finish(rep)
	if !rep.Failed {
		t.Error("a failed sample did not fail the run")
	}
	md := markdown(rep)
	for _, want := range []string{"| sequential | **moat API** | 3 | 8.000 |", "4.00×", "**FAILED**"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestMarkdownEmptyReport(t *testing.T) {
	rep := &report{Errors: []string{"starting the daemon: no"}}
	finish(rep)
	if md := markdown(rep); !strings.Contains(md, "starting the daemon: no") {
		t.Errorf("markdown:\n%s", md)
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
