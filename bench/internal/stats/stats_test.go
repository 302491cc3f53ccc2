package stats

import (
	"math"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPercentile(t *testing.T) {
	one2ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	var hundred []float64
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, float64(i))
	}
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
		// 1..100: p95 sits at index 94.05, between 95 and 96.
		{"p95 of 1..100", hundred, 0.95, 95.05},
		{"p99 of 1..100", hundred, 0.99, 99.01},
	}
	for _, c := range cases {
		if got := Percentile(c.sorted, c.p); !near(got, c.want) {
			t.Errorf("%s: Percentile(%v, %v) = %v, want %v", c.name, c.sorted, c.p, got, c.want)
		}
	}
	if got := Percentile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Percentile(empty) = %v, want NaN", got)
	}
}

func TestSummarize(t *testing.T) {
	// Unsorted on purpose; population stddev 2, sample stddev sqrt(32/7).
	in := []float64{9, 2, 5, 4, 7, 4, 5, 4}
	orig := slices.Clone(in)
	s, ok := Summarize(in)
	if !ok {
		t.Fatal("Summarize reported no samples")
	}
	if !slices.Equal(in, orig) {
		t.Errorf("Summarize modified its input: %v", in)
	}
	want := Summary{N: 8, Min: 2, P50: 4.5, P95: 8.3, P99: 8.86, Max: 9, Mean: 5, Stddev: math.Sqrt(32.0 / 7)}
	if s.N != want.N || !near(s.Min, want.Min) || !near(s.P50, want.P50) || !near(s.P95, want.P95) ||
		!near(s.P99, want.P99) || !near(s.Max, want.Max) || !near(s.Mean, want.Mean) || !near(s.Stddev, want.Stddev) {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}

	if _, ok := Summarize(nil); ok {
		t.Error("Summarize(nil) reported samples")
	}
	s, _ = Summarize([]float64{3})
	if s.N != 1 || s.Min != 3 || s.P50 != 3 || s.P99 != 3 || s.Max != 3 || s.Mean != 3 || s.Stddev != 0 {
		t.Errorf("Summarize single = %+v", s)
	}
}
