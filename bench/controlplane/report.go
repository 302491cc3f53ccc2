package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
)

// report is the whole result, as written to --json. Times are in
// milliseconds, memory in KiB.
type report struct {
	Machine machineInfo `json:"machine"`
	// Command is the benchmark's own command line.
	Command string     `json:"command"`
	Config  config     `json:"config"`
	Daemon  daemonInfo `json:"daemon"`
	// TTI holds the time-to-interactive rows: the moat API sequential
	// and in bursts, then the one-shot references.
	TTI    []row        `json:"tti"`
	Bursts *burstResult `json:"bursts,omitempty"`
	Exec   *row         `json:"exec_round_trip,omitempty"`
	Soak   *soakResult  `json:"soak,omitempty"`
	// Memory holds snapshots of the daemon and its sandboxes between
	// phases (the soak's per-second samples are in soak.memory).
	Memory []memSnapshot `json:"memory"`
	Goals  []goal        `json:"goals"`
	// Errors are failures outside any row (daemon start or stop…).
	Errors []string `json:"errors,omitempty"`
	// Failed is true when any sample or call failed, the daemon did not
	// exit 0, or a result could not be written: the program exits 1.
	Failed bool `json:"failed"`
}

// machineInfo is the host, with what this benchmark adds.
type machineInfo struct {
	machine.Host
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
	MoatVersion  string `json:"moat_version"`
	BwrapVersion string `json:"bwrap_version,omitempty"`
	MoatCommit   string `json:"moat_commit,omitempty"` // "-dirty" when the tree has changes
	Date         string `json:"date"`                  // RFC 3339, UTC, start of the run
}

type config struct {
	Iterations     int     `json:"iterations"`
	Warmup         int     `json:"warmup"`
	Burst          int     `json:"burst"`
	Bursts         int     `json:"bursts"`
	ExecIterations int     `json:"exec_iterations"`
	ExecWarmup     int     `json:"exec_warmup"`
	SoakSec        float64 `json:"soak_s"`
	SoakSandboxes  int     `json:"soak_sandboxes"`
	FileEvery      int     `json:"file_every"`
	Seed           uint64  `json:"seed"`
	CallTimeoutSec float64 `json:"call_timeout_s"`
	Timing         string  `json:"timing"`
	Percentiles    string  `json:"percentiles"`
	DurationSec    float64 `json:"duration_s"`
}

type daemonInfo struct {
	Command  string  `json:"command"`
	URL      string  `json:"url"`
	StopMs   float64 `json:"stop_ms"`   // SIGTERM to exit
	ExitedOK bool    `json:"exited_ok"` // exited 0 after SIGTERM
	LogLines int     `json:"log_lines"`
	// Connections counts the TCP connections the benchmark's clients
	// opened to the daemon over the whole run (keep-alive reuses them).
	Connections int64 `json:"connections"`
	// LogProblems counts log lines at WARN or ERROR; FirstProblems are
	// the first few, verbatim.
	LogProblems   int      `json:"log_problems"`
	FirstProblems []string `json:"first_problems,omitempty"`
}

// row is one timed series. Stats are over its successful measured
// samples; nil when there is none.
type row struct {
	Name string `json:"name"`
	// Mode is "sequential" or "bursts of N"; Kind is api, moat-run,
	// bwrap or bare.
	Mode    string `json:"mode,omitempty"`
	Kind    string `json:"kind,omitempty"`
	About   string `json:"about"`
	Command string `json:"command,omitempty"`
	N       int    `json:"n"`
	Failed  int    `json:"failed"` // failed samples, warm-up included
	// Errors holds the first few failures, verbatim.
	Errors []string       `json:"errors,omitempty"`
	Stats  *stats.Summary `json:"stats_ms"`
	// Create and FirstExec split the moat API's TTI into its two calls.
	Create         *stats.Summary `json:"create_ms,omitempty"`
	FirstExec      *stats.Summary `json:"first_exec_ms,omitempty"`
	RatioToBwrap   *float64       `json:"ratio_to_bwrap"`
	RatioToMoatRun *float64       `json:"ratio_to_moat_run"`
	SkippedReason  string         `json:"skipped_reason,omitempty"`
	SamplesMs      []float64      `json:"samples_ms,omitempty"` // in the order taken

	argv             []string // a one-shot row's command
	createMs, execMs []float64
}

