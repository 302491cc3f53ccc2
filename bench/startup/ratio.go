package main

import (
	"math"

	"github.com/moat-sandbox/moat/bench/schema"
)

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
func fillRatios(results []schema.StartupSystem) {
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
