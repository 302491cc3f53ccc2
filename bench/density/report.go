package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/procfs"
	"github.com/moat-sandbox/moat/bench/internal/stats"
)

// report is the run's result, written as JSON (--json) and markdown.
type report struct {
	Machine   machineInfo `json:"machine"`
	Command   string      `json:"command"`
	Daemon    string      `json:"daemon"`
	Config    config      `json:"config"`
	Base      baseline    `json:"base"`
	Levels    []level     `json:"levels"`
	Density   density     `json:"density"`
	Teardown  *teardown   `json:"teardown"`
	DaemonLog daemonLog   `json:"daemon_log"`
	Failed    bool        `json:"failed"`
	Errors    []string    `json:"errors"`
}

type machineInfo struct {
	machine.Host
	MemTotalKiB  int64  `json:"mem_total_kib"`
	PIDMax       int    `json:"pid_max"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
	MoatVersion  string `json:"moat_version"`
	MoatCommit   string `json:"moat_commit"`
	Date         string `json:"date"`
}

type config struct {
	Levels  []int  `json:"levels"`
	Samples int    `json:"samples"`
	Warmup  int    `json:"warmup"`
	Seed    uint64 `json:"seed"`
	Timing  string `json:"timing"`
	Memory  string `json:"memory"`
}

// baseline is the machine with the daemon up and no sandbox.
type baseline struct {
	MemAvailableKiB int64 `json:"mem_available_kib"`
	KernelKiB       int64 `json:"kernel_kib"`
	DaemonPSSKiB    int64 `json:"daemon_pss_kib"`
	DaemonFDs       int   `json:"daemon_fds"`
	Tasks           int   `json:"tasks"`
}

// level is what was measured with Live idle sandboxes alive.
type level struct {
	Live       int            `json:"live"`
	FillSec    float64        `json:"fill_s"`    // creating the sandboxes added for this level
	Create     *stats.Summary `json:"create_ms"` // each of those creates
	TTI        *stats.Summary `json:"tti_ms"`    // API create → first echo of one more sandbox
	TTISamples []float64      `json:"tti_samples_ms"`
	Run        *stats.Summary `json:"run_ms"` // moat run -- /bin/true
	RunSamples []float64      `json:"run_samples_ms"`
	Memory     memory         `json:"memory"`
}

// memory is moat's and the machine's memory at one level; the per-sandbox
// figures divide the growth since the baseline by the live sandboxes.
type memory struct {
	SandboxProcs      int   `json:"sandbox_procs"`
	SandboxPSSKiB     int64 `json:"sandbox_pss_kib"`
	SandboxPSSAnonKiB int64 `json:"sandbox_pss_anon_kib"`
	DaemonPSSKiB      int64 `json:"daemon_pss_kib"`
	DaemonPSSBaseKiB  int64 `json:"daemon_pss_base_kib"`
	// MoatPSSPerSandboxKiB is moat's own memory per sandbox: the PSS of
	// the processes below the daemon plus the daemon's growth.
	MoatPSSPerSandboxKiB float64 `json:"moat_pss_per_sandbox_kib"`
	InitPSSPerSandboxKiB float64 `json:"init_pss_per_sandbox_kib"`
	// SystemPerSandboxKiB is MemAvailable's fall: everything, the
	// kernel's objects (namespaces, mounts, cgroups, tmpfs) included.
	SystemPerSandboxKiB float64 `json:"system_per_sandbox_kib"`
	KernelPerSandboxKiB float64 `json:"kernel_per_sandbox_kib"`
	ThreadsPerSandbox   float64 `json:"threads_per_sandbox"`
	TasksPerSandbox     float64 `json:"tasks_per_sandbox"`
	DaemonFDsPerSandbox float64 `json:"daemon_fds_per_sandbox"`
	DaemonThreads       int     `json:"daemon_threads"`
}

type density struct {
	Live                 int        `json:"live"` // the most sandboxes held alive at once
	GoalLive             int        `json:"goal_live"`
	GoalPSSKiB           int        `json:"goal_pss_kib"`
	MoatPSSPerSandboxKiB float64    `json:"moat_pss_per_sandbox_kib"`
	Met                  bool       `json:"met"`
	Projection           projection `json:"projection"`
}

// projection is an estimate, not a measurement: how many sandboxes each
// limit would allow at the costs measured, and the first to bind.
type projection struct {
	Max    int            `json:"max"`
	Limit  string         `json:"limit"`
	Limits map[string]int `json:"limits"`
}

type teardown struct {
	Deleted int            `json:"deleted"`
	Sec     float64        `json:"s"`
	Delete  *stats.Summary `json:"delete_ms"`
}

type daemonLog struct {
	Lines    int      `json:"lines"`
	Problems int      `json:"problems"` // WARN and ERROR lines
	First    []string `json:"first,omitempty"`
}

// maxErrors is how many failures the report keeps verbatim.
const maxErrors = 20

func (r *report) fail(format string, a ...any) {
	r.Failed = true
	if len(r.Errors) < maxErrors {
		r.Errors = append(r.Errors, fmt.Sprintf(format, a...))
	}
}

func newReport(o *options, args []string) *report {
	now := time.Now()
	mem, _ := procfs.ReadMeminfo()
	return &report{
		Machine: machineInfo{
			Host: machine.Describe(), MemTotalKiB: mem.Total, PIDMax: readInt("/proc/sys/kernel/pid_max"),
			LoadAvgStart: machine.LoadAvg(), MoatCommit: machine.GitCommit(), Date: now.UTC().Format(time.RFC3339),
		},
		Command: machine.ShellQuote(append([]string{"go", "run", "./bench/density"}, args...)),
		Config: config{
			Levels: o.levels, Samples: o.samples, Warmup: o.warmup, Seed: o.seed,
			Timing: "create → echo: wall time around the SDK's CreateSandbox and Exec calls over HTTP (delete untimed); " +
				"moat run: fork to reaped exit; the two alternate in a fresh random order each round",
			Memory: "PSS from /proc/PID/smaps_rollup of every process below the daemon, plus the daemon's PSS growth, " +
				"divided by the live sandboxes; system: MemAvailable's fall; kernel: Slab + KernelStack + PageTables growth",
		},
		Errors: []string{},
	}
}

// write saves the JSON and markdown and prints the markdown.
func (r *report) write(o *options, stdout io.Writer) error {
	if o.jsonPath != "" {
		if err := machine.WriteJSON(o.jsonPath, r); err != nil {
			return err
		}
	}
	md := r.markdown()
	if o.mdPath != "" {
		if err := os.WriteFile(o.mdPath, []byte(md), 0o644); err != nil {
			return err
		}
	}
	_, err := io.WriteString(stdout, md)
	return err
}

func kib(v float64) string { return fmt.Sprintf("%.0f", v) }

func p(s *stats.Summary, f func(*stats.Summary) float64) string {
	if s == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f", f(s))
}

func p50(s *stats.Summary) float64 { return s.P50 }
func p95(s *stats.Summary) float64 { return s.P95 }
func p99(s *stats.Summary) float64 { return s.P99 }

func (r *report) markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "## Density and scaling (`bench/density`)\n\n")
	fmt.Fprintf(&b, "%s, %s, %d CPUs (%s), %.1f GiB, %s; load %s → %s; moat %s, %s.\n\n",
		m.Kernel, m.OS, m.CPUs, m.CPUModel, float64(m.MemTotalKiB)/(1<<20), m.GoVersion,
		m.LoadAvgStart, m.LoadAvgEnd, m.MoatCommit, m.Date)
	fmt.Fprintf(&b, "`%s`; daemon `%s`.\n\n", r.Command, r.Daemon)

	d := r.Density
	verdict := "not met"
	if d.Met {
		verdict = "met"
	}
	fmt.Fprintf(&b, "**%d live idle sandboxes held; moat's memory %.0f KiB (%.2f MiB) PSS per sandbox.** "+
		"Goal (≥ %d sandboxes at < %d KiB each): %s.\n\n",
		d.Live, d.MoatPSSPerSandboxKiB, d.MoatPSSPerSandboxKiB/1024, d.GoalLive, d.GoalPSSKiB, verdict)

	b.WriteString("| live | fill s | create p50 ms | create → echo p50 / p95 / p99 ms | `moat run` p50 / p95 ms | moat PSS KiB/sandbox | of which inits | system KiB/sandbox | kernel KiB/sandbox | threads/sandbox | daemon fds/sandbox |\n")
	b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, lv := range r.Levels {
		mm := lv.Memory
		fmt.Fprintf(&b, "| %d | %.1f | %s | %s / %s / %s | %s / %s | %s | %s | %s | %s | %.1f | %.1f |\n",
			lv.Live, lv.FillSec, p(lv.Create, p50), p(lv.TTI, p50), p(lv.TTI, p95), p(lv.TTI, p99),
			p(lv.Run, p50), p(lv.Run, p95), kib(mm.MoatPSSPerSandboxKiB), kib(mm.InitPSSPerSandboxKiB),
			kib(mm.SystemPerSandboxKiB), kib(mm.KernelPerSandboxKiB), mm.ThreadsPerSandbox, mm.DaemonFDsPerSandbox)
	}
	b.WriteString("\n")

	if pr := d.Projection; pr.Limit != "" {
		names := make([]string, 0, len(pr.Limits))
		for n := range pr.Limits {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool { return pr.Limits[names[i]] < pr.Limits[names[j]] })
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s %d", n, pr.Limits[n])
		}
		fmt.Fprintf(&b, "Projection (an estimate from the costs at %d live, not a measurement): about **%d** sandboxes, "+
			"bound first by %s (%s).\n\n", d.Live, pr.Max, pr.Limit, strings.Join(parts, ", "))
	}
	if t := r.Teardown; t != nil {
		fmt.Fprintf(&b, "Teardown: %d sandboxes deleted in %.1f s (delete p50 %s ms, p95 %s ms).\n\n",
			t.Deleted, t.Sec, p(t.Delete, p50), p(t.Delete, p95))
	}
	if r.DaemonLog.Problems > 0 {
		fmt.Fprintf(&b, "The daemon logged %d warning or error line(s); first: `%s`\n\n", r.DaemonLog.Problems, r.DaemonLog.First[0])
	}
	if r.Failed {
		fmt.Fprintf(&b, "**Failures (%d):**\n\n", len(r.Errors))
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "- %s\n", e)
		}
		b.WriteString("\n")
	}
	return b.String()
}
