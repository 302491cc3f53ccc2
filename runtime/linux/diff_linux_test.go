package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/fstree"
	"github.com/moat-sandbox/moat/sandbox"
)

// diffSandbox creates a long-lived sandbox for export tests.
func diffSandbox(t *testing.T) *linuxSandbox {
	t.Helper()
	r := newTestRuntime(t)
	sb, err := r.Create(context.Background(), &sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Shutdown(context.Background()) })
	ls := sb.(*linuxSandbox)
	if ls.cg == nil {
		t.Skip("skipping: no cgroup, no freezer")
	}
	return ls
}

// export runs ExportDiff into a fresh directory and returns it.
func export(t *testing.T, s *linuxSandbox, opts sandbox.DiffOptions) (string, *sandbox.DiffStats) {
	t.Helper()
	dst := t.TempDir()
	st, err := s.ExportDiff(context.Background(), dst, opts)
	if err != nil {
		t.Fatalf("export since %d: %v", opts.Since, err)
	}
	if st.Mark == 0 || !strings.HasPrefix(st.Digest, "sha256:") || len(st.Digest) != len("sha256:")+64 {
		t.Fatalf("export stats: %+v", st)
	}
	return dst, st
}

// entries lists a diff: each entry's path, type, mode, owner, link target
// or size, and "opaque" for an opaque directory, sorted.
func entries(t *testing.T, dst string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dst, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		if rel == "." {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s %s %04o %d:%d", rel, typeOf(&st), st.Mode&0o7777, st.Uid, st.Gid)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case unix.S_IFREG:
			line += fmt.Sprintf(" %d", st.Size)
		case unix.S_IFDIR:
			buf := make([]byte, 8)
			if n, err := unix.Lgetxattr(p, "user.overlay.opaque", buf); err == nil && string(buf[:n]) == "y" {
				line += " opaque"
			}
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func typeOf(st *unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFREG:
		return "file"
	case unix.S_IFLNK:
		return "link"
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			return "whiteout"
		}
		return "chardev"
	}
	return "other"
}

