package main

import (
	"math"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPercentileKnownData(t *testing.T) {
	one2ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	cases := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"median even n averages the middle two", one2ten, 0.50, 5.5},
		{"p95 interpolates", one2ten, 0.95, 9.55},
		{"p99 interpolates", one2ten, 0.99, 9.91},
		{"p0 is the minimum", one2ten, 0, 1},
		{"p100 is the maximum", one2ten, 1, 10},
		{"median odd n is the middle", []float64{1, 3, 100}, 0.50, 3},
		{"quartile odd n", []float64{1, 3, 100}, 0.25, 2},
		{"single sample", []float64{7}, 0.99, 7},
		{"ties", []float64{2, 2, 2, 2}, 0.95, 2},
	}
	for _, c := range cases {
		if got := percentile(c.sorted, c.p); !near(got, c.want) {
			t.Errorf("%s: percentile(%v, %v) = %v, want %v", c.name, c.sorted, c.p, got, c.want)
		}
	}
	// 1..100: p95 sits at index 94.05, between 95 and 96.
	var hundred []float64
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, float64(i))
	}
	if got := percentile(hundred, 0.95); !near(got, 95.05) {
		t.Errorf("percentile(1..100, 0.95) = %v, want 95.05", got)
	}
	if got := percentile(hundred, 0.99); !near(got, 99.01) {
		t.Errorf("percentile(1..100, 0.99) = %v, want 99.01", got)
	}
	if got := percentile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("percentile(empty) = %v, want NaN", got)
	}
}

func TestSummarize(t *testing.T) {
	// Unsorted on purpose; population stddev 2, sample stddev sqrt(32/7).
	in := []float64{9, 2, 5, 4, 7, 4, 5, 4}
	orig := slices.Clone(in)
	s, ok := summarize(in)
	if !ok {
		t.Fatal("summarize reported no samples")
	}
	if !slices.Equal(in, orig) {
		t.Errorf("summarize modified its input: %v", in)
	}
	want := summary{N: 8, Min: 2, P50: 4.5, P95: 8.3, P99: 8.86, Mean: 5, Stddev: math.Sqrt(32.0 / 7)}
	if s.N != want.N || !near(s.Min, want.Min) || !near(s.P50, want.P50) || !near(s.P95, want.P95) ||
		!near(s.P99, want.P99) || !near(s.Mean, want.Mean) || !near(s.Stddev, want.Stddev) {
		t.Errorf("summarize = %+v, want %+v", s, want)
	}

	if _, ok := summarize(nil); ok {
		t.Error("summarize(nil) reported samples")
	}
	s, _ = summarize([]float64{3})
	if s.N != 1 || s.Min != 3 || s.P50 != 3 || s.P99 != 3 || s.Mean != 3 || s.Stddev != 0 {
		t.Errorf("summarize single = %+v", s)
	}
}

func ptr(v float64) *float64 { return &v }

func TestRatio(t *testing.T) {
	if r := ratio(ptr(6), ptr(2)); r == nil || !near(*r, 3) {
		t.Errorf("ratio(6, 2) = %v, want 3", r)
	}
	if r := ratio(ptr(1), ptr(4)); r == nil || !near(*r, 0.25) {
		t.Errorf("ratio(1, 4) = %v, want 0.25", r)
	}
	for _, c := range []struct{ num, den *float64 }{{nil, ptr(1)}, {ptr(1), nil}, {ptr(1), ptr(0)}, {ptr(1), ptr(math.NaN())}} {
		if r := ratio(c.num, c.den); r != nil {
			t.Errorf("ratio(%v, %v) = %v, want nil", c.num, c.den, *r)
		}
	}
}

func TestFillRatios(t *testing.T) {
	rs := []systemResult{
		{Name: "bare", P50: ptr(0.5)},
		{Name: "moat", P50: ptr(4)},
		{Name: "bwrap", P50: ptr(2)},
		{Name: "runsc", SkippedReason: "not installed"},
	}
	fillRatios(rs)
	want := map[string][2]float64{ // to moat, to bare
		"bare":  {0.125, 1},
		"moat":  {1, 8},
		"bwrap": {0.5, 4},
	}
	for _, r := range rs {
		w, ok := want[r.Name]
		if !ok {
			if r.RatioToMoat != nil || r.RatioToBare != nil {
				t.Errorf("%s: skipped row got ratios %v %v", r.Name, r.RatioToMoat, r.RatioToBare)
			}
			continue
		}
		if r.RatioToMoat == nil || !near(*r.RatioToMoat, w[0]) {
			t.Errorf("%s: ratio_to_moat = %v, want %v", r.Name, r.RatioToMoat, w[0])
		}
		if r.RatioToBare == nil || !near(*r.RatioToBare, w[1]) {
			t.Errorf("%s: ratio_to_bare = %v, want %v", r.Name, r.RatioToBare, w[1])
		}
	}

	// Without a moat row (--systems bare,bwrap) only the bare ratios exist.
	rs = []systemResult{{Name: "bare", P50: ptr(1)}, {Name: "bwrap", P50: ptr(3)}}
	fillRatios(rs)
	if rs[1].RatioToMoat != nil || rs[1].RatioToBare == nil || !near(*rs[1].RatioToBare, 3) {
		t.Errorf("no moat row: bwrap ratios = %v, %v", rs[1].RatioToMoat, rs[1].RatioToBare)
	}
}

func TestSetStats(t *testing.T) {
	r := systemResult{Name: "x", SamplesMs: []float64{3, 1, 2}}
	r.setStats()
	if r.N != 3 || r.P50 == nil || *r.P50 != 2 || *r.Min != 1 {
		t.Errorf("setStats: n=%d p50=%v min=%v", r.N, r.P50, r.Min)
	}
	empty := systemResult{Name: "y"}
	empty.setStats()
	if empty.N != 0 || empty.P50 != nil || empty.Stddev != nil {
		t.Errorf("setStats on no samples set stats: %+v", empty)
	}
}
