//go:build !linux

package testutil

import "testing"

// Tmpfs needs Linux's mount(2): off Linux the test is skipped (failed
// under CI=true), as on a Linux host without root.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	SkipOrFail(t, "a size-capped tmpfs needs Linux")
	return ""
}