// Kinds of time-to-interactive rows.
const (
	kindAPI   = "api"
	kindRun   = "moat-run"
	kindBwrap = "bwrap"
	kindBare  = "bare"
)

// maxErrors is how many failures a row or phase keeps verbatim.
const maxErrors = 5

func (r *row) fail(phase string, err error) {
	r.Failed++
	if len(r.Errors) < maxErrors {
		r.Errors = append(r.Errors, phase+": "+err.Error())
	}
}

func (r *row) setStats() {
	r.Stats = stats.Of(r.SamplesMs)
	r.Create = stats.Of(r.createMs)
	r.FirstExec = stats.Of(r.execMs)
	if r.Stats != nil {
		r.N = r.Stats.N
	}
}

type burstResult struct {
	Size int `json:"size"`
	// MakespanMs: from the start of a burst until its last sandbox
	// answered its echo.
	Makespan   *stats.Summary `json:"makespan_ms"`
	MakespanMs []float64      `json:"makespan_samples_ms"`
}

type soakResult struct {
	Sandboxes  int     `json:"sandboxes"` // running during the soak
	ElapsedSec float64 `json:"elapsed_s"` // first call to last answer
	Calls      int     `json:"calls"`     // HTTP calls made (exec, file.write, file.read)
	Errors     int     `json:"errors"`
	// FirstErrors holds the first few failures, verbatim.
	FirstErrors []string       `json:"first_errors,omitempty"`
	Throughput  float64        `json:"calls_per_s"`
	Latency     *stats.Summary `json:"latency_ms"` // every successful call
	// ByKind splits Latency by call: exec, file.write, file.read.
	ByKind map[string]*stats.Summary `json:"latency_by_kind_ms"`
	Create *stats.Summary            `json:"create_ms"` // the soak's sandboxes, 10 at a time
	Delete *stats.Summary            `json:"delete_ms"` // the same, deleted 10 at a time
	// Daemon memory: VmRSS sampled every second (peak, last), VmHWM at
	// the end with the sandboxes still running.
	DaemonRSSStartKB int64 `json:"daemon_rss_start_kb"`
	DaemonRSSPeakKB  int64 `json:"daemon_rss_peak_kb"`
	DaemonRSSLastKB  int64 `json:"daemon_rss_last_kb"`
	DaemonHWMKB      int64 `json:"daemon_hwm_kb"`
	// The sandboxes' processes (the daemon's descendants) at the sample
	// where their summed VmRSS peaked, and their PSS at the end.
	SandboxPeakRSSKB int64  `json:"sandbox_peak_rss_kb"`
	SandboxPeakProcs int    `json:"sandbox_peak_procs"`
	SandboxEndPSSKB  *int64 `json:"sandbox_end_pss_kb"`
	// PerSecond is the calls of each second of the soak.
	PerSecond []second `json:"per_second"`
	// Memory is the per-second samples.
	Memory []memSnapshot `json:"memory"`
	// ServerLatency holds the daemon's own view (/metrics histograms, over
	// the whole run) of the operations' durations, in ms: op → quantile → ms.
	ServerLatency map[string]map[string]float64 `json:"server_latency_ms,omitempty"`
}

