package sandboxinit

import "testing"

// TestRestrictEmptyIsNoop: without restrictions the init applies and
// reports nothing.
func TestRestrictEmptyIsNoop(t *testing.T) {
	rep, err := applyRestrictions("/nonexistent", nil)
	if rep != nil || err != nil {
		t.Fatalf("%v %v", rep, err)
	}
}
