package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bench/internal/stats"
)

func TestParseLevels(t *testing.T) {
	got, err := parseLevels(" 1, 10,100 ,1000,")
	if err != nil || !slices.Equal(got, []int{1, 10, 100, 1000}) {
		t.Fatalf("parseLevels = %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "10,1", "1,1", "0", "-3", "x", "20001"} {
		if _, err := parseLevels(bad); err == nil {
			t.Errorf("parseLevels(%q) accepted", bad)
		}
	}
}

func TestParseFlagsRejects(t *testing.T) {
	for _, args := range [][]string{{"--samples", "0"}, {"--warmup", "-1"}, {"--call-timeout", "0s"}, {"extra"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%v) accepted", args)
		}
	}
	o, err := parseFlags(nil, io.Discard)
	if err != nil || !slices.Equal(o.levels, []int{1, 10, 100, 1000}) || o.seed == 0 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
}

func TestPerSandboxAndMarkdown(t *testing.T) {
	base := reading{tasks: 100, daemonFDs: 10}
	base.mem.Available, base.mem.Kernel, base.daemon.PSS = 1_000_000, 50_000, 10_000
	now := reading{tasks: 800, daemonFDs: 510, procs: 101, procsPSS: 150_000, procsPSSAnon: 147_000, procsThreads: 700}
	now.mem.Available, now.mem.Kernel, now.daemon.PSS = 750_000, 150_000, 25_000
	m := now.perSandbox(base, 100)
	if m.MoatPSSPerSandboxKiB != 1650 || m.SystemPerSandboxKiB != 2500 || m.KernelPerSandboxKiB != 1000 ||
		m.TasksPerSandbox != 7 || m.DaemonFDsPerSandbox != 5 {
		t.Fatalf("perSandbox = %+v", m)
	}

	r := &report{Levels: []level{{Live: 100, Memory: m, TTI: &stats.Summary{N: 1, P50: 12.5, P95: 14, P99: 15}}},
		Density: density{Live: 100, GoalLive: goalLive, GoalPSSKiB: goalPSSKiB, MoatPSSPerSandboxKiB: 1650,
			Projection: projection{Max: 3000, Limit: "pids", Limits: map[string]int{"pids": 3000, "memory": 9000}}}}
	r.fail("create sandbox 101 of 1000: boom")
	md := r.markdown()
	for _, want := range []string{"**100 live idle sandboxes held", "1650 KiB (1.61 MiB)", "not met", "| 100 |", "12.50 / 14.00 / 15.00",
		"about **3000** sandboxes, bound first by pids (pids 3000, memory 9000)", "create sandbox 101 of 1000: boom"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
