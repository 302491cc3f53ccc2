package schema

import "github.com/moat-sandbox/moat/bench/internal/stats"

// Build is bench/build's results: a real C build run directly on the host
// against the same build run as a moat build through `moat serve`, and the
// fixed cost of a trivial build against one cold create → first exec of
// the same daemon (issue 22). Rounds and Warmup are those of the fixed
// cost's rows; the real build's are Config.BuildRounds and
// Config.BuildWarmup, interleaved with them in the same rounds. Times are
// in ms.
type Build struct {
	Run
	Config BuildConfig `json:"config"`
	Daemon Serve       `json:"daemon"`
	// Rows holds each row's times, in report order: the kinds below.
	Rows []BuildRow `json:"rows"`
}

// The kinds of bench/build's rows (BuildRow.Kind).
const (
	// BuildHost is the real build run directly on the host: its source
	// written into a fresh directory, make run there with the
	// environment a build's sandbox gets, the program read back.
	BuildHost = "host"
	// BuildSandbox is the same build as a moat build through the daemon:
	// the source tar sent, the program downloaded as an artifact.
	BuildSandbox = "sandbox"
	// BuildBaseline is one cold create carrying its first exec of true,
	// through the same daemon: the fixed cost's reference.
	BuildBaseline = "baseline"
	// BuildTrivial is a build of a one-file source running true, with no
	// output.
	BuildTrivial = "trivial"
	// BuildTrivialOutput is the same build collecting one file as an
	// artifact, downloaded.
	BuildTrivialOutput = "trivial-output"
)

// BuildConfig is bench/build's own flags and method.
type BuildConfig struct {
	// Units and Funcs size the real build: translation units of
	// functions each; SourceFiles and SourceBytes are its source.
	Units       int   `json:"units"`
	Funcs       int   `json:"funcs"`
	SourceFiles int   `json:"source_files"`
	SourceBytes int64 `json:"source_bytes"`
	// Command is the real build's command, on the host and in the
	// sandbox; HostEnv the environment it gets on the host.
	Command []string `json:"command"`
	HostEnv []string `json:"host_env"`
	// SandboxEnv is the variables' names the daemon's build reported
	// (api.Build.Env), to compare with HostEnv.
	SandboxEnv []string `json:"sandbox_env,omitempty"`
	// CPUs is the build sandbox's CPU quota (0: none, the daemon's
	// config sets no quota).
	CPUs float64 `json:"cpus"`
	// BuildRounds and BuildWarmup are the real build's measured and
	// unrecorded rounds.
	BuildRounds    int     `json:"build_rounds"`
	BuildWarmup    int     `json:"build_warmup"`
	CallTimeoutSec float64 `json:"call_timeout_s"`
	Timing         string  `json:"timing"`
	// HostProgram and SandboxProgram are the sha256 (hex) of the program
	// the last measured host build and sandboxed build made: gcc is
	// deterministic here, so they match unless the environments differ.
	HostProgram    string `json:"host_program_sha256,omitempty"`
	SandboxProgram string `json:"sandbox_program_sha256,omitempty"`
	// SourceDigest is the daemon's digest of the real build's source.
	SourceDigest string `json:"source_digest,omitempty"`
}

// BuildRow is one row: its samples and their statistics.
type BuildRow struct {
	Kind string `json:"kind"`
	What string `json:"what"`
	// Stats are the client's wall times, Samples the same in the order
	// taken.
	Stats   *stats.Summary `json:"ms"`
	Samples []float64      `json:"samples_ms"`
	// Duration is the builds' duration_ms as the daemon recorded it
	// (source check to the last artifact), for the rows of builds
	// through the daemon; Call is the client's build.create call alone
	// (the wall time less the artifact's download).
	Duration *stats.Summary `json:"duration_ms,omitempty"`
	Call     *stats.Summary `json:"call_ms,omitempty"`
	// Delete is the baseline's sandbox delete, untimed in its samples
	// but timed on its own: a build's answer comes after its sandbox's
	// deletion, a create's before.
	Delete *stats.Summary `json:"delete_ms,omitempty"`
	// PeakMemoryBytes is the largest peak memory of a sample's sandbox.
	PeakMemoryBytes int64 `json:"peak_memory_bytes,omitempty"`
	// Failures counts the samples that failed (recorded in Errors).
	Failures int `json:"failures"`
}

// Row returns the row of kind, or nil.
func (b *Build) Row(kind string) *BuildRow {
	for i := range b.Rows {
		if b.Rows[i].Kind == kind {
			return &b.Rows[i]
		}
	}
	return nil
}

func (b *Build) check() error {
	if b.Rows == nil {
		return missing(`"rows"`)
	}
	return nil
}
