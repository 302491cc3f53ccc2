// Package schema is the results schema of moat's benchmarks: one Go type
// per result kind, written by the benchmark of that name as NAME.json
// (bench/startup writes a Startup to startup.json, and so on) and read by
// bench/report and bench/render, which render every report from these
// types and nothing else.
//
// Every kind embeds Run, the envelope that says which benchmark wrote the
// file, with which schema Version, on which machine, from which commit,
// when, with which common flags, and whether it failed. A file written
// with another Version is refused (ErrVersion), never guessed at: the
// report of an older run is regenerated from that run's checkout, or the
// file converted.
package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Version is the schema version this package reads and writes. Raise it
// when a field changes meaning or moves; adding a field does not need it.
//
// Version 1 was the per-benchmark JSON before this package (no "schema"
// field); version 2 put every kind in the Run envelope.
const Version = 2

// Errors a caller may branch on.
var (
	// ErrVersion is a results file of another schema version.
	ErrVersion = errors.New("results file of another schema version")
	// ErrKind is a results file of an unknown benchmark, or of another
	// benchmark than the one expected.
	ErrKind = errors.New("results file of an unexpected benchmark")
	// ErrIncomplete is a results file that lacks the field its kind cannot
	// do without.
	ErrIncomplete = errors.New("results file lacks its benchmark's main field")
)

// Run is the envelope of every results file: what the benchmark ran,
// where, when and how. Its fields are at the top level of the JSON.
type Run struct {
	// Schema is the Version the file was written with.
	Schema int `json:"schema"`
	// Bench is the benchmark that wrote it: "startup" for bench/startup.
	Bench string `json:"bench"`
	// Command is the benchmark's own command line, as run from bench/.
	Command string  `json:"command,omitempty"`
	Machine Machine `json:"machine"`
	// Commit is the git commit of the checkout measured, "-dirty"
	// appended when the tree had changes; "" outside a checkout.
	Commit string `json:"commit,omitempty"`
	// Date is the start of the run, RFC 3339, UTC.
	Date string `json:"date"`
	// LoadAvgStart and LoadAvgEnd are /proc/loadavg at the start and
	// the end of the run.
	LoadAvgStart string  `json:"loadavg_start,omitempty"`
	LoadAvgEnd   string  `json:"loadavg_end,omitempty"`
	DurationSec  float64 `json:"duration_s"`
	// Rounds, Warmup and Seed are the common flags of the run (--rounds,
	// --warmup, --seed); what a round is depends on the benchmark.
	Rounds int    `json:"rounds"`
	Warmup int    `json:"warmup"`
	Seed   uint64 `json:"seed"`
	// Versions maps each system the run used to its version: "moat",
	// "bwrap", "runc"…
	Versions map[string]string `json:"versions,omitempty"`
	// Failed is set when a run of a system, a call or a check failed: the
	// benchmark then exits 1. Errors holds the failures outside the
	// kind's own fields, the first few verbatim.
	Failed bool     `json:"failed"`
	Errors []string `json:"errors,omitempty"`
}

// Header returns the envelope; every Result has one.
func (r *Run) Header() *Run { return r }

// Fail records a failure: Failed is set and, while Errors holds fewer
// than max, msg is kept verbatim.
func (r *Run) Fail(max int, msg string) {
	r.Failed = true
	if len(r.Errors) < max {
		r.Errors = append(r.Errors, msg)
	}
}

// Machine describes the host and toolchain a benchmark ran on.
type Machine struct {
	Kernel    string `json:"kernel"`    // uname -r
	OS        string `json:"os"`        // /etc/os-release PRETTY_NAME
	CPUs      int    `json:"cpus"`      // CPUs the benchmark may run on
	CPUModel  string `json:"cpu_model"` // /proc/cpuinfo
	GoVersion string `json:"go_version"`
	UID       int    `json:"uid"`
	// MemTotalKiB is MemTotal of /proc/meminfo; PIDMax kernel.pid_max.
	MemTotalKiB int64 `json:"mem_total_kib,omitempty"`
	PIDMax      int   `json:"pid_max,omitempty"`
}

// Result is one results file: one of the kinds of this package.
type Result interface {
	// Header returns the envelope.
	Header() *Run
	// check reports ErrIncomplete when the kind's main field is missing.
	check() error
}

// kind is one result kind: its name and a constructor of its zero value.
type kind struct {
	name string
	new  func() Result
}

// kinds lists every kind, in the order bench/run.sh runs them.
var kinds = []kind{
	{"startup", func() Result { return new(Startup) }},
	{"syscall", func() Result { return new(Syscall) }},
	{"policy", func() Result { return new(Policy) }},
	{"netproxy", func() Result { return new(Netproxy) }},
	{"controlplane", func() Result { return new(Controlplane) }},
	{"daemon", func() Result { return new(Daemon) }},
	{"rootfs", func() Result { return new(Rootfs) }},
	{"density", func() Result { return new(Density) }},
	{"workflow", func() Result { return new(Workflow) }},
	{"build", func() Result { return new(Build) }},
	{"agent", func() Result { return new(Agent) }},
}

// Kinds returns the name of every kind, in the order bench/run.sh runs
// the benchmarks.
func Kinds() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.name
	}
	return out
}

// New returns an empty Result of the named kind with its envelope set
// (Schema, Bench), or nil for an unknown kind.
func New(name string) Result {
	i := slices.IndexFunc(kinds, func(k kind) bool { return k.name == name })
	if i < 0 {
		return nil
	}
	r := kinds[i].new()
	h := r.Header()
	h.Schema, h.Bench = Version, name
	return r
}

// FileName is the name of a kind's results file: "startup.json".
func FileName(name string) string { return name + ".json" }

// Decode reads a results file of the kind named by want ("" accepts any
// kind). It fails with ErrVersion, ErrKind or ErrIncomplete (wrapped), or
// with the JSON error of a file that is not one.
func Decode(data []byte, want string) (Result, error) {
	var head struct {
		Schema int    `json:"schema"`
		Bench  string `json:"bench"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, err
	}
	if head.Schema != Version {
		v := fmt.Sprint(head.Schema)
		if head.Schema == 0 {
			v = "1 (no \"schema\" field)"
		}
		return nil, fmt.Errorf("%w: version %s, this bench reads %d", ErrVersion, v, Version)
	}
	if want != "" && head.Bench != want {
		return nil, fmt.Errorf("%w: written by bench/%s, want bench/%s", ErrKind, head.Bench, want)
	}
	r := New(head.Bench)
	if r == nil {
		return nil, fmt.Errorf("%w: %q", ErrKind, head.Bench)
	}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return r, nil
}

// Encode writes r as indented JSON ending in a newline, its envelope's
// Schema and Bench set to this Version and its kind.
func Encode(r Result) ([]byte, error) {
	h := r.Header()
	h.Schema = Version
	if h.Bench == "" {
		return nil, fmt.Errorf("%w: the envelope names no benchmark", ErrKind)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// missing is the ErrIncomplete of a kind whose field what is absent.
func missing(what string) error {
	return fmt.Errorf("%w: no %s in it", ErrIncomplete, what)
}
