package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/render"
	"github.com/moat-sandbox/moat/bench/schema"
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
	moat := filepath.Join(t.TempDir(), "moat")
	if err := os.WriteFile(moat, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--rounds", "0"}, {"--warmup", "-1"}, {"--call-timeout", "0s"}, {"extra"}, {"--levels", "10,1"}} {
		if _, err := parseFlags(append([]string{"--moat", moat}, args...), io.Discard); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("parseFlags(%v) = %v, want a usage error", args, err)
		}
	}
	o, err := parseFlags([]string{"--moat", moat}, io.Discard)
	if err != nil || !slices.Equal(o.levels, []int{1, 10, 100, 1000}) || o.Seed == 0 || o.Rounds != 20 || o.Warmup != 3 || o.Moat != moat {
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

	r := &schema.Density{Run: schema.Run{Bench: "density"}, Config: schema.DensityConfig{Levels: []int{100, 1000}},
		Levels: []schema.DensityLevel{{Live: 100, Memory: m, TTI: &stats.Summary{N: 1, P50: 12.5, P95: 14, P99: 15}}},
		Density: schema.DensityResult{Live: 100, MoatPSSPerSandboxKiB: 1650,
			Projection: &schema.Projection{Max: 3000, Limit: "pids", Limits: map[string]int{"pids": 3000, "memory": 9000}}}}
	fail(r, "create sandbox 101 of 1000: boom")
	md, err := render.Markdown(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**100 live idle sandboxes held", "1650 KiB (1.61 MiB)", "not met", "| 100 |", "12.50 / 14.00 / 15.00",
		"about 3000 sandboxes, bound first by pids (pids 3000, memory 9000)", "Level 1000: not reached", "create sandbox 101 of 1000: boom"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
