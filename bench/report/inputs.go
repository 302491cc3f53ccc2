package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/moat-sandbox/moat/bench/internal/stats"
)

// The types below mirror the parts of each benchmark's JSON that the
// report reads. They are copies, not imports (every benchmark is its own
// package main); fields a benchmark adds later are ignored, and a field
// that is missing reads as its zero value.

// host is the machine description every benchmark records
// (bench/internal/machine.Host), with what some of them add.
type host struct {
	Kernel      string `json:"kernel"`
	OS          string `json:"os"`
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model"`
	GoVersion   string `json:"go_version"`
	UID         *int   `json:"uid"`
	MemTotalKiB int64  `json:"mem_total_kib"` // bench/density only
	PIDMax      int    `json:"pid_max"`       // bench/density only
}

// ---- bench/startup ----

type startupFile struct {
	Machine struct {
		host
		LoadAvg    string            `json:"loadavg"`
		Versions   map[string]string `json:"versions"`
		MoatCommit string            `json:"moat_commit"`
		Date       string            `json:"date"`
	} `json:"machine"`
	Config struct {
		Command     string `json:"command"`
		Rounds      int    `json:"rounds"`
		Warmup      int    `json:"warmup"`
		Seed        uint64 `json:"seed"`
		DurationSec int    `json:"duration_s"`
	} `json:"config"`
	Systems []startupSystem `json:"systems"`
	Failed  bool            `json:"failed"`
}

type startupSystem struct {
	Name          string    `json:"name"`
	About         string    `json:"about"`
	Command       string    `json:"command"`
	N             int       `json:"n"`
	Failed        int       `json:"failed"`
	Errors        []string  `json:"errors"`
	Min           *float64  `json:"min_ms"`
	P50           *float64  `json:"p50_ms"`
	P95           *float64  `json:"p95_ms"`
	P99           *float64  `json:"p99_ms"`
	Mean          *float64  `json:"mean_ms"`
	Stddev        *float64  `json:"stddev_ms"`
	SkippedReason string    `json:"skipped_reason"`
	SamplesMs     []float64 `json:"samples_ms"`
}

// measured reports whether the system has statistics.
func (s *startupSystem) measured() bool { return s != nil && s.P50 != nil && s.N > 0 }

func (f *startupFile) system(name string) *startupSystem {
	for i := range f.Systems {
		if f.Systems[i].Name == name {
			return &f.Systems[i]
		}
	}
	return nil
}

// ---- bench/syscall ----

type syscallFile struct {
	Machine *host           `json:"machine"`
	Commit  string          `json:"commit"`
	Date    string          `json:"date"`
	LoadAvg string          `json:"loadavg"`
	Rounds  int             `json:"rounds"`
	Results []syscallResult `json:"results"`
}

type syscallResult struct {
	Name        string  `json:"name"`
	What        string  `json:"what"`
	InsideNs    float64 `json:"inside_ns_per_op_p50"`
	OutsideNs   float64 `json:"outside_ns_per_op_p50"`
	OverheadPct float64 `json:"overhead_pct"`
	InsideP95   float64 `json:"inside_ns_per_op_p95"`
	OutsideP95  float64 `json:"outside_ns_per_op_p95"`
	InsideP99   float64 `json:"inside_ns_per_op_p99"`
	OutsideP99  float64 `json:"outside_ns_per_op_p99"`
}

// ---- bench/policy ----

type policyFile struct {
	Machine host          `json:"machine"`
	Commit  string        `json:"commit"`
	Date    string        `json:"date"`
	Rounds  int           `json:"rounds"`
	Compile stats.Summary `json:"compile_us"`
	Mix     *policyRow    `json:"mix"`
	Rows    []policyRow   `json:"requests"`
	Spec    []struct {
		Workspace string        `json:"workspace"`
		Entries   int           `json:"entries"`
		Walked    int           `json:"walked"`
		Restrict  int           `json:"restrict"`
		Micros    stats.Summary `json:"us"`
	} `json:"spec"`
}

type policyRow struct {
	Request string        `json:"request"`
	Effect  string        `json:"effect"`
	Micros  stats.Summary `json:"us"`
}

// ---- bench/netproxy ----

