package stats

import (
	"math"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPercentile(t *testing.T) {
	one2ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	cases := []struct {
		sorted []float64
		p      float64
		want   float64
	}{
		{one2ten, 0.50, 5.5},
		{one2ten, 0.95, 9.55},
		{one2ten, 0.99, 9.91},
		{one2ten, 0, 1},
		{one2ten, 1, 10},
		{[]float64{1, 3, 100}, 0.50, 3},
		{[]float64{1, 3, 100}, 0.25, 2},
		{[]float64{7}, 0.99, 7},
		{[]float64{2, 2, 2, 2}, 0.95, 2},
	}
	for _, c := range cases {
		if got := Percentile(c.sorted, c.p); !near(got, c.want) {
			t.Errorf("Percentile(%v, %v) = %v, want %v", c.sorted, c.p, got, c.want)
		}
	}
	if got := Percentile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Percentile(empty) = %v, want NaN", got)
	}
}

func TestSummarize(t *testing.T) {
	in := []float64{9, 2, 5, 4, 7, 4, 5, 4}
	orig := slices.Clone(in)
	s, ok := Summarize(in)
	if !ok {
		t.Fatal("no samples reported")
	}
	if !slices.Equal(in, orig) {
		t.Errorf("input modified: %v", in)
	}
	if s.N != 8 || s.Min != 2 || s.Max != 9 || !near(s.Mean, 5) || !near(s.P50, 4.5) {
		t.Errorf("got %+v", s)
	}
	if !near(s.Stddev, math.Sqrt(32.0/7)) {
		t.Errorf("stddev %v, want %v", s.Stddev, math.Sqrt(32.0/7))
	}
	if _, ok := Summarize(nil); ok {
		t.Error("Summarize(nil) reported samples")
	}
}
