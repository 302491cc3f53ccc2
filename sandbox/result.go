package sandbox

import (
	"errors"
	"fmt"
)

// Exit codes shared by every runtime (docs/DESIGN.md, "Semantics every
// runtime shares").
const (
	ExitTimeout       = 124 // the call hit its timeout; the whole tree was killed
	ExitSetupFailed   = 125 // the sandbox could not be set up; nothing ran
	ExitNotExecutable = 126 // the command exists but cannot be executed
	ExitNotFound      = 127 // the command was not found
	ExitSignalBase    = 128 // killed by signal N → 128+N
)

// ExitReason says how a call ended.
type ExitReason string

// Exit reasons.
const (
	ReasonExited   ExitReason = "exited"
	ReasonSignaled ExitReason = "signaled"
	// ReasonTimeout: the call's own timeout ended it (exit 124).
	ReasonTimeout ExitReason = "timeout"
	// ReasonSandboxTimeout: the call was still running when its
	// long-lived sandbox reached its maximum age (the daemon's
	// sandbox timeout_ms) and was ended with everything in it (exit 124).
	// Unlike a call's timeout, the sandbox is gone: a retry needs a new one.
	ReasonSandboxTimeout ExitReason = "sandbox_timeout"
	ReasonOOM            ExitReason = "oom"
	ReasonKilled         ExitReason = "killed"
	ReasonSetupError     ExitReason = "setup_error"
)

// Result is the structured outcome of one process.
type Result struct {
	ExitCode   int        `json:"exit_code"`
	ExitReason ExitReason `json:"exit_reason"`
	// Signal is the number of the signal that ended the process, if any.
	Signal int `json:"signal,omitempty"`
	// Error explains a setup_error, a 126 or a 127 in one line.
	Error string `json:"error,omitempty"`

	DurationMs          int64 `json:"duration_ms"`
	TimeToFirstOutputMs int64 `json:"time_to_first_output_ms"`
	CPUUserMs           int64 `json:"cpu_user_ms"`
	CPUSysMs            int64 `json:"cpu_sys_ms"`
	// PeakMemoryBytes is the sandbox's peak memory use as its cgroup
	// accounted it (RSS, page cache and tmpfs pages).
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	// OOMKills counts the processes the kernel's OOM killer ended in the
	// sandbox's memory cgroup while the call ran, whether or not the
	// main process was one of them (a child killed while the main
	// process survives shows here only); absent when none was, or when
	// no memory cgroup accounts the sandbox. A long-lived sandbox has one
	// memory cgroup for all its calls: calls running at the same time
	// count each other's kills.
	OOMKills int64 `json:"oom_kills,omitempty"`

	Stdout      string `json:"stdout"`
	Stderr      string `json:"stderr"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	Truncated   bool   `json:"truncated"`
	// OutputFile and StderrFile hold the whole stdout / stderr when it
	// was truncated and the caller asked for a spill directory.
	OutputFile string `json:"output_file,omitempty"`
	StderrFile string `json:"stderr_file,omitempty"`

	// Enforcement is what was in force for the sandbox that ran the
	// process; absent when no sandbox was built (setup_error).
	Enforcement *Enforcement `json:"enforcement,omitempty"`
}

// Sentinel errors that callers branch on.
var (
	// ErrUnsupported: the host cannot enforce a protection the spec needs.
	ErrUnsupported = errors.New("protection not supported on this host")
	// ErrInvalidSpec: the request is malformed (bad path, bad flag value).
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrSetup: building the sandbox failed.
	ErrSetup = errors.New("sandbox setup failed")
	// ErrClosed: the sandbox has been shut down.
	ErrClosed = errors.New("sandbox is shut down")
	// ErrExited: the process has already ended.
	ErrExited = errors.New("process has exited")
	// ErrBusy: the resource is still in use (a budget with live sandboxes).
	ErrBusy = errors.New("resource busy")
)

// SetupError is a failure to build the sandbox, at a named stage.
type SetupError struct {
	Stage string
	Err   error
}

func (e *SetupError) Error() string { return fmt.Sprintf("%s: %v", e.Stage, e.Err) }

// Unwrap lets errors.Is match both ErrSetup and the cause.
func (e *SetupError) Unwrap() []error { return []error{ErrSetup, e.Err} }

// SetupResult is the Result of a call whose sandbox could not be built.
func SetupResult(err error) *Result {
	return &Result{ExitCode: ExitSetupFailed, ExitReason: ReasonSetupError, Error: err.Error(), TimeToFirstOutputMs: -1}
}