// second summarises the calls started in one second of the soak.
type second struct {
	T      int     `json:"t"`
	Calls  int     `json:"calls"`
	Errors int     `json:"errors"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

type goal struct {
	Name   string   `json:"name"`
	Target string   `json:"target"`
	Value  *float64 `json:"value"`
	Met    *bool    `json:"met"` // nil when not measured
}

func collectMachine(start time.Time) machineInfo {
	return machineInfo{
		Host:         machine.Describe(),
		LoadAvgStart: machine.LoadAvg(),
		MoatCommit:   machine.GitCommit(),
		Date:         start.UTC().Format(time.RFC3339),
	}
}

func ratio(num, den *stats.Summary) *float64 {
	if num == nil || den == nil || den.P50 <= 0 {
		return nil
	}
	r := num.P50 / den.P50
	return &r
}

func f3(v float64) string { return fmt.Sprintf("%.3f", v) }

func fmtRatio(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f×", *v)
}

func mib(kb int64) string { return fmt.Sprintf("%.1f", float64(kb)/1024) }

func yesNo(met *bool) string {
	switch {
	case met == nil:
		return "not measured"
	case *met:
		return "**met**"
	default:
		return "**not met**"
	}
}

// markdown renders the report.
func markdown(rep *report) string {
	var b strings.Builder
	m := rep.Machine
	c := rep.Config
	b.WriteString("# moat control-plane benchmark\n\n")
	fmt.Fprintf(&b, "Machine: Linux %s, %s, %d × %s, %s, uid %d, %s", m.Kernel, m.OS, m.CPUs, m.CPUModel, m.GoVersion, m.UID, m.MoatVersion)
	if m.BwrapVersion != "" {
		fmt.Fprintf(&b, ", %s", m.BwrapVersion)
	}
	if m.MoatCommit != "" {
		fmt.Fprintf(&b, ", commit %s", m.MoatCommit)
	}
	fmt.Fprintf(&b, "; %s; load average at start %s, at end %s; the run took %.0f s.\n\n", m.Date, m.LoadAvgStart, m.LoadAvgEnd, c.DurationSec)
	fmt.Fprintf(&b, "Command: `%s`\n\nDaemon: `%s`", rep.Command, rep.Daemon.Command)
	if rep.Daemon.URL != "" {
		fmt.Fprintf(&b, " (%s)", rep.Daemon.URL)
	}
	b.WriteString(".\n\n")

	// Goals first: the figures the issue asks about.
	if len(rep.Goals) > 0 {
		b.WriteString("| goal | target | measured | |\n|---|---|--:|---|\n")
		for _, g := range rep.Goals {
			v := "—"
			if g.Value != nil {
				v = f3(*g.Value)
				if strings.HasPrefix(g.Target, "0 ") {
					v = fmt.Sprintf("%.0f", *g.Value)
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Name, g.Target, v, yesNo(g.Met))
		}
		b.WriteString("\n")
	}

	if len(rep.TTI) > 0 {
		b.WriteString("## Time to interactive\n\n")
		fmt.Fprintf(&b, "Wall time from sending \"create a sandbox\" (`POST /v1/sandboxes {}`) until the first `echo hello` in it "+
			"(`POST /v1/sandboxes/ID/exec`) has answered exit 0 and stdout `hello\\n`, over keep-alive HTTP connections; "+
			"the sandbox is deleted after each sample (not timed). Sequential: %d samples after %d warm-up rounds, each round "+
			"runs every row once in a fresh random order (seed %d), so the one-shot references below are taken interleaved "+
			"with the API samples. Bursts: %d burst(s) of %d concurrent create+echo (after %d warm-up burst), one sample per sandbox; "+
			"each burst round also runs the one-shot references that many at once, in a fresh random order. "+
			"One-shot rows: one process that builds a sandbox, runs `echo hello` and exits, timed fork to reaped exit "+
			"(its create and first echo are one process).\n\n",
			c.Iterations, c.Warmup, c.Seed, c.Bursts, c.Burst, min(c.Warmup, 1))
		b.WriteString("| mode | system | n | p50 ms | p95 ms | p99 ms | mean ms | min ms | p50 / bwrap p50 | p50 / moat run p50 |\n")
		b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range rep.TTI {
			name := r.Name
			if r.Kind == kindAPI {
				name = "**" + name + "**"
			}
			if r.SkippedReason != "" {
				fmt.Fprintf(&b, "| %s | %s | skipped | | | | | | | |\n", r.Mode, name)
				continue
			}
			if r.Stats == nil {
				fmt.Fprintf(&b, "| %s | %s | 0 | — | — | — | — | — | — | — |\n", r.Mode, name)
				continue
			}
			s := r.Stats
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", r.Mode, name, s.N,
				f3(s.P50), f3(s.P95), f3(s.P99), f3(s.Mean), f3(s.Min), fmtRatio(r.RatioToBwrap), fmtRatio(r.RatioToMoatRun))
		}
		b.WriteString("\nRatios compare rows of the same mode.\n\n")
		for _, r := range rep.TTI {
			if r.Create != nil && r.FirstExec != nil {
				fmt.Fprintf(&b, "- %s, %s, split: create p50 %s / p99 %s ms, first echo p50 %s / p99 %s ms.\n", r.Name, r.Mode,
					f3(r.Create.P50), f3(r.Create.P99), f3(r.FirstExec.P50), f3(r.FirstExec.P99))
			}
		}
		if bu := rep.Bursts; bu != nil && bu.Makespan != nil {
			fmt.Fprintf(&b, "- Burst makespan (start of a burst of %d until its last echo answered): p50 %s ms, max %s ms.\n",
				bu.Size, f3(bu.Makespan.P50), f3(bu.Makespan.Max))
		}
		seen := map[string]bool{}
		for _, r := range rep.TTI {
			if seen[r.Name] || r.Kind == kindAPI {
				continue
			}
			seen[r.Name] = true
			if r.Command != "" {
				fmt.Fprintf(&b, "- %s: `%s`\n", r.Name, r.Command)
			} else if r.SkippedReason != "" {
				fmt.Fprintf(&b, "- %s: skipped: %s\n", r.Name, r.SkippedReason)
			}
		}
		b.WriteString("\n")
	}

	if r := rep.Exec; r != nil {
		b.WriteString("## Round trip of one exec\n\n")
		fmt.Fprintf(&b, "`POST /v1/sandboxes/ID/exec {\"args\":[\"echo\",\"hello\"]}` in one existing sandbox, %d sequential calls after %d warm-up calls, "+
			"one keep-alive connection; each answer checked (exit 0, stdout `hello\\n`).\n\n", c.ExecIterations, c.ExecWarmup)
		b.WriteString("| n | p50 ms | p95 ms | p99 ms | mean ms | min ms | max ms |\n|--:|--:|--:|--:|--:|--:|--:|\n")
		if s := r.Stats; s != nil {
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s |\n\n", s.N, f3(s.P50), f3(s.P95), f3(s.P99), f3(s.Mean), f3(s.Min), f3(s.Max))
		} else {
			b.WriteString("| 0 | — | — | — | — | — | — |\n\n")
		}
	}

	if s := rep.Soak; s != nil {
		b.WriteString("## Soak\n\n")
		fmt.Fprintf(&b, "%d sandboxes, one worker each with its own keep-alive HTTP client, calling for %.0f s: `exec echo WORD` "+
			"(stdout checked), and after every %dth exec a file write (`PUT …/files?path=/workspace/soak.txt`) and a read "+
			"checking the content. Every HTTP call counts as a call.\n\n", c.SoakSandboxes, c.SoakSec, c.FileEvery)
		b.WriteString("| figure | value |\n|---|--:|\n")
		fmt.Fprintf(&b, "| sandboxes running | %d |\n", s.Sandboxes)
		fmt.Fprintf(&b, "| calls | %d |\n", s.Calls)
		fmt.Fprintf(&b, "| errors | %d |\n", s.Errors)
		fmt.Fprintf(&b, "| throughput, calls/s | %.1f |\n", s.Throughput)
		if l := s.Latency; l != nil {
			fmt.Fprintf(&b, "| latency of all calls p50 / p95 / p99 / max, ms | %s / %s / %s / %s |\n", f3(l.P50), f3(l.P95), f3(l.P99), f3(l.Max))
		}
		for _, k := range []string{"exec", "file.write", "file.read"} {
			if l := s.ByKind[k]; l != nil {
				fmt.Fprintf(&b, "| %s (n=%d) p50 / p95 / p99 / max, ms | %s / %s / %s / %s |\n", k, l.N, f3(l.P50), f3(l.P95), f3(l.P99), f3(l.Max))
			}
		}
		if l := s.Create; l != nil {
			fmt.Fprintf(&b, "| create of the %d sandboxes, 10 at a time, p50 / p99 / max, ms | %s / %s / %s |\n", l.N, f3(l.P50), f3(l.P99), f3(l.Max))
		}
		if l := s.Delete; l != nil {
			fmt.Fprintf(&b, "| delete, 10 at a time, p50 / p99 / max, ms | %s / %s / %s |\n", f3(l.P50), f3(l.P99), f3(l.Max))
		}
		fmt.Fprintf(&b, "| daemon VmRSS before the soak / peak / last, MiB | %s / %s / %s |\n", mib(s.DaemonRSSStartKB), mib(s.DaemonRSSPeakKB), mib(s.DaemonRSSLastKB))
		fmt.Fprintf(&b, "| daemon VmHWM at the end of the soak, MiB | %s |\n", mib(s.DaemonHWMKB))
		fmt.Fprintf(&b, "| sandbox processes at their peak: count, summed VmRSS MiB | %d, %s |\n", s.SandboxPeakProcs, mib(s.SandboxPeakRSSKB))
		if s.SandboxEndPSSKB != nil && s.Sandboxes > 0 {
			fmt.Fprintf(&b, "| sandbox processes at the end: summed PSS MiB (per sandbox) | %s (%s) |\n", mib(*s.SandboxEndPSSKB), mib(*s.SandboxEndPSSKB/int64(s.Sandboxes)))
		}
		if len(s.PerSecond) > 0 {
			// The last bucket holds only the file calls that followed an
			// exec started before the deadline: not a full second.
			full := s.PerSecond[:min(len(s.PerSecond), max(1, int(c.SoakSec)))]
			lo, hi := full[0].Calls, full[0].Calls
			for _, p := range full {
				lo, hi = min(lo, p.Calls), max(hi, p.Calls)
			}
			worst := s.PerSecond[0]
			for _, p := range s.PerSecond {
				if p.MaxMs > worst.MaxMs {
					worst = p
				}
			}
			fmt.Fprintf(&b, "| calls started per second, min / max over the soak's %d full seconds | %d / %d |\n", len(full), lo, hi)
			fmt.Fprintf(&b, "| slowest call | %s ms in second %d |\n", f3(worst.MaxMs), worst.T)
		}
		b.WriteString("\n")
		if len(s.ServerLatency) > 0 {
			b.WriteString("The daemon's own view (its `/metrics` histograms over the whole run, quantiles estimated as histogram_quantile does, ms):")
			for _, op := range slices.Sorted(maps.Keys(s.ServerLatency)) {
				q := s.ServerLatency[op]
				fmt.Fprintf(&b, " %s p50 %s, p99 %s;", op, f3(q["0.5"]), f3(q["0.99"]))
			}
			b.WriteString("\n\n")
		}
		if len(s.FirstErrors) > 0 {
			b.WriteString("First soak errors:\n\n")
			for _, e := range s.FirstErrors {
				fmt.Fprintf(&b, "- `%s`\n", strings.ReplaceAll(e, "`", "'"))
			}
			b.WriteString("\n")
		}
	}

	if len(rep.Memory) > 0 {
		b.WriteString("## Memory between phases\n\n")
		b.WriteString("| phase | at s | daemon VmRSS MiB | daemon VmHWM MiB | threads | fds | sandbox procs | their VmRSS MiB | their PSS MiB |\n")
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, s := range rep.Memory {
			pss := "—"
			if s.SandboxPSSKB != nil {
				pss = mib(*s.SandboxPSSKB)
			}
			fmt.Fprintf(&b, "| %s | %.1f | %s | %s | %d | %d | %d | %s | %s |\n", s.Phase, s.AtSec, mib(s.DaemonRSSKB), mib(s.DaemonHWMKB),
				s.DaemonThreads, s.DaemonFDs, s.SandboxProcs, mib(s.SandboxRSSKB), pss)
		}
		b.WriteString("\n")
	}

	d := rep.Daemon
	fmt.Fprintf(&b, "Connections opened to the daemon over the run: %d (keep-alive). Daemon stop: SIGTERM → exit in %s ms, exited 0: %v. "+
		"Its log: %d lines, %d at WARN or ERROR.\n", d.Connections, f3(d.StopMs), d.ExitedOK, d.LogLines, d.LogProblems)
	for _, l := range d.FirstProblems {
		fmt.Fprintf(&b, "- `%s`\n", strings.ReplaceAll(l, "`", "'"))
	}

	var failing []string
	for _, e := range rep.Errors {
		failing = append(failing, "- "+e)
	}
	rows := append([]row(nil), rep.TTI...)
	if rep.Exec != nil {
		rows = append(rows, *rep.Exec)
	}
	for _, r := range rows {
		if r.Failed > 0 {
			name := r.Name
			if r.Mode != "" {
				name += ", " + r.Mode
			}
			msg := fmt.Sprintf("- %s: %d failed sample(s)", name, r.Failed)
			if len(r.Errors) > 0 {
				msg += "; first: `" + strings.ReplaceAll(r.Errors[0], "`", "'") + "`"
			}
			failing = append(failing, msg)
		}
	}
	if rep.Soak != nil && rep.Soak.Errors > 0 {
		failing = append(failing, fmt.Sprintf("- soak: %d failed call(s)", rep.Soak.Errors))
	}
	if len(failing) > 0 {
		b.WriteString("\n**FAILED** (the benchmark exits non-zero):\n\n")
		b.WriteString(strings.Join(failing, "\n"))
		b.WriteString("\n")
	}
	return b.String()
}
