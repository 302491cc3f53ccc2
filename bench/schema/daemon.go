package schema

import "github.com/moat-sandbox/moat/bench/internal/stats"

// Daemon is bench/daemon's results: `moat serve` under output floods, its
// durable exec throughput and an auth flood, against the daemon of the
// commit before issue 17. Rounds are the throughput's rounds (each runs
// every level on both daemons), Warmup its unrecorded windows at the
// highest level first.
type Daemon struct {
	Run
	Config DaemonConfig `json:"config"`
	Old    *OldDaemon   `json:"old"`
	// Flood holds one output flood per budget: the defaults, then the
	// small one.
	Flood      []Flood     `json:"flood"`
	Throughput *Throughput `json:"throughput,omitempty"`
	Auth       *AuthFlood  `json:"auth,omitempty"`
	Record     *RecordCall `json:"record_call,omitempty"`
	// Daemons are every daemon the run started.
	Daemons []Serve `json:"daemons"`
}

// DaemonConfig is bench/daemon's own flags.
type DaemonConfig struct {
	Tenants       int     `json:"tenants"`
	Execs         int     `json:"execs"`
	ExecMiB       int     `json:"exec_mib"`
	Background    int     `json:"background"`
	BackgroundMiB int     `json:"background_mib"`
	SampleEveryMs int64   `json:"sample_every_ms"`
	AfterSec      float64 `json:"after_s"`
	Levels        []int   `json:"levels"`
	WindowSec     float64 `json:"window_s"`
	AuthClients   int     `json:"auth_clients"`
	AuthWindowSec float64 `json:"auth_window_s"`
	AuthRounds    int     `json:"auth_rounds"`
	Benchtime     string  `json:"benchtime"`
	Timing        string  `json:"timing"`
	Percentiles   string  `json:"percentiles"`
}

// OldDaemon is the daemon "today": the commit before issue 17, built by
// the benchmark, or why it was not.
type OldDaemon struct {
	Ref           string  `json:"ref,omitempty"`    // as given (--old)
	Commit        string  `json:"commit,omitempty"` // full hash
	Subject       string  `json:"subject,omitempty"`
	Version       string  `json:"moat_version,omitempty"`
	BuildSec      float64 `json:"build_s,omitempty"`
	SkippedReason string  `json:"skipped_reason,omitempty"`
}

// FloodBudget is the [output] section one flood's daemon runs with.
type FloodBudget struct {
	Name               string `json:"name"`
	Key                string `json:"key"`
	MaxLimit           int64  `json:"max_limit_bytes"`
	MemoryBudget       int64  `json:"memory_budget_bytes"`
	TenantMemoryBudget int64  `json:"tenant_memory_budget_bytes"`
	TenantDiskQuota    int64  `json:"tenant_disk_quota_bytes"`
}

// Flood is one output flood.
type Flood struct {
	FloodBudget
	Tenants int `json:"tenants"`
	// BaselineRSSKiB is the daemon's VmRSS just before the flood (its
	// sandboxes made, one exec run in each); VmHWM is reset to it.
	BaselineRSSKiB int64 `json:"baseline_rss_kib"`
	// PeakRSSKiB is the highest VmRSS sampled, HWMKiB the daemon's VmHWM
	// at the end of the flood (the true peak between samples).
	PeakRSSKiB int64 `json:"peak_rss_kib"`
	HWMKiB     int64 `json:"hwm_kib"`
	// PeakGrowthKiB is max(peak sampled, VmHWM) − baseline.
	PeakGrowthKiB int64 `json:"peak_growth_kib"`
	// GoalKiB is the peak growth the daemon documents (docs/API.md,
	// "Memory"): memory_budget + max(memory_budget/4, 16 MiB) + 256 KiB
	// per call in progress.
	GoalKiB int64 `json:"goal_kib"`
	// AfterEndRSSKiB is the VmRSS AfterSec after the sandboxes were
	// deleted; AfterEndGrowthKiB its growth over the baseline.
	AfterEndRSSKiB    int64   `json:"after_end_rss_kib"`
	AfterEndGrowthKiB int64   `json:"after_end_growth_kib"`
	AfterSec          float64 `json:"after_s"`
	FloodSec          float64 `json:"flood_s"`
	Samples           int     `json:"samples"`
	// Series is the sampled VmRSS: [seconds since the flood began, KiB].
	Series     [][2]float64      `json:"rss_series"`
	Exec       ExecAccount       `json:"exec"`
	Background BackgroundAccount `json:"background"`
	ExecMs     *stats.Summary    `json:"exec_ms,omitempty"`
	// Accounted says every byte printed was accounted for (see
	// ExecAccount and BackgroundAccount); AccountingErrors says where not.
	Accounted        bool     `json:"accounted"`
	AccountingErrors []string `json:"accounting_errors,omitempty"`
	Failed           int      `json:"failed"`
	Errors           []string `json:"errors,omitempty"`
}

