package schema

// Syscall is bench/syscall's results: the same syscall and file I/O loops
// inside a sandbox and outside it, alternating. Rounds are rounds of the
// probe, each run once inside and once outside.
type Syscall struct {
	Run
	Results []SyscallResult `json:"results"`
}

// SyscallResult is one workload: its time per operation inside and
// outside the sandbox, in ns, over the rounds.
type SyscallResult struct {
	Name string `json:"name"`
	What string `json:"what"`
	// Ops is the operations of one run of the loop.
	Ops         int     `json:"ops"`
	InsideNs    float64 `json:"inside_ns_per_op_p50"`
	OutsideNs   float64 `json:"outside_ns_per_op_p50"`
	OverheadPct float64 `json:"overhead_pct"` // p50 inside / outside − 1, in %
	InsideP95   float64 `json:"inside_ns_per_op_p95"`
	OutsideP95  float64 `json:"outside_ns_per_op_p95"`
	InsideP99   float64 `json:"inside_ns_per_op_p99"`
	OutsideP99  float64 `json:"outside_ns_per_op_p99"`
}

func (f *Syscall) check() error {
	if f.Results == nil {
		return missing(`"results"`)
	}
	return nil
}
