package main

import (
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
)

// report is bench/results/daemon.json.
type report struct {
	Machine machineInfo `json:"machine"`
	// Command is the benchmark's own command line.
	Command string   `json:"command"`
	Config  config   `json:"config"`
	Old     *oldInfo `json:"old"`
	// Flood holds one output flood per budget: the defaults, then the
	// small one.
	Flood      []floodResult     `json:"flood"`
	Throughput *throughputResult `json:"throughput,omitempty"`
	Auth       *authResult       `json:"auth,omitempty"`
	Record     *recordResult     `json:"record_call,omitempty"`
	Daemons    []daemonInfo      `json:"daemons"`
	Goals      []goal            `json:"goals"`
	// Errors are failures outside the figures (a daemon that did not
	// start or stop cleanly, a failed call…).
	Errors []string `json:"errors,omitempty"`
	Failed bool     `json:"failed"`
}

type machineInfo struct {
	machine.Host
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
	MoatVersion  string `json:"moat_version"`
	MoatCommit   string `json:"moat_commit,omitempty"` // "-dirty" when the tree has changes
	Date         string `json:"date"`                  // RFC 3339, UTC, start of the run
}

type config struct {
	Tenants       int     `json:"tenants"`
	Execs         int     `json:"execs"`
	ExecMiB       int     `json:"exec_mib"`
	Background    int     `json:"background"`
	BackgroundMiB int     `json:"background_mib"`
	SampleEveryMs int64   `json:"sample_every_ms"`
	AfterSec      float64 `json:"after_s"`
	Levels        []int   `json:"levels"`
	Rounds        int     `json:"rounds"`
	WindowSec     float64 `json:"window_s"`
	AuthClients   int     `json:"auth_clients"`
	AuthWindowSec float64 `json:"auth_window_s"`
	AuthRounds    int     `json:"auth_rounds"`
	Benchtime     string  `json:"benchtime"`
	Seed          uint64  `json:"seed"`
	Timing        string  `json:"timing"`
	Percentiles   string  `json:"percentiles"`
	DurationSec   float64 `json:"duration_s"`
}

// oldInfo is the daemon "today": the commit before issue 17.
type oldInfo struct {
	Ref           string  `json:"ref,omitempty"`    // as given (--old)
	Commit        string  `json:"commit,omitempty"` // full hash
	Subject       string  `json:"subject,omitempty"`
	Version       string  `json:"moat_version,omitempty"`
	BuildSec      float64 `json:"build_s,omitempty"`
	SkippedReason string  `json:"skipped_reason,omitempty"`
}

// daemonInfo is one daemon the benchmark ran.
type daemonInfo struct {
	Role        string   `json:"role"` // "flood default", "new", "old"…
	Command     string   `json:"command"`
	StopMs      float64  `json:"stop_ms"`
	ExitedOK    bool     `json:"exited_ok"`
	LogLines    int      `json:"log_lines"`
	LogProblems int      `json:"log_problems"`
	FirstProbs  []string `json:"first_problems,omitempty"`
}

type goal struct {
	Name   string   `json:"name"`
	Target string   `json:"target"`
	Value  *float64 `json:"value"`
	Met    *bool    `json:"met"`
}

// finish sets the goals and whether the run failed.
func finish(rep *report) {
	for _, f := range rep.Flood {
		v := float64(f.PeakGrowthKiB)
		met := f.PeakGrowthKiB <= f.GoalKiB
		rep.Goals = append(rep.Goals, goal{Name: "daemon peak RSS growth under the output flood, " + f.Name,
			Target: fmt.Sprintf("≤ the documented bound: budget + max(budget/4, 16 MiB) + 256 KiB per call (%d KiB)", f.GoalKiB), Value: &v, Met: &met})
		a := 0.0
		if f.Accounted {
			a = 1
		}
		acc := f.Accounted
		rep.Goals = append(rep.Goals, goal{Name: "every byte printed accounted for, " + f.Name, Target: "all", Value: &a, Met: &acc})
		if !f.Accounted {
			rep.Failed = true
		}
		rep.Failed = rep.Failed || f.Failed > 0
	}
	if t := rep.Throughput; t != nil {
		for _, l := range t.Levels {
			if l.Ratio != nil {
				met := *l.Ratio >= 1
				r := *l.Ratio
				rep.Goals = append(rep.Goals, goal{Name: fmt.Sprintf("durable exec throughput new / old, %d client(s)", l.Clients),
					Target: "≥ 1.0×", Value: &r, Met: &met})
			}
			for _, s := range []*tpSide{l.New, l.Old} {
				if s != nil && s.Errors > 0 {
					rep.Failed = true
				}
			}
		}
	}
	if a := rep.Auth; a != nil {
		for _, s := range []*authSide{a.New, a.Old} {
			if s != nil && s.Other > 0 {
				rep.Failed = true
			}
		}
	}
	if r := rep.Record; r != nil && len(r.Errors) > 0 {
		rep.Failed = true
	}
	for _, d := range rep.Daemons {
		if !d.ExitedOK {
			rep.Failed = true
		}
	}
	rep.Failed = rep.Failed || len(rep.Errors) > 0
}

