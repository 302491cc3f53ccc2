package schema

import "github.com/moat-sandbox/moat/bench/internal/stats"

// Controlplane is bench/controlplane's results: `moat serve` from a
// client's side. Rounds are the sequential time-to-interactive rounds
// (each running the API sample and every one-shot reference once), and
// the samples per row in bursts; Warmup the unrecorded rounds first.
// Times are in ms, memory in KiB.
type Controlplane struct {
	Run
	Config ControlplaneConfig `json:"config"`
	Daemon Serve              `json:"daemon"`
	// TTI holds the time-to-interactive rows: the moat API sequential
	// and in bursts, each followed by its one-shot references.
	TTI    []ControlplaneRow   `json:"tti"`
	Bursts *ControlplaneBursts `json:"bursts,omitempty"`
	Exec   *ControlplaneRow    `json:"exec_round_trip,omitempty"`
	Soak   *ControlplaneSoak   `json:"soak,omitempty"`
	// Memory holds snapshots of the daemon and its sandboxes between
	// phases (the soak's per-second samples are in soak.memory).
	Memory []MemSnapshot `json:"memory"`
}

// ControlplaneConfig is bench/controlplane's own flags.
type ControlplaneConfig struct {
	Burst          int     `json:"burst"`  // sandboxes created at once
	Bursts         int     `json:"bursts"` // measured bursts
	ExecCalls      int     `json:"exec_calls"`
	ExecWarmup     int     `json:"exec_warmup"`
	SoakSec        float64 `json:"soak_s"`
	SoakSandboxes  int     `json:"soak_sandboxes"`
	FileEvery      int     `json:"file_every"`
	CallTimeoutSec float64 `json:"call_timeout_s"`
	Timing         string  `json:"timing"`
	Percentiles    string  `json:"percentiles"`
}

// Kinds of time-to-interactive rows.
const (
	KindAPI   = "api"      // the daemon's API: create, then the first exec
	KindRun   = "moat-run" // moat run, one process
	KindBwrap = "bwrap"    // bubblewrap, one process
	KindBare  = "bare"     // the command with no isolation
	// KindWarm is the daemon's API with a warm pool: a create the pool
	// serves (a claim), then the first exec.
	KindWarm = "api-warm"
	// KindAPIExec is the daemon's API with a create that carries its
	// first exec (sandbox.create's exec field): one request.
	KindAPIExec = "api-create-exec"
	// KindBareTrue is a bare fork+exec of /bin/true on the host: the
	// floor the warm claim and the exec round trip are compared with.
	KindBareTrue = "bare-true"
)

// ControlplaneRow is one timed series. Stats are over its successful
// measured samples; nil when there is none.
type ControlplaneRow struct {
	Name string `json:"name"`
	// Mode is "sequential" or "bursts of N"; Kind one of KindAPI,
	// KindRun, KindBwrap, KindBare.
	Mode    string `json:"mode,omitempty"`
	Kind    string `json:"kind,omitempty"`
	About   string `json:"about"`
	Command string `json:"command,omitempty"`
	N       int    `json:"n"`
	Failed  int    `json:"failed"` // failed samples, warm-up included
	// Errors holds the first few failures, verbatim.
	Errors []string       `json:"errors,omitempty"`
	Stats  *stats.Summary `json:"stats_ms"`
	// Create and FirstExec split the moat API's time to interactive into
	// its two calls.
	Create         *stats.Summary `json:"create_ms,omitempty"`
	FirstExec      *stats.Summary `json:"first_exec_ms,omitempty"`
	RatioToBwrap   *float64       `json:"ratio_to_bwrap"`
	RatioToMoatRun *float64       `json:"ratio_to_moat_run"`
	// RatioToBareTrue is the row's p50 over the p50 of a bare fork+exec
	// of /bin/true (KindBareTrue) of the same run; set on the warm-pool
	// row and the exec round trip.
	RatioToBareTrue *float64  `json:"ratio_to_bare_true,omitempty"`
	SkippedReason   string    `json:"skipped_reason,omitempty"`
	SamplesMs       []float64 `json:"samples_ms,omitempty"` // in the order taken
}

// Row returns the row of rows with that mode and kind, or nil.
func Row(rows []ControlplaneRow, mode, kind string) *ControlplaneRow {
	for i := range rows {
		if rows[i].Mode == mode && rows[i].Kind == kind {
			return &rows[i]
		}
	}
	return nil
}

// ControlplaneBursts is the bursts' makespan: from the start of a burst
// until its last sandbox answered its echo.
type ControlplaneBursts struct {
	Size       int            `json:"size"`
	Makespan   *stats.Summary `json:"makespan_ms"`
	MakespanMs []float64      `json:"makespan_samples_ms"`
}

// ControlplaneSoak is many sandboxes driven at once for a while.
type ControlplaneSoak struct {
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
	PerSecond []SoakSecond `json:"per_second"`
	// Memory is the per-second samples.
	Memory []MemSnapshot `json:"memory"`
	// ServerLatency holds the daemon's own view (/metrics histograms,
	// over the whole run) of the operations' durations, in ms:
	// op → quantile → ms.
	ServerLatency map[string]map[string]float64 `json:"server_latency_ms,omitempty"`
}

// SoakSecond summarises the calls started in one second of the soak.
type SoakSecond struct {
	T      int     `json:"t"`
	Calls  int     `json:"calls"`
	Errors int     `json:"errors"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// MemSnapshot is the daemon's and its sandboxes' memory at one moment.
type MemSnapshot struct {
	Phase         string  `json:"phase"`
	AtSec         float64 `json:"at_s"` // since the daemon started listening
	DaemonRSSKB   int64   `json:"daemon_rss_kb"`
	DaemonHWMKB   int64   `json:"daemon_hwm_kb"`
	DaemonThreads int     `json:"daemon_threads"`
	DaemonFDs     int     `json:"daemon_fds"`
	// SandboxProcs counts the daemon's descendants (the sandboxes' inits
	// and their processes); SandboxRSSKB sums their VmRSS, which counts
	// pages they share (moat's own text) once per process.
	SandboxProcs int   `json:"sandbox_procs"`
	SandboxRSSKB int64 `json:"sandbox_rss_kb"`
	// SandboxPSSKB sums their PSS (shared pages split among sharers):
	// only in some snapshots.
	SandboxPSSKB *int64 `json:"sandbox_pss_kb,omitempty"`
}

func (f *Controlplane) check() error {
	if f.TTI == nil && f.Exec == nil {
		return missing(`"tti" or "exec_round_trip"`)
	}
	return nil
}
