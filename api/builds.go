package api

import (
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// Build states (Build.Status).
const (
	BuildRunning   = "running"   // accepted: the source is checked or the command runs
	BuildSucceeded = "succeeded" // the command exited 0 and every output was collected
	BuildRefused   = "refused"   // nothing ran: the source or the policy refused it
	BuildFailed    = "failed"    // the command ran and failed, or its outputs did
	BuildTimeout   = "timeout"   // the command ran past the build's timeout
)

// Build reasons (Build.Reason): why a build was refused or failed.
const (
	// The source package (status refused).
	ReasonSourceTooManyFiles = "source_too_many_files" // more entries than max_files
	ReasonSourceFileTooLarge = "source_file_too_large" // a file above max_file_bytes
	ReasonSourceTooLarge     = "source_too_large"      // the files' sizes add up above max_total_bytes
	ReasonSourceBadPath      = "source_bad_path"       // absolute, "..", an escaping symlink or hardlink
	ReasonSourceBadType      = "source_bad_type"       // a device, fifo or socket
	ReasonSourceUnreadable   = "source_unreadable"     // not a (gzip) tar, truncated, or unreadable
	// The policy (status refused: nothing ran).
	ReasonPolicyDenied = "policy_denied"
	// The run (status failed or timeout).
	ReasonTimeout        = "timeout"          // status timeout: the whole tree was killed
	ReasonOOM            = "oom"              // the kernel's OOM killer ended a process
	ReasonCompileFailed  = "compile_failed"   // the command exited non-zero (or by a signal)
	ReasonOutputMissing  = "output_missing"   // a declared output is absent, or not a file or directory
	ReasonOutputTooLarge = "output_too_large" // the outputs add up above the cap
	ReasonInterrupted    = "interrupted"      // the daemon stopped while the build ran
	ReasonSetupFailed    = "setup_failed"     // the build's sandbox could not be made
)

// Fixed places of a build's sandbox.
const (
	// BuildSrc is where the source is, the command's working directory
	// and the directory outputs are relative to.
	BuildSrc = "/src"
	// BuildDir holds the build's HOME (home), TMPDIR (tmp) and
	// XDG_CACHE_HOME (cache): private to the build, like the source.
	BuildDir = "/build"
)

// CreateBuild is the request of build.create: the settings of a build,
// with the source package as the request's body (a tar stream, plain or
// gzip). Over HTTP the settings come as query parameters (command,
// outputs, env and allow_domains repeated) or, with a multipart/form-data
// body, as a JSON part named "settings" beside a part "source"; over
// JSON-RPC as this object, with the tar in Content (base64).
type CreateBuild struct {
	// Template names the toolchain: a template of the daemon ("host", the
	// default, is the host's /usr).
	Template string `json:"template,omitempty"`
	// Command is the build command's argv, run in /src.
	Command []string `json:"command"`
	// Outputs are paths relative to /src (files or directories) collected
	// as artifacts when the command exits 0.
	Outputs []string `json:"outputs,omitempty"`
	// Env are KEY=VALUE pairs: with moat's standard variables the whole
	// environment of the command (nothing else gets in).
	Env []string `json:"env,omitempty"`
	// TimeoutMs bounds the command (default 10 minutes; at most the
	// operator's cap); past it the whole tree is killed.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// Limits of the build's sandbox (zero: the template's or the
	// operator's defaults).
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
	// Net is "none" (the default: loopback only) or "proxy" (the egress
	// proxy, AllowDomains only, within the policy's ceiling).
	Net          string   `json:"net,omitempty"`
	AllowDomains []string `json:"allow_domains,omitempty"`
	// Caps of the source package; zero takes the operator's (documented
	// defaults); a value above the operator's is refused (invalid_argument).
	MaxFiles      int   `json:"max_files,omitempty"`
	MaxFileBytes  int64 `json:"max_file_bytes,omitempty"`
	MaxTotalBytes int64 `json:"max_total_bytes,omitempty"`
	// Labels are kept with the build and given to its sandbox.
	Labels map[string]string `json:"labels,omitempty"`
	// Detach answers as soon as the build is accepted (status running)
	// instead of at its end; build.get with wait=true waits for it.
	Detach bool `json:"detach,omitempty"`
	// Content is the source tar over JSON-RPC (over HTTP: the body).
	Content []byte `json:"content,omitempty"`
}

// Build is a build: its settings, its outcome and its artifacts.
type Build struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// Reason is a typed code (the Reason constants) when Status is not
	// succeeded or running; Message says it in words.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// SourceDigest is the sha256 of the normalized source tree ("sha256:"
	// and hex): the same tree gives the same digest however it was
	// packed (owners, times and the order of entries do not count).
	SourceDigest string       `json:"source_digest,omitempty"`
	Source       *BuildSource `json:"source,omitempty"`
	Toolchain    Toolchain    `json:"toolchain"`
	// Command, Outputs and the limits asked for, as the build ran them.
	Settings CreateBuild `json:"settings"`
	// Env are the names of the variables the command had (values are not
	// kept: they may be secrets).
	Env []string `json:"env"`
	// SourceDateEpoch is SOURCE_DATE_EPOCH as the command saw it, and the
	// mtime of every file of the normalized source.
	SourceDateEpoch int64 `json:"source_date_epoch"`
	// ExitCode is the command's exit code once it ran (nil before, or if
	// it never started).
	ExitCode  *int            `json:"exit_code,omitempty"`
	Artifacts []BuildArtifact `json:"artifacts"`
	// Skipped lists what an output held that is not collected: symlinks
	// and special files, never followed (first 100).
	Skipped []string `json:"skipped,omitempty"`
	Log     BuildLog `json:"log"`
	// DurationMs is the build's whole time, source check to last artifact.
	DurationMs      int64  `json:"duration_ms"`
	PeakMemoryBytes int64  `json:"peak_memory_bytes"`
	Sandbox         string `json:"sandbox,omitempty"`
	// Enforcement is what the build's sandbox really got.
	Enforcement *sandbox.Enforcement `json:"enforcement,omitempty"`
	Labels      map[string]string    `json:"labels,omitempty"`
	Created     time.Time            `json:"created"`
	Ended       *time.Time           `json:"ended,omitempty"`
}