func mib(kib int64) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }

func sizeStr(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprint(n)
}

func ratioStr(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f×", *v)
}

func statStr(s *stats.Summary) (string, string, string) {
	if s == nil {
		return "—", "—", "—"
	}
	return fmt.Sprintf("%.2f", s.P50), fmt.Sprintf("%.2f", s.P95), fmt.Sprintf("%.2f", s.P99)
}

// markdown is the benchmark's own report (bench/report writes the one in
// docs/PERFORMANCE.md from the JSON).
func markdown(rep *report) string {
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, "# moat serve under exhaustion (bench/daemon)\n\n")
	fmt.Fprintf(&b, "Linux %s, %s, %d × %s, %s; load average %s at the start, %s at the end; commit %s; %s; %.0f s.\n\n",
		m.Kernel, m.OS, m.CPUs, m.CPUModel, m.GoVersion, m.LoadAvgStart, m.LoadAvgEnd, m.MoatCommit, m.Date, rep.Config.DurationSec)
	fmt.Fprintf(&b, "Command: `%s`; new daemon: %s.\n", rep.Command, m.MoatVersion)
	if o := rep.Old; o != nil {
		if o.SkippedReason != "" {
			fmt.Fprintf(&b, "Old daemon: not run: %s.\n", o.SkippedReason)
		} else {
			fmt.Fprintf(&b, "Old daemon: %s (%s), %s.\n", o.Commit, o.Subject, o.Version)
		}
	}
	if len(rep.Flood) > 0 {
		b.WriteString("\n## Output flood\n\n")
		b.WriteString("| budget | baseline RSS MiB | peak growth MiB (HWM) | goal MiB | RSS growth after the end MiB | printed MiB | in answers MiB | on disk MiB | lost bytes | accounted |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
		for _, f := range rep.Flood {
			fmt.Fprintf(&b, "| %s (%s / %s) | %s | %s (%s) | %s | %s | %.0f | %.1f | %.1f | %d | %v |\n", f.Name, sizeStr(f.MemoryBudget), sizeStr(f.TenantMemoryBudget),
				mib(f.BaselineRSSKiB), mib(f.PeakGrowthKiB), mib(f.HWMKiB-f.BaselineRSSKiB), mib(f.GoalKiB), mib(f.AfterEndGrowthKiB),
				float64(f.Exec.Printed+f.Background.Printed)/(1<<20), float64(f.Exec.Returned)/(1<<20), float64(f.Exec.FileBytes)/(1<<20),
				f.Background.LostBytes, f.Accounted)
		}
		for _, f := range rep.Flood {
			for _, e := range f.AccountingErrors {
				fmt.Fprintf(&b, "- %s: %s\n", f.Name, e)
			}
		}
	}
	if t := rep.Throughput; t != nil {
		b.WriteString("\n## Durable exec throughput (`/bin/true`), new against old\n\n")
		b.WriteString("| clients | new calls/s | new p50 / p95 / p99 ms | old calls/s | old p50 / p95 / p99 ms | new / old |\n|--:|--:|---|--:|---|--:|\n")
		for _, l := range t.Levels {
			row := []string{fmt.Sprint(l.Clients)}
			for _, s := range []*tpSide{l.New, l.Old} {
				if s == nil {
					row = append(row, "—", "—")
					continue
				}
				p50, p95, p99 := statStr(s.Latency)
				row = append(row, fmt.Sprintf("%.0f", s.CallsPerS), p50+" / "+p95+" / "+p99)
			}
			row = append(row, ratioStr(l.Ratio))
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
	}
	if r := rep.Record; r != nil {
		b.WriteString("\n## BenchmarkRecordCall (in-process, records/s)\n\n| writers | new | old | new / old |\n|--:|--:|--:|--:|\n")
		for _, w := range r.Writers {
			fmt.Fprintf(&b, "| %d | %.0f | %s | %s |\n", w.Writers, w.New, orDash(w.Old), ratioStr(w.Ratio))
		}
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	if a := rep.Auth; a != nil {
		b.WriteString("\n## Auth flood (bad tokens)\n\n| daemon | requests | answered/s | 401 | 429 | audit events | per 1000 | tape bytes per 1000 |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, s := range []*authSide{a.New, a.Old} {
			if s == nil {
				continue
			}
			fmt.Fprintf(&b, "| %s | %d | %.0f | %d | %d | %d | %.2f | %.0f |\n", s.Daemon, s.Requests, s.PerSec, s.Unauthorized, s.Limited,
				s.AuditEvents, s.EventsPer1000, s.BytesPer1000)
		}
	}
	if len(rep.Errors) > 0 {
		b.WriteString("\n## Errors\n\n")
		for _, e := range rep.Errors {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	return b.String()
}

func orDash(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.0f", *v)
}
