package schema

import "github.com/moat-sandbox/moat/bench/internal/stats"

// Density is bench/density's results: live idle sandboxes, the memory
// each costs and start latency as they accumulate. Rounds are the
// start-latency rounds per level (each runs both kinds once), Warmup the
// unrecorded ones first. Times are in ms, memory in KiB.
type Density struct {
	Run
	Config DensityConfig `json:"config"`
	Daemon Serve         `json:"daemon"`
	// Base is the machine with the daemon up and no sandbox.
	Base    DensityBase    `json:"base"`
	Levels  []DensityLevel `json:"levels"`
	Density DensityResult  `json:"density"`
	// Teardown is deleting the live sandboxes at the end.
	Teardown *Teardown `json:"teardown"`
}

// DensityConfig is bench/density's own flags and method.
type DensityConfig struct {
	Levels         []int   `json:"levels"`
	CallTimeoutSec float64 `json:"call_timeout_s"`
	Timing         string  `json:"timing"`
	Memory         string  `json:"memory"`
}

// DensityBase is the machine with the daemon up and no sandbox.
type DensityBase struct {
	MemAvailableKiB int64 `json:"mem_available_kib"`
	KernelKiB       int64 `json:"kernel_kib"`
	DaemonPSSKiB    int64 `json:"daemon_pss_kib"`
	DaemonFDs       int   `json:"daemon_fds"`
	Tasks           int   `json:"tasks"`
}

// DensityLevel is what was measured with Live idle sandboxes alive.
type DensityLevel struct {
	Live       int            `json:"live"`
	FillSec    float64        `json:"fill_s"`    // creating the sandboxes added for this level
	Create     *stats.Summary `json:"create_ms"` // each of those creates
	TTI        *stats.Summary `json:"tti_ms"`    // API create → first echo of one more sandbox
	TTISamples []float64      `json:"tti_samples_ms"`
	Run        *stats.Summary `json:"run_ms"` // moat run -- /bin/true
	RunSamples []float64      `json:"run_samples_ms"`
	Memory     DensityMemory  `json:"memory"`
}

// DensityMemory is moat's and the machine's memory at one level; the
// per-sandbox figures divide the growth since the baseline by the live
// sandboxes.
type DensityMemory struct {
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

// DensityResult sums the run up: the most sandboxes held alive at once,
// moat's memory per sandbox there, and the projection beyond.
type DensityResult struct {
	Live                 int         `json:"live"`
	MoatPSSPerSandboxKiB float64     `json:"moat_pss_per_sandbox_kib"`
	Projection           *Projection `json:"projection,omitempty"`
}

// Projection is an estimate, not a measurement: how many sandboxes each
// limit would allow at the costs measured, and the first to bind.
type Projection struct {
	Max    int            `json:"max"`
	Limit  string         `json:"limit"`
	Limits map[string]int `json:"limits"`
}

// Teardown is deleting the sandboxes left at the end.
type Teardown struct {
	Deleted int            `json:"deleted"`
	Sec     float64        `json:"s"`
	Delete  *stats.Summary `json:"delete_ms"`
}

func (f *Density) check() error {
	if f.Levels == nil {
		return missing(`"levels"`)
	}
	return nil
}