type netproxyFile struct {
	Machine    host          `json:"machine"`
	Commit     string        `json:"commit"`
	Date       string        `json:"date"`
	SizeBytes  int64         `json:"size_bytes"`
	Rounds     int           `json:"rounds"`
	Throughput []netproxyRow `json:"throughput"`
	Sandbox    []netproxyRow `json:"sandbox"`
	Connects   int           `json:"connects"`
	Latency    []struct {
		Name string        `json:"name"`
		Ms   stats.Summary `json:"ms"`
	} `json:"latency"`
	AddedP50Ms float64  `json:"added_p50_ms"`
	Failures   []string `json:"failures"`
}

type netproxyRow struct {
	Name  string        `json:"name"`
	About string        `json:"about"`
	MBps  stats.Summary `json:"mb_per_s"`
	Ratio float64       `json:"ratio_to_direct"`
}

// ---- bench/controlplane ----

type controlplaneFile struct {
	Machine struct {
		host
		LoadAvgStart string `json:"loadavg_start"`
		LoadAvgEnd   string `json:"loadavg_end"`
		MoatVersion  string `json:"moat_version"`
		BwrapVersion string `json:"bwrap_version"`
		MoatCommit   string `json:"moat_commit"`
		Date         string `json:"date"`
	} `json:"machine"`
	Command string `json:"command"`
	Config  struct {
		Iterations     int     `json:"iterations"`
		Warmup         int     `json:"warmup"`
		Burst          int     `json:"burst"`
		Bursts         int     `json:"bursts"`
		ExecIterations int     `json:"exec_iterations"`
		ExecWarmup     int     `json:"exec_warmup"`
		SoakSec        float64 `json:"soak_s"`
		SoakSandboxes  int     `json:"soak_sandboxes"`
		FileEvery      int     `json:"file_every"`
		Seed           uint64  `json:"seed"`
		DurationSec    float64 `json:"duration_s"`
	} `json:"config"`
	Daemon struct {
		Command     string   `json:"command"`
		StopMs      float64  `json:"stop_ms"`
		ExitedOK    bool     `json:"exited_ok"`
		Connections int64    `json:"connections"`
		LogLines    int      `json:"log_lines"`
		LogProblems int      `json:"log_problems"`
		FirstProbs  []string `json:"first_problems"`
	} `json:"daemon"`
	TTI    []cpRow `json:"tti"`
	Bursts *struct {
		Size     int            `json:"size"`
		Makespan *stats.Summary `json:"makespan_ms"`
	} `json:"bursts"`
	Exec   *cpRow       `json:"exec_round_trip"`
	Soak   *cpSoak      `json:"soak"`
	Memory []cpMemory   `json:"memory"`
	Errors []string     `json:"errors"`
	Failed bool         `json:"failed"`
	Goals  []cpGoalJSON `json:"goals"`
}

type cpGoalJSON struct {
	Name   string   `json:"name"`
	Target string   `json:"target"`
	Value  *float64 `json:"value"`
	Met    *bool    `json:"met"`
}

type cpRow struct {
	Name           string         `json:"name"`
	Mode           string         `json:"mode"`
	Kind           string         `json:"kind"`
	About          string         `json:"about"`
	Command        string         `json:"command"`
	N              int            `json:"n"`
	Failed         int            `json:"failed"`
	Errors         []string       `json:"errors"`
	Stats          *stats.Summary `json:"stats_ms"`
	Create         *stats.Summary `json:"create_ms"`
	FirstExec      *stats.Summary `json:"first_exec_ms"`
	SkippedReason  string         `json:"skipped_reason"`
	SamplesMs      []float64      `json:"samples_ms"`
	RatioToBwrap   *float64       `json:"ratio_to_bwrap"`
	RatioToMoatRun *float64       `json:"ratio_to_moat_run"`
}

type cpSoak struct {
	Sandboxes        int                       `json:"sandboxes"`
	ElapsedSec       float64                   `json:"elapsed_s"`
	Calls            int                       `json:"calls"`
	Errors           int                       `json:"errors"`
	Throughput       float64                   `json:"calls_per_s"`
	Latency          *stats.Summary            `json:"latency_ms"`
	ByKind           map[string]*stats.Summary `json:"latency_by_kind_ms"`
	Create           *stats.Summary            `json:"create_ms"`
	Delete           *stats.Summary            `json:"delete_ms"`
	DaemonRSSStartKB int64                     `json:"daemon_rss_start_kb"`
	DaemonRSSPeakKB  int64                     `json:"daemon_rss_peak_kb"`
	DaemonRSSLastKB  int64                     `json:"daemon_rss_last_kb"`
	DaemonHWMKB      int64                     `json:"daemon_hwm_kb"`
	SandboxPeakRSSKB int64                     `json:"sandbox_peak_rss_kb"`
	SandboxPeakProcs int                       `json:"sandbox_peak_procs"`
	SandboxEndPSSKB  *int64                    `json:"sandbox_end_pss_kb"`
}