// ExecAccount is where the bytes of the flood's execs went. An exec's
// answer holds its whole stream, or says truncated and the stream is in
// an output file (spilled once the budget refused, or kept because it is
// longer than a store row's preview): Printed = Counted, and every answer
// short of its stream is matched by a whole file.
type ExecAccount struct {
	N        int   `json:"n"`
	Bytes    int64 `json:"bytes_each"`
	Printed  int64 `json:"printed"`
	Counted  int64 `json:"counted"`  // the answers' stdout_bytes
	Returned int64 `json:"returned"` // the stdout the answers hold
	// Whole counts answers holding the whole stream, Truncated the ones
	// that say truncated.
	Whole     int `json:"whole_answers"`
	Truncated int `json:"truncated_answers"`
	// Files and FileBytes are the output files under <data>/output after
	// the flood; WholeFiles those holding a whole stream.
	Files      int   `json:"files"`
	FileBytes  int64 `json:"file_bytes"`
	WholeFiles int   `json:"whole_files"`
}

// BackgroundAccount is where the bytes of the background processes went:
// received by a reader following the stream, or reported lost
// (lost_bytes): Printed = Received + LostBytes, and each exit result
// counts the stream.
type BackgroundAccount struct {
	N          int   `json:"n"`
	Bytes      int64 `json:"bytes_each"`
	Printed    int64 `json:"printed"`
	Counted    int64 `json:"counted"` // the exit results' stdout_bytes
	Received   int64 `json:"received"`
	LostBytes  int64 `json:"lost_bytes"`
	LostEvents int   `json:"lost_events"`
}

// Throughput is the durable exec throughput, new daemon against old.
type Throughput struct {
	Exec      string    `json:"exec"`
	WindowSec float64   `json:"window_s"`
	Rounds    int       `json:"rounds"`
	Levels    []TPLevel `json:"levels"`
}

// TPLevel is one level of concurrent clients on both daemons.
type TPLevel struct {
	Clients int     `json:"clients"`
	New     *TPSide `json:"new"`
	Old     *TPSide `json:"old,omitempty"`
	// Ratio is the new daemon's calls/s over the old one's; P50Ratio
	// its p50 latency over the old one's.
	Ratio    *float64 `json:"ratio_new_to_old"`
	P50Ratio *float64 `json:"p50_ratio_new_to_old,omitempty"`
}

// TPSide is one daemon at one level, over every round.
type TPSide struct {
	Calls          int            `json:"calls"`
	Errors         int            `json:"errors"`
	Seconds        float64        `json:"seconds"`
	CallsPerS      float64        `json:"calls_per_s"`
	RoundCallsPerS []float64      `json:"round_calls_per_s"`
	Latency        *stats.Summary `json:"latency_ms"`
	FirstErrors    []string       `json:"first_errors,omitempty"`
}

// AuthFlood is the auth flood, new daemon against old.
type AuthFlood struct {
	Request   string    `json:"request"`
	Clients   int       `json:"clients"`
	WindowSec float64   `json:"window_s"`
	Rounds    int       `json:"rounds"`
	New       *AuthSide `json:"new"`
	Old       *AuthSide `json:"old,omitempty"`
	// Ratios new / old of the answers per second and of the audit
	// events per 1000 requests.
	RateRatio   *float64 `json:"rate_ratio_new_to_old,omitempty"`
	EventsRatio *float64 `json:"events_ratio_new_to_old,omitempty"`
}

// AuthSide is one daemon under the auth flood.
type AuthSide struct {
	Daemon       string  `json:"daemon"`
	Requests     int     `json:"requests"`
	Seconds      float64 `json:"seconds"`
	PerSec       float64 `json:"answered_per_s"`
	Unauthorized int     `json:"status_401"`
	Limited      int     `json:"status_429"`
	// Other counts failed requests and other statuses: an error.
	Other      int      `json:"other"`
	FirstOther []string `json:"first_other,omitempty"`
	// The auth.denied events the flood added to the audit tape (read
	// after the daemon stopped, which writes what it still counts), their
	// bytes, and the failures they count (one each for a daemon that
	// writes one event per failure).
	AuditEvents   int     `json:"audit_events"`
	AuditBytes    int64   `json:"audit_bytes"`
	AuditCounted  int64   `json:"audit_counted_failures"`
	EventsMissing int     `json:"events_not_on_disk,omitempty"`
	EventsPer1000 float64 `json:"events_per_1000"`
	BytesPer1000  float64 `json:"bytes_per_1000"`
}

// RecordCall is server.BenchmarkRecordCall of the checkout and of the old
// tree: what the daemon writes for every exec, in-process, with 1 to 32
// calls recording at once.
type RecordCall struct {
	Command   string `json:"command"`
	Benchtime string `json:"benchtime"`
	Rounds    int    `json:"rounds"`
	// OldSource says where the old tree's benchmark comes from.
	OldSource string      `json:"old_source,omitempty"`
	Writers   []RecordRow `json:"writers"`
	Errors    []string    `json:"errors,omitempty"`
}

// RecordRow is one writers= sub-benchmark of both trees, in records/s.
type RecordRow struct {
	Writers    int       `json:"writers"`
	New        float64   `json:"new_calls_per_s"`
	NewRounds  []float64 `json:"new_rounds_calls_per_s"`
	NewNsPerOp float64   `json:"new_ns_per_op"`
	Old        *float64  `json:"old_calls_per_s,omitempty"`
	OldRounds  []float64 `json:"old_rounds_calls_per_s,omitempty"`
	OldNsPerOp *float64  `json:"old_ns_per_op,omitempty"`
	Ratio      *float64  `json:"ratio_new_to_old,omitempty"`
}

func (f *Daemon) check() error {
	if f.Flood == nil && f.Throughput == nil {
		return missing(`"flood" or "throughput"`)
	}
	return nil
}
