package templates

import "testing"

func TestNames(t *testing.T) {
	for _, ok := range []string{"a", "py3.12", "node_20-slim", "0x"} {
		if !validName(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "A", "-x", ".x", "a/b", "a b", "x\x00", string(make([]byte, 64))} {
		if validName(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
	if !validSnapshotID("snap-0123456789abcdef0123") || validSnapshotID("snap-0123456789ABCDEF0123") || validSnapshotID("snap-../../etc/passwd") || validSnapshotID("snap-0123") {
		t.Error("snapshot ids")
	}
}
