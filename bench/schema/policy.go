package schema

import "github.com/moat-sandbox/moat/bench/internal/stats"

// Policy is bench/policy's results: one policy decision against 100
// rules, per request and over the mix, and compiling the policy. Rounds
// are the timed decisions per request, Warmup the untimed ones before.
type Policy struct {
	Run
	// Compile is parsing and compiling the three layers, in µs.
	Compile stats.Summary `json:"compile_us"`
	// Mix is every request's samples together.
	Mix      *PolicyRow  `json:"mix"`
	Requests []PolicyRow `json:"requests"`
	// Spec is compiling the policy into a sandbox spec for synthetic
	// workspaces of growing size.
	Spec []PolicySpec `json:"spec"`
}

// PolicyRow is the decisions of one request (or of the mix), in µs.
type PolicyRow struct {
	Request string        `json:"request"`
	Effect  string        `json:"effect"`
	Micros  stats.Summary `json:"us"`
}

// PolicySpec is compiling the policy into a sandbox spec for one
// workspace: its entries, those searched, the restrictions found and the
// time, in µs.
type PolicySpec struct {
	Workspace string        `json:"workspace"`
	Entries   int           `json:"entries"`
	Walked    int           `json:"walked"`
	Restrict  int           `json:"restrict"`
	Micros    stats.Summary `json:"us"`
}

func (f *Policy) check() error {
	if f.Mix == nil {
		return missing(`"mix"`)
	}
	return nil
}
