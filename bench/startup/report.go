package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
)

// report is the whole result, as written to --json.
type report struct {
	Machine machineInfo    `json:"machine"`
	Config  config         `json:"config"`
	Systems []systemResult `json:"systems"`
	// Failed is true when some system had a failed run; the program then
	// exits non-zero.
	Failed bool `json:"failed"`
}

// machineInfo is the host, with what this benchmark adds.
type machineInfo struct {
	machine.Host
	LoadAvg string `json:"loadavg"` // /proc/loadavg when the benchmark started
	// Versions maps each prepared system to its version (moat, bwrap…).
	Versions map[string]string `json:"versions"`
	// MoatCommit is the git commit of the working tree (with "-dirty" when
	// it has changes), when the benchmark runs inside a checkout.
	MoatCommit string `json:"moat_commit,omitempty"`
	Date       string `json:"date"` // RFC 3339, UTC, start of the run
}

type config struct {
	Command       string `json:"command"`
	Rounds        int    `json:"rounds"`
	Warmup        int    `json:"warmup"`
	Seed          uint64 `json:"seed"`
	RunTimeoutSec int    `json:"run_timeout_s"`
	Order         string `json:"order"`
	Timing        string `json:"timing"`
	Percentiles   string `json:"percentiles"`
	DurationSec   int    `json:"duration_s"`
}

// systemResult is one row. Statistics are in milliseconds over the
// successful measured runs; they and the ratios are null when there is
// none (skipped system, every run failed, reference row missing).
type systemResult struct {
	Name    string   `json:"name"`
	About   string   `json:"about"`
	Command string   `json:"command"` // shell-quoted
	Argv    []string `json:"argv"`
	N       int      `json:"n"`      // successful measured runs
	Failed  int      `json:"failed"` // failed runs, warm-up included
	// Errors holds the first few failures, verbatim.
	Errors        []string `json:"errors,omitempty"`
	Min           *float64 `json:"min_ms"`
	P50           *float64 `json:"p50_ms"`
	P95           *float64 `json:"p95_ms"`
	P99           *float64 `json:"p99_ms"`
	Mean          *float64 `json:"mean_ms"`
	Stddev        *float64 `json:"stddev_ms"`
	RatioToMoat   *float64 `json:"ratio_to_moat"`
	RatioToBare   *float64 `json:"ratio_to_bare"`
	SkippedReason string   `json:"skipped_reason,omitempty"`
	// SamplesMs are the measured times in the order they were taken.
	SamplesMs []float64 `json:"samples_ms,omitempty"`
}

// setStats fills the statistics columns from the samples.
func (r *systemResult) setStats() {
	s, ok := stats.Summarize(r.SamplesMs)
	r.N = s.N
	if !ok {
		return
	}
	p := func(v float64) *float64 { return &v }
	r.Min, r.P50, r.P95, r.P99 = p(s.Min), p(s.P50), p(s.P95), p(s.P99)
	r.Mean, r.Stddev = p(s.Mean), p(s.Stddev)
}

// collectMachine records the host and toolchain; versions are filled in as
// systems are prepared.
func collectMachine(start time.Time) machineInfo {
	return machineInfo{
		Host:       machine.Describe(),
		LoadAvg:    machine.LoadAvg(),
		Versions:   map[string]string{},
		MoatCommit: machine.GitCommit(),
		Date:       start.UTC().Format(time.RFC3339),
	}
}

func fmtMs(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.3f", *v)
}

func fmtRatio(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f×", *v)
}

// markdown renders the report: the machine line, the table, the exact
// commands and notes on skipped or failing systems.
func markdown(rep *report) string {
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, "# moat start-up benchmark\n\n")
	fmt.Fprintf(&b, "Machine: Linux %s, %s, %d × %s, %s, uid %d", m.Kernel, m.OS, m.CPUs, m.CPUModel, m.GoVersion, m.UID)
	for _, s := range rep.Systems {
		if v, ok := m.Versions[s.Name]; ok && s.Name != "bare" {
			fmt.Fprintf(&b, ", %s: %s", s.Name, v)
		}
	}
	if m.MoatCommit != "" {
		fmt.Fprintf(&b, ", moat commit %s", m.MoatCommit)
	}
	fmt.Fprintf(&b, "; %s; load average at start %s.\n\n", m.Date, m.LoadAvg)

	c := rep.Config
	fmt.Fprintf(&b, "Cold start of `%s`: %d measured rounds after %d warm-up rounds; each round runs every system once, "+
		"in a fresh random order (seed %d). Wall-clock time from fork to exit of each run (`cmd.Run()`). "+
		"Percentiles interpolate linearly between ranks.\n\n", c.Command, c.Rounds, c.Warmup, c.Seed)

	b.WriteString("| system | p50 ms | p95 ms | p99 ms | ratio (p50 / moat p50) | ratio (p50 / bare p50) |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|\n")
	for _, s := range rep.Systems {
		if s.SkippedReason != "" {
			fmt.Fprintf(&b, "| %s | skipped | | | | |\n", s.Name)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", s.Name,
			fmtMs(s.P50), fmtMs(s.P95), fmtMs(s.P99), fmtRatio(s.RatioToMoat), fmtRatio(s.RatioToBare))
	}

	b.WriteString("\nMore (ms): ")
	var more []string
	for _, s := range rep.Systems {
		if s.SkippedReason != "" {
			continue
		}
		more = append(more, fmt.Sprintf("%s n=%d failed=%d min=%s mean=%s stddev=%s",
			s.Name, s.N, s.Failed, fmtMs(s.Min), fmtMs(s.Mean), fmtMs(s.Stddev)))
	}
	b.WriteString(strings.Join(more, "; "))
	b.WriteString(".\n\nCommands:\n\n")
	for _, s := range rep.Systems {
		if s.SkippedReason != "" {
			fmt.Fprintf(&b, "- %s: skipped: %s\n", s.Name, s.SkippedReason)
			continue
		}
		fmt.Fprintf(&b, "- %s: `%s`\n", s.Name, s.Command)
	}
	var failing []string
	for _, s := range rep.Systems {
		if s.Failed > 0 {
			msg := fmt.Sprintf("- %s: %d failed run(s)", s.Name, s.Failed)
			if len(s.Errors) > 0 {
				msg += "; first: `" + strings.ReplaceAll(s.Errors[0], "`", "'") + "`"
			}
			failing = append(failing, msg)
		}
	}
	if len(failing) > 0 {
		b.WriteString("\n**FAILED runs** (the benchmark exits non-zero):\n\n")
		b.WriteString(strings.Join(failing, "\n"))
		b.WriteString("\n")
	}
	return b.String()
}
