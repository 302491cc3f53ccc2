package main

import (
	"math"
	"slices"
)

// summary holds the statistics of one system's timed runs, in milliseconds.
type summary struct {
	N      int
	Min    float64
	P50    float64
	P95    float64
	P99    float64
	Mean   float64
	Stddev float64
}

// summarize computes the statistics of samples (any order; not modified).
// It returns ok=false when there are no samples.
func summarize(samples []float64) (s summary, ok bool) {
	if len(samples) == 0 {
		return summary{}, false
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	s.N = len(sorted)
	s.Min = sorted[0]
	s.P50 = percentile(sorted, 0.50)
	s.P95 = percentile(sorted, 0.95)
	s.P99 = percentile(sorted, 0.99)
	s.Mean, s.Stddev = meanStddev(sorted)
	return s, true
}

// percentile returns the p-quantile (0 ≤ p ≤ 1) of sorted (ascending, not
// empty) by linear interpolation between the closest ranks: the value at
// fractional index p·(n−1). This is the default of numpy, R (type 7) and
// spreadsheets, so p=0.5 is the usual median (mean of the two middle values
// for even n).
func percentile(sorted []float64, p float64) float64 {
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

// meanStddev returns the mean and the sample standard deviation (n−1
// denominator; 0 for a single sample).
func meanStddev(xs []float64) (mean, stddev float64) {
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

// ratio returns num/den, or nil when either side is missing or den is not
// positive (no reference to compare with).
func ratio(num, den *float64) *float64 {
	if num == nil || den == nil || *den <= 0 || math.IsNaN(*num) || math.IsNaN(*den) {
		return nil
	}
	r := *num / *den
	return &r
}

// fillRatios sets each result's ratio of its median to the medians of the
// "moat" and "bare" rows; a ratio stays nil when its reference row is absent,
// skipped or has no successful run.
func fillRatios(results []systemResult) {
	var moatP50, bareP50 *float64
	for i := range results {
		switch results[i].Name {
		case "moat":
			moatP50 = results[i].P50
		case "bare":
			bareP50 = results[i].P50
		}
	}
	for i := range results {
		results[i].RatioToMoat = ratio(results[i].P50, moatP50)
		results[i].RatioToBare = ratio(results[i].P50, bareP50)
	}
}
