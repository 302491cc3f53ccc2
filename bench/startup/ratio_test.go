package main

import (
	"math"
	"testing"

	"github.com/moat-sandbox/moat/bench/schema"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

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
	rs := []schema.StartupSystem{
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
	rs = []schema.StartupSystem{{Name: "bare", P50: ptr(1)}, {Name: "bwrap", P50: ptr(3)}}
	fillRatios(rs)
	if rs[1].RatioToMoat != nil || rs[1].RatioToBare == nil || !near(*rs[1].RatioToBare, 3) {
		t.Errorf("no moat row: bwrap ratios = %v, %v", rs[1].RatioToMoat, rs[1].RatioToBare)
	}
}

func TestSetStats(t *testing.T) {
	r := schema.StartupSystem{Name: "x", SamplesMs: []float64{3, 1, 2}}
	setStats(&r)
	if r.N != 3 || r.P50 == nil || *r.P50 != 2 || *r.Min != 1 {
		t.Errorf("setStats: n=%d p50=%v min=%v", r.N, r.P50, r.Min)
	}
	empty := schema.StartupSystem{Name: "y"}
	setStats(&empty)
	if empty.N != 0 || empty.P50 != nil || empty.Stddev != nil {
		t.Errorf("setStats on no samples set stats: %+v", empty)
	}
}
