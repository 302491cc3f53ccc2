package linux

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/guest"
	"github.com/moat-sandbox/moat/sandbox"
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

// TestSwapIDMap: the template layer's map swaps the template's user and
// the sandbox user and maps every other id of 0–65535 to itself, on the
// sandbox's host range; without a swap it is the sandbox's own map.
func TestSwapIDMap(t *testing.T) {
	const base = 1 << 30
	apply := func(m []syscall.SysProcIDMap, id uint32) (uint32, bool) {
		for _, r := range m {
			if id >= uint32(r.ContainerID) && id < uint32(r.ContainerID+r.Size) {
				return uint32(r.HostID) + id - uint32(r.ContainerID), true
			}
		}
		return 0, false
	}
	for _, u := range []uint32{0, 1, 999, 1000, 1001, 65534, 65535} {
		m := swapIDMap(base, u, sandbox.UID)
		if len(m) > 5 {
			t.Fatalf("user %d: %d ranges", u, len(m))
		}
		seen := map[uint32]bool{}
		for id := uint32(0); id < uidsPer; id++ {
			h, ok := apply(m, id)
			if !ok || seen[h] || h < base || h >= base+uidsPer {
				t.Fatalf("user %d: id %d maps to %d (%v), twice or outside the range", u, id, h, ok)
			}
			seen[h] = true
			want := base + id
			switch id {
			case u:
				want = base + sandbox.UID
			case sandbox.UID:
				want = base + u
			}
			if h != want {
				t.Fatalf("user %d: id %d maps to %d, want %d", u, id, h, want)
			}
		}
	}
	tu := &templateUser{uid: 0, gid: 0}
	if u, g := tu.seen(0, 0); u != sandbox.UID || g != sandbox.GID || !tu.swaps() {
		t.Errorf("root's files appear as %d:%d", u, g)
	}
	if u, g := tu.seen(500, 1000); u != 500 || g != 0 {
		t.Errorf("500:1000 appears as %d:%d", u, g)
	}
	if (&templateUser{uid: sandbox.UID, gid: sandbox.GID}).swaps() {
		t.Error("a template whose user is 1000:1000 needs an idmap of its own")
	}
}
