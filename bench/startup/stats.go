package main

import (
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// setStats fills r's statistics from its samples; they stay nil when it
// has none.
func setStats(r *schema.StartupSystem) {
	s, ok := stats.Summarize(r.SamplesMs)
	r.N = s.N
	if !ok {
		return
	}
	p := func(v float64) *float64 { return &v }
	r.Min, r.P50, r.P95, r.P99 = p(s.Min), p(s.P50), p(s.P95), p(s.P99)
	r.Mean, r.Stddev = p(s.Mean), p(s.Stddev)
}
