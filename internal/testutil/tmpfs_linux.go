package testutil

import (
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size bytes on a new temporary directory (mode
// 0700) and returns its path; it is unmounted when the test ends. It needs
// root.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size="+strconv.FormatInt(size, 10)); err != nil {
		SkipOrFail(t, "mount tmpfs: "+err.Error())
	}
	t.Cleanup(func() {
		// Lazily: a daemon still stopping may hold files open.
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