type cpMemory struct {
	Phase         string  `json:"phase"`
	AtSec         float64 `json:"at_s"`
	DaemonRSSKB   int64   `json:"daemon_rss_kb"`
	DaemonHWMKB   int64   `json:"daemon_hwm_kb"`
	DaemonThreads int     `json:"daemon_threads"`
	DaemonFDs     int     `json:"daemon_fds"`
	SandboxProcs  int     `json:"sandbox_procs"`
	SandboxRSSKB  int64   `json:"sandbox_rss_kb"`
	SandboxPSSKB  *int64  `json:"sandbox_pss_kb"`
}

// ---- bench/rootfs ----

type rootfsFile struct {
	Machine   host                     `json:"machine"`
	Commit    string                   `json:"commit"`
	Date      string                   `json:"date"`
	LoadAvg   string                   `json:"loadavg"`
	Kinds     map[string]stats.Summary `json:"kinds"`
	Samples   map[string][]float64     `json:"samples"`
	PoolHits  int                      `json:"pool_hits"`
	PoolTries int                      `json:"pool_tries"`
	Snapshot  struct {
		MiB       int     `json:"written_mib"`
		MeanBytes float64 `json:"mean_bytes"`
		Entries   int     `json:"entries"`
	} `json:"snapshot"`
	Failures int      `json:"failures"`
	Args     []string `json:"args"`
}

// ---- bench/density ----

type densityFile struct {
	Machine struct {
		host
		LoadAvgStart string `json:"loadavg_start"`
		LoadAvgEnd   string `json:"loadavg_end"`
		MoatVersion  string `json:"moat_version"`
		MoatCommit   string `json:"moat_commit"`
		Date         string `json:"date"`
	} `json:"machine"`
	Command string `json:"command"`
	Daemon  string `json:"daemon"`
	Config  struct {
		Levels  []int `json:"levels"`
		Samples int   `json:"samples"`
		Warmup  int   `json:"warmup"`
	} `json:"config"`
	Levels  []densityLevel `json:"levels"`
	Density struct {
		Live                 int     `json:"live"`
		GoalLive             int     `json:"goal_live"`
		GoalPSSKiB           float64 `json:"goal_pss_kib"`
		MoatPSSPerSandboxKiB float64 `json:"moat_pss_per_sandbox_kib"`
		Met                  *bool   `json:"met"`
		Projection           *struct {
			// Two shapes have existed: {max, limit, limits{name: n}} and
			// {by_memory, by_pids, limit}; both are read.
			Max      int            `json:"max"`
			Limit    string         `json:"limit"`
			Limits   map[string]int `json:"limits"`
			ByMemory int            `json:"by_memory"`
			ByPIDs   int            `json:"by_pids"`
		} `json:"projection"`
	} `json:"density"`
	Teardown *struct {
		Deleted int            `json:"deleted"`
		Sec     float64        `json:"s"`
		Delete  *stats.Summary `json:"delete_ms"`
	} `json:"teardown"`
	Failed bool     `json:"failed"`
	Errors []string `json:"errors"`
}

type densityLevel struct {
	Live       int            `json:"live"`
	FillSec    float64        `json:"fill_s"`
	Create     *stats.Summary `json:"create_ms"`
	TTI        *stats.Summary `json:"tti_ms"`
	TTISamples []float64      `json:"tti_samples_ms"`
	Run        *stats.Summary `json:"run_ms"`
	RunSamples []float64      `json:"run_samples_ms"`
	Memory     struct {
		SandboxProcs         int     `json:"sandbox_procs"`
		SandboxPSSKiB        float64 `json:"sandbox_pss_kib"`
		DaemonPSSKiB         float64 `json:"daemon_pss_kib"`
		DaemonPSSBaseKiB     float64 `json:"daemon_pss_base_kib"`
		MoatPSSPerSandboxKiB float64 `json:"moat_pss_per_sandbox_kib"`
		InitPSSPerSandboxKiB float64 `json:"init_pss_per_sandbox_kib"`
		SystemPerSandboxKiB  float64 `json:"system_per_sandbox_kib"`
		KernelPerSandboxKiB  float64 `json:"kernel_per_sandbox_kib"`
		ThreadsPerSandbox    float64 `json:"threads_per_sandbox"`
	} `json:"memory"`
}

