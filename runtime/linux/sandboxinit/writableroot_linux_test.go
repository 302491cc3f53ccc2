package sandboxinit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/guest"
)

// TestRootWriteRules: every entry of the root gets a rule but the excluded
// paths, what lies beneath them and the places granted already; a
// directory holding an excluded path gets rules for its other entries
// instead of one of its own; symlinks get none.
func TestRootWriteRules(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"dev/pts", "proc/1", "usr/local/bin", "app", "opt/ro/sub", "opt/data", "tmp", "home/sandbox", "workspace/.git"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{".dockerenv", "opt/notes"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{{"/", "escape"}, {"/proc", "opt/procs"}, {"usr/bin", "bin"}} {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	mounts := []guest.Mount{{Target: "/opt/ro"}, {Target: "/workspace/ref"}, {Target: "/opt/data", Writable: true}}
	restrict := []guest.Restriction{{Path: "/workspace/.git", Mode: guest.RestrictReadOnly}, {Path: "/app", Mode: guest.RestrictPin}}
	ex := rootWriteExclusions(mounts, restrict)
	dirs, files, err := rootWriteRules(root, ex, []string{"/tmp", "/home/sandbox", "/dev/shm", "/workspace", "/opt/data"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	slices.Sort(files)
	if want := []string{"/app", "/home", "/usr"}; !slices.Equal(dirs, want) {
		t.Errorf("directories: got %q, want %q", dirs, want)
	}
	if want := []string{"/.dockerenv", "/opt/notes"}; !slices.Equal(files, want) {
		t.Errorf("files: got %q, want %q", files, want)
	}
}
