package linux

import (
	"errors"
	"testing"
)

// TestCgroupKey: a key's value is found on its own line of "key value"
// lines, whatever comes before or after; a missing key is errNoKey.
func TestCgroupKey(t *testing.T) {
	b := []byte("user 12\nsystem 7\n")
	for key, want := range map[string]uint64{"user": 12, "system": 7} {
		if got, err := cgroupKey(b, key); err != nil || got != want {
			t.Errorf("%s: got %d, %v; want %d", key, got, err, want)
		}
	}
	events := []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n")
	if got, err := cgroupKey(events, "oom_kill"); err != nil || got != 2 {
		t.Errorf("oom_kill: got %d, %v", got, err)
	}
	if _, err := cgroupKey(events, "oom_kil"); !errors.Is(err, errNoKey) {
		t.Errorf("missing key: %v", err)
	}
}