// BuildSource describes the normalized source package.
type BuildSource struct {
	Files int   `json:"files"` // entries: files, directories, symlinks
	Bytes int64 `json:"bytes"` // the regular files' sizes added up
	// Stripped counts files whose setuid/setgid bits were removed.
	Stripped int `json:"stripped,omitempty"`
}

// Toolchain is the template a build ran on.
type Toolchain struct {
	Template string `json:"template"`
	// Digest is the template's layer digest ("" for the host template,
	// whose toolchain is the host's /usr).
	Digest string `json:"digest,omitempty"`
}

// BuildArtifact is one collected file.
type BuildArtifact struct {
	// Path is relative to /src.
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex; build.artifact downloads it by this digest
	Mode   uint32 `json:"mode"`   // permission bits
}

// BuildLog is the command's output (stdout and stderr, interleaved as
// written): its head and tail here, all of it (up to the log cap) from
// build.log.
type BuildLog struct {
	Head  string `json:"head"`
	Tail  string `json:"tail,omitempty"` // empty when Head holds it all
	Bytes int64  `json:"bytes"`          // everything the command wrote
	// Kept is what build.log can give (at most the log cap); Truncated is
	// set when the command wrote more.
	Kept      int64 `json:"kept"`
	Truncated bool  `json:"truncated,omitempty"`
}

// BuildRef names one build (build.get, build.delete); Wait, for
// build.get, answers at the build's end.
type BuildRef struct {
	ID   string `json:"id"`
	Wait bool   `json:"wait,omitempty"`
}

// ListBuilds is the request of build.list.
type ListBuilds struct {
	Status string `json:"status,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// BuildList is the answer of build.list, newest first.
type BuildList struct {
	Builds []Build `json:"builds"`
}

// BuildLogRequest is the request of build.log: the log from Offset
// (bytes); Follow waits for what the command writes until the build ends.
type BuildLogRequest struct {
	ID     string `json:"id"`
	Offset int64  `json:"offset,omitempty"`
	Follow bool   `json:"follow,omitempty"`
}

// BuildArtifactRef names one artifact of a build by its sha256 (hex).
type BuildArtifactRef struct {
	ID     string `json:"id"`
	Digest string `json:"digest"`
}