// ---- loading ----

// inputs holds every results file found; nil means the file is missing
// (that benchmark was not run in this invocation).
type inputs struct {
	dir          string
	Startup      *startupFile
	Syscall      *syscallFile
	Policy       *policyFile
	Netproxy     *netproxyFile
	Controlplane *controlplaneFile
	Daemon       *daemonFile
	Rootfs       *rootfsFile
	Density      *densityFile
}

// benchFile names one benchmark's results file and what must be in it.
type benchFile struct {
	bench string // bench/NAME
	file  string // NAME.json in the results directory
	// load decodes data into the inputs and checks the one part the
	// report cannot do without.
	load func(in *inputs, data []byte) error
}

var benchFiles = []benchFile{
	{"startup", "startup.json", func(in *inputs, b []byte) error {
		return decode(b, &in.Startup, func(f *startupFile) bool { return f.Systems != nil }, `"systems"`)
	}},
	{"syscall", "syscall.json", func(in *inputs, b []byte) error {
		return decode(b, &in.Syscall, func(f *syscallFile) bool { return f.Results != nil }, `"results"`)
	}},
	{"policy", "policy.json", func(in *inputs, b []byte) error {
		return decode(b, &in.Policy, func(f *policyFile) bool { return f.Mix != nil }, `"mix"`)
	}},
	{"netproxy", "netproxy.json", func(in *inputs, b []byte) error {
		return decode(b, &in.Netproxy, func(f *netproxyFile) bool { return f.Throughput != nil }, `"throughput"`)
	}},
	{"controlplane", "controlplane.json", func(in *inputs, b []byte) error {
		return decode(b, &in.Controlplane, func(f *controlplaneFile) bool { return f.TTI != nil || f.Exec != nil }, `"tti" or "exec_round_trip"`)
	}},
	{"daemon", "daemon.json", func(in *inputs, b []byte) error {
		return decode(b, &in.Daemon, func(f *daemonFile) bool { return f.Flood != nil || f.Throughput != nil }, `"flood" or "throughput"`)
	}},
	{"rootfs", "rootfs.json", func(in *inputs, b []byte) error {
		return decode(b, &in.Rootfs, func(f *rootfsFile) bool { return f.Kinds != nil }, `"kinds"`)
	}},
	{"density", "density.json", func(in *inputs, b []byte) error {
		return decode(b, &in.Density, func(f *densityFile) bool { return f.Levels != nil }, `"levels"`)
	}},
}

// decode unmarshals data into a new T stored in *dst and checks it with
// ok; what names the field ok looks for, for the error.
func decode[T any](data []byte, dst **T, ok func(*T) bool, what string) error {
	v := new(T)
	if err := json.Unmarshal(data, v); err != nil {
		return err
	}
	if !ok(v) {
		return fmt.Errorf("no %s in it: not this benchmark's results", what)
	}
	*dst = v
	return nil
}

// errMalformed wraps a results file that exists but cannot be read.
var errMalformed = errors.New("malformed results file")

// load reads every results file of dir. A missing file is not an error;
// one that cannot be read or decoded is.
func load(dir string) (*inputs, error) {
	in := &inputs{dir: dir}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("results directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("results directory %s: not a directory", dir)
	}
	for _, bf := range benchFiles {
		p := filepath.Join(dir, bf.file)
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := bf.load(in, data); err != nil {
			return nil, fmt.Errorf("%w %s (written by bench/%s): %v", errMalformed, p, bf.bench, err)
		}
	}
	return in, nil
}

// present reports whether the results of bench/name were found.
func (in *inputs) present(name string) bool {
	switch name {
	case "startup":
		return in.Startup != nil
	case "syscall":
		return in.Syscall != nil
	case "policy":
		return in.Policy != nil
	case "netproxy":
		return in.Netproxy != nil
	case "controlplane":
		return in.Controlplane != nil
	case "daemon":
		return in.Daemon != nil
	case "rootfs":
		return in.Rootfs != nil
	case "density":
		return in.Density != nil
	}
	return false
}