// has reports whether list holds a line starting with prefix.
func has(list []string, prefix string) bool {
	for _, l := range list {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// upperDir opens directory rel of the sandbox's upper layer as the host
// sees it (owners in host ids), for a test to plant entries in.
func upperDir(t *testing.T, s *linuxSandbox, rel string) int {
	t.Helper()
	fd, err := fstree.OpenBeneath(int(s.scratch.Fd()), filepath.Join(scratchUpper, rel), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		t.Fatalf("upper %s: %v", rel, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestExportDiffFormat: a diff is in the layer format of sandbox's docs.
// The first export holds everything the sandbox wrote, owned by the ids the
// sandbox sees, sparse files sparse, an overlay whiteout as a 0/0 device
// owned by 0:0. The second, relative to the first, holds only what
// changed: a deleted file or directory is a whiteout (one for a directory
// and its contents), a re-created directory is opaque, unchanged files are
// left out.
func TestExportDiffFormat(t *testing.T) {
	s := diffSandbox(t)
	sh(t, s, `cd /workspace && mkdir -p d/e keep && echo one > a && echo two > b && echo deep > d/e/f && echo same > same &&
		echo x > keep/x && ln -s /etc/passwd link && chmod 640 b && head -c 8192 /dev/urandom > sparse && truncate -s 1G sparse`)
	// A whiteout, as overlayfs makes for a lower entry the sandbox deleted.
	if err := unix.Mknodat(upperDir(t, s, "workspace"), "gone", unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	dst1, st1 := export(t, s, sandbox.DiffOptions{})
	got := entries(t, dst1)
	for _, want := range []string{
		"workspace dir 0755 1000:1000",
		"workspace/a file 0644 1000:1000 4",
		"workspace/b file 0640 1000:1000 4",
		"workspace/d/e/f file 0644 1000:1000 5",
		"workspace/gone whiteout 0000 0:0",
		"workspace/keep/x file 0644 1000:1000 2",
		"workspace/link link 0777 1000:1000 -> /etc/passwd",
		"workspace/same file 0644 1000:1000 5",
		"workspace/sparse file 0644 1000:1000 1073741824",
	} {
		if !has(got, want) {
			t.Errorf("first export lacks %q:\n%s", want, strings.Join(got, "\n"))
		}
	}
	if st1.Whiteouts != 1 || st1.Bytes < 1<<30 || st1.DiskBytes > 1<<20 || st1.Entries != len(got) {
		t.Errorf("first export stats: %+v (%d entries listed)", st1, len(got))
	}
	var sp unix.Stat_t
	if err := unix.Stat(filepath.Join(dst1, "workspace/sparse"), &sp); err != nil || sp.Blocks*512 > 1<<20 {
		t.Errorf("the sparse file allocates %d bytes in the diff (%v)", sp.Blocks*512, err)
	}

	sh(t, s, `cd /workspace && echo changed > a && rm b && rm -r d && rm -r keep && mkdir keep && echo y > keep/y && echo new > c`)
	dst2, st2 := export(t, s, sandbox.DiffOptions{Since: st1.Mark})
	got = entries(t, dst2)
	for _, want := range []string{
		"workspace/a file 0644 1000:1000 8",
		"workspace/b whiteout 0000 0:0",
		"workspace/c file 0644 1000:1000 4",
		"workspace/d whiteout 0000 0:0",
		"workspace/keep dir 0755 1000:1000 opaque",
		"workspace/keep/y file 0644 1000:1000 2",
	} {
		if !has(got, want) {
			t.Errorf("second export lacks %q:\n%s", want, strings.Join(got, "\n"))
		}
	}
	for _, unwanted := range []string{"workspace/same", "workspace/link", "workspace/sparse", "workspace/gone", "workspace/d/", "workspace/keep/x", "workspace dir 0755 1000:1000 opaque"} {
		if has(got, unwanted) {
			t.Errorf("second export holds %q, unchanged or covered:\n%s", unwanted, strings.Join(got, "\n"))
		}
	}
	if st2.Whiteouts != 2 || st2.Entries != len(got) || st2.Mark == st1.Mark || st2.Digest == st1.Digest {
		t.Errorf("second export stats: %+v (first %+v)", st2, st1)
	}

	// A directory opaque in the upper layer itself (as overlayfs marks one
	// re-created over a lower directory) that is the same directory as at
	// the last export: the next diff must not carry the marker, or it
	// would hide keep/y of the diff below it.
	keep := fmt.Sprintf("/proc/self/fd/%d/%s/workspace/keep", s.scratch.Fd(), scratchUpper)
	if err := unix.Lsetxattr(keep, "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	sh(t, s, `echo z > /workspace/keep/z`)
	dst3, _ := export(t, s, sandbox.DiffOptions{Since: st2.Mark})
	got = entries(t, dst3)
	if !has(got, "workspace/keep dir 0755 1000:1000") || has(got, "workspace/keep dir 0755 1000:1000 opaque") || has(got, "workspace/keep/y") || !has(got, "workspace/keep/z") {
		t.Errorf("third export:\n%s", strings.Join(got, "\n"))
	}
}

// TestExportDiffMarks: a discarded export can be taken again from the
// same base (and is the same diff); a mark the sandbox no longer keeps,
// or never gave, is ErrDiffBase; a failed export moves nothing.
func TestExportDiffMarks(t *testing.T) {
	s := diffSandbox(t)
	sh(t, s, `echo one > /workspace/a`)
	_, st1 := export(t, s, sandbox.DiffOptions{})
	sh(t, s, `echo two > /workspace/b`)
	_, st2 := export(t, s, sandbox.DiffOptions{Since: st1.Mark}) // discarded
	dst3, st3 := export(t, s, sandbox.DiffOptions{Since: st1.Mark})
	if st3.Digest != st2.Digest || st3.Mark == st2.Mark {
		t.Fatalf("the same diff taken again: %+v, then %+v", st2, st3)
	}
	if got := entries(t, dst3); has(got, "workspace/a ") || !has(got, "workspace/b ") {
		t.Fatalf("diff since the first export:\n%s", strings.Join(got, "\n"))
	}
	for _, since := range []uint64{st2.Mark, 12345} {
		if _, err := s.ExportDiff(context.Background(), t.TempDir(), sandbox.DiffOptions{Since: since}); !errors.Is(err, sandbox.ErrDiffBase) {
			t.Fatalf("since %d: %v, want ErrDiffBase", since, err)
		}
	}
	// A refused export (a limit) moves no mark.
	_, err := s.ExportDiff(context.Background(), t.TempDir(), sandbox.DiffOptions{Since: st3.Mark, Limits: sandbox.DiffLimits{MaxEntries: 1}})
	if !errors.Is(err, sandbox.ErrDiffLimit) || errors.Is(err, sandbox.ErrDiffDiskLimit) || !errors.Is(err, fstree.ErrLimit) {
		t.Fatalf("over MaxEntries: %v", err)
	}
	export(t, s, sandbox.DiffOptions{Since: st3.Mark})
}

// TestExportDiffDiskLimit: MaxDiskBytes is enforced while writing, with
// the contract's sentinel and fstree's.
func TestExportDiffDiskLimit(t *testing.T) {
	s := diffSandbox(t)
	sh(t, s, `head -c 1048576 /dev/urandom > /workspace/big`)
	dst := t.TempDir()
	_, err := s.ExportDiff(context.Background(), dst, sandbox.DiffOptions{Limits: sandbox.DiffLimits{MaxDiskBytes: 64 << 10}})
	if !errors.Is(err, sandbox.ErrDiffDiskLimit) || !errors.Is(err, sandbox.ErrDiffLimit) || !errors.Is(err, fstree.ErrDiskLimit) {
		t.Fatalf("1 MiB under a 64 KiB disk limit: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dst, "workspace/big")); err == nil {
		if sys := st.Sys().(*unix.Stat_t); sys.Blocks*512 > 64<<10 {
			t.Fatalf("the refused file allocates %d bytes in dst", sys.Blocks*512)
		}
	}
	if got := sh(t, s, "echo running"); got != "running\n" {
		t.Fatalf("sandbox after a refused export: %q", got)
	}
}

// TestExportDiffHostileUpper: what the host finds in a sandbox's upper
// layer is untrusted. Device nodes, fifos and sockets are left out,
// setuid/setgid bits and file capabilities dropped; an owner outside the
// sandbox's id range and a symlink swapped in for a file or a directory
// while it is being copied refuse the export, nothing of what the link
// points to is read, and the sandbox runs again afterwards.
func TestExportDiffHostileUpper(t *testing.T) {
	s := diffSandbox(t)
	sh(t, s, `cd /workspace && echo v > victim && mkdir dir && echo in > dir/f && echo s > suid`)
	ws := upperDir(t, s, "workspace")
	base := int(s.slot.hostBase())
	for _, n := range []struct {
		name string
		mode uint32
		dev  int
	}{{"null", unix.S_IFCHR | 0o666, int(unix.Mkdev(1, 3))}, {"disk", unix.S_IFBLK | 0o666, int(unix.Mkdev(8, 0))}, {"fifo", unix.S_IFIFO | 0o644, 0}, {"sock", unix.S_IFSOCK | 0o644, 0}} {
		if err := unix.Mknodat(ws, n.name, n.mode, n.dev); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Openat(ws, "suid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fchmod(fd, 0o6755); err != nil {
		t.Fatal(err)
	}
	capability := []byte{1, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if err := unix.Fsetxattr(fd, "security.capability", capability, 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)

	dst, st := export(t, s, sandbox.DiffOptions{})
	got := entries(t, dst)
	for _, name := range []string{"null", "disk", "fifo", "sock"} {
		if has(got, "workspace/"+name+" ") {
			t.Errorf("%s was exported:\n%s", name, strings.Join(got, "\n"))
		}
	}
	if !has(got, "workspace/suid file 0755 1000:1000") || st.Skipped != 4 || st.StrippedSetid != 1 {
		t.Errorf("stats %+v:\n%s", st, strings.Join(got, "\n"))
	}
	if _, err := unix.Lgetxattr(filepath.Join(dst, "workspace/suid"), "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("file capability exported: %v", err)
	}

	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := func(name string, opts sandbox.DiffOptions, want func(error) bool) {
		t.Helper()
		dst := t.TempDir()
		_, err := s.ExportDiff(context.Background(), dst, opts)
		if err == nil || !want(err) {
			t.Fatalf("%s: %v", name, err)
		}
		if st, err := s.cg.mgr.GetFreezerState(); err != nil || st != cgroups.Thawed {
			t.Fatalf("%s: the sandbox is left %s (%v)", name, st, err)
		}
		_ = filepath.Walk(dst, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), "host secret") {
					t.Errorf("%s: %s holds the host's secret", name, p)
				}
			}
			return nil
		})
		sh(t, s, "true")
	}
	// A symlink swapped in while the sandbox is paused, between the
	// entry's lstat and its open.
	for _, c := range []struct{ rel, target string }{{"workspace/victim", secret}, {"workspace/dir", secretDir}} {
		var frozen cgroups.FreezerState
		s.diff.onEntry = func(rel string) {
			if rel != c.rel {
				return
			}
			frozen, _ = s.cg.mgr.GetFreezerState()
			name := filepath.Base(c.rel)
			if err := unix.Renameat(ws, name, ws, name+".old"); err != nil {
				t.Error(err)
			}
			if err := unix.Symlinkat(c.target, ws, name); err != nil {
				t.Error(err)
			}
			if err := unix.Fchownat(ws, name, base+1000, base+1000, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				t.Error(err)
			}
		}
		refused("swap "+c.rel, sandbox.DiffOptions{}, func(err error) bool {
			return errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) // O_NOFOLLOW, O_DIRECTORY
		})
		s.diff.onEntry = nil
		if frozen != cgroups.Frozen {
			t.Errorf("the sandbox was %q during the copy", frozen)
		}
		// The link itself is exported as a link, never followed.
		dst, _ := export(t, s, sandbox.DiffOptions{})
		if got := entries(t, dst); !has(got, c.rel+" link 0777 1000:1000 -> "+c.target) {
			t.Errorf("after the swap, %s is not exported as a link:\n%s", c.rel, strings.Join(got, "\n"))
		}
	}
	if err := unix.Fchownat(ws, "victim.old", base+70000, base+70000, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	refused("foreign owner", sandbox.DiffOptions{}, func(err error) bool {
		return strings.Contains(err.Error(), "outside the sandbox's id range")
	})
}

// TestExportDiffClosed: a shut-down sandbox exports nothing.
func TestExportDiffClosed(t *testing.T) {
	s := diffSandbox(t)
	_ = s.Shutdown(context.Background())
	if _, err := s.ExportDiff(context.Background(), t.TempDir(), sandbox.DiffOptions{}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("export after shutdown: %v", err)
	}
}
