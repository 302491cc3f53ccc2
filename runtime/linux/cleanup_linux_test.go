package linux

import (
	"slices"
	"testing"
)

// TestCleanup: Clean undoes the steps last first, once; after Release it
// undoes nothing.
func TestCleanup(t *testing.T) {
	var got []int
	var cu cleanup
	for i := range 3 {
		cu.Add(func() { got = append(got, i) })
	}
	cu.Clean()
	cu.Clean()
	if !slices.Equal(got, []int{2, 1, 0}) {
		t.Errorf("Clean ran %v, want [2 1 0] once", got)
	}
	got = nil
	cu.Add(func() { got = append(got, 9) })
	cu.Release()
	cu.Clean()
	if got != nil {
		t.Errorf("Clean after Release ran %v", got)
	}
}
