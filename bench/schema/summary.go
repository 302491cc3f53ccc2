package schema

// Summary is summary.json, written by bench/report: every figure of one
// run with a stable ID, for comparing runs (report --compare).
type Summary struct {
	// Schema is the Version it was written with; 0 in summaries written
	// before it was recorded, which read the same.
	Schema  int             `json:"schema,omitempty"`
	Commit  string          `json:"commit"`
	Date    string          `json:"date"`
	Machine *SummaryMachine `json:"machine"`
	// Benchmarks lists the results files found; the others were not run.
	Benchmarks []string `json:"benchmarks"`
	Figures    []Figure `json:"figures"`
}

// SummaryMachine is the machine of a summary: what two runs must share to
// compare.
type SummaryMachine struct {
	Kernel      string `json:"kernel"`
	OS          string `json:"os"`
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model"`
	GoVersion   string `json:"go_version"`
	MemTotalKiB int64  `json:"mem_total_kib,omitempty"`
}

// Figure is one number of a run. IDs are stable across runs
// ("startup.moat.p50_ms") so two summaries pair their figures.
type Figure struct {
	ID    string  `json:"id"`
	Title string  `json:"title"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
	// Goal is the target for this figure, when it set one
	// ("< 10"; the unit is the figure's), and Met whether it is reached.
	Goal string `json:"goal,omitempty"`
	Met  *bool  `json:"met,omitempty"`
	// Better says which way is an improvement: "lower" or "higher".
	Better string `json:"better,omitempty"`
}
