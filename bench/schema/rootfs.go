package schema

import "github.com/moat-sandbox/moat/bench/internal/stats"

// Rootfs is bench/rootfs's results: warm pools, templates, snapshots and
// forks through the in-process control plane. Rounds are the measured
// create → echo rounds per kind, Warmup the unrecorded ones first; times
// are in ms.
type Rootfs struct {
	Run
	Config RootfsConfig `json:"config"`
	// Kinds holds each kind's statistics: warm, warm-runtime,
	// cold-host, cold-oci, snapshot, fork.
	Kinds map[string]stats.Summary `json:"kinds"`
	// Samples holds each kind's measured times in the order taken.
	Samples   map[string][]float64 `json:"samples,omitempty"`
	PoolHits  int                  `json:"pool_hits"`
	PoolTries int                  `json:"pool_tries"`
	Snapshot  RootfsSnapshot       `json:"snapshot"`
	// Failures counts the measured runs that failed.
	Failures int `json:"failures"`
}

// RootfsConfig is bench/rootfs's own flags.
type RootfsConfig struct {
	SnapshotRounds int `json:"snapshot_rounds"`
	Forks          int `json:"forks"`
	SnapshotMiB    int `json:"snapshot_mib"`
	Pool           int `json:"pool"`
}

// RootfsSnapshot is what the snapshots stored.
type RootfsSnapshot struct {
	MiB       int     `json:"written_mib"`
	MeanBytes float64 `json:"mean_bytes"`
	Entries   int     `json:"entries"`
}

func (f *Rootfs) check() error {
	if f.Kinds == nil {
		return missing(`"kinds"`)
	}
	return nil
}
