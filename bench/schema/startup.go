package schema

// Startup is bench/startup's results: the cold start of one command
// under every system, alternating round by round. Rounds are measured
// rounds, each running every system once.
type Startup struct {
	Run
	Config  StartupConfig   `json:"config"`
	Systems []StartupSystem `json:"systems"`
}

// StartupConfig is how bench/startup timed its runs.
type StartupConfig struct {
	// Workload is what every system runs: "/bin/true".
	Workload      string `json:"workload"`
	RunTimeoutSec int    `json:"run_timeout_s"`
	Order         string `json:"order"`
	Timing        string `json:"timing"`
	Percentiles   string `json:"percentiles"`
}

// StartupSystem is one row of bench/startup. Statistics are in
// milliseconds over the successful measured runs; they and the ratios are
// nil when there is none (a skipped system, every run failed, a
// reference row missing).
type StartupSystem struct {
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

// Measured reports whether the system has statistics; false for nil.
func (s *StartupSystem) Measured() bool { return s != nil && s.P50 != nil && s.N > 0 }

// System returns the row named name, or nil.
func (f *Startup) System(name string) *StartupSystem {
	for i := range f.Systems {
		if f.Systems[i].Name == name {
			return &f.Systems[i]
		}
	}
	return nil
}

func (f *Startup) check() error {
	if f.Systems == nil {
		return missing(`"systems"`)
	}
	return nil
}
