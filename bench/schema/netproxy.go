package schema

import "github.com/moat-sandbox/moat/bench/internal/stats"

// Netproxy is bench/netproxy's results: the egress proxy's throughput and
// added connect latency against direct transfers, alternating. Rounds are
// the downloads per way; transfer failures are in the envelope's Errors.
type Netproxy struct {
	Run
	SizeBytes int64 `json:"size_bytes"`
	// Connects is the fresh connections per way of the latency figures.
	Connects   int           `json:"connects"`
	Throughput []NetproxyRow `json:"throughput"`
	// Sandbox is curl inside moat run --net proxy against curl on the
	// host; SandboxSkipped says why it was not measured.
	Sandbox        []NetproxyRow     `json:"sandbox,omitempty"`
	SandboxSkipped string            `json:"sandbox_skipped,omitempty"`
	Latency        []NetproxyLatency `json:"latency"`
	// AddedP50Ms is the proxy's connect p50 minus the direct p50.
	AddedP50Ms float64 `json:"added_p50_ms"`
}

// NetproxyRow is one way of making the download, in MB/s; the first row
// of a group is the reference of the others' ratios.
type NetproxyRow struct {
	Name  string        `json:"name"`
	About string        `json:"about"`
	MBps  stats.Summary `json:"mb_per_s"`
	Ratio float64       `json:"ratio_to_direct,omitempty"` // p50 / the group's first p50
}

// NetproxyLatency is a fresh connection and a tiny request of one way,
// in ms.
type NetproxyLatency struct {
	Name string        `json:"name"`
	Ms   stats.Summary `json:"ms"`
}

func (f *Netproxy) check() error {
	if f.Throughput == nil {
		return missing(`"throughput"`)
	}
	return nil
}
