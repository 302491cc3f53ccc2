// Package stats summarises benchmark samples: n, min, max, percentiles
// (linear interpolation between closest ranks, the numpy / R type-7
// default), mean and sample standard deviation; shared by bench/startup and
// bench/controlplane.
package stats

import (
	"math"
	"slices"
	"time"
)

// Summary holds the statistics of a set of samples, in their unit.
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	P50    float64 `json:"p50"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
	Stddev float64 `json:"stddev"`
}

// Summarize computes the statistics of samples (any order; not modified).
// It returns ok=false when there are no samples.
func Summarize(samples []float64) (s Summary, ok bool) {
	if len(samples) == 0 {
		return Summary{}, false
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	s.N = len(sorted)
	s.Min = sorted[0]
	s.Max = sorted[len(sorted)-1]
	s.P50 = Percentile(sorted, 0.50)
	s.P95 = Percentile(sorted, 0.95)
	s.P99 = Percentile(sorted, 0.99)
	s.Mean, s.Stddev = MeanStddev(sorted)
	return s, true
}

// Of summarises samples for a report field: nil when there are none.
func Of(samples []float64) *Summary {
	s, ok := Summarize(samples)
	if !ok {
		return nil
	}
	return &s
}

// Ms is d in milliseconds, the unit of the benchmarks' samples.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Percentile returns the p-quantile (0 ≤ p ≤ 1) of sorted (ascending) by
// linear interpolation between the closest ranks: the value at fractional
// index p·(n−1), so p=0.5 is the usual median. NaN when sorted is empty.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 1 {
		return sorted[n-1]
	}
	h := p * float64(n-1)
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	frac := h - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// MeanStddev returns the mean and the sample standard deviation (n−1
// denominator; 0 for a single sample). NaN for no samples.
func MeanStddev(xs []float64) (mean, stddev float64) {
	n := float64(len(xs))
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean = sum / n
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		d := x - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / (n - 1))
}
