package fstree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// shiftDown is a MapID that maps host ids 1<<20+n to n, as a snapshot of a
// sandbox's upper directory would.
func shiftDown(uid, gid uint32) (uint32, uint32, error) {
	if uid < 1<<20 || gid < 1<<20 {
		return 0, 0, fmt.Errorf("owner %d:%d is not the sandbox's", uid, gid)
	}
	return uid - 1<<20, gid - 1<<20, nil
}

// mkSource builds a source tree with every kind of entry, owned by shifted
// ids, and returns it.
func mkSource(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "d/sub"), 0o755))
	must(os.WriteFile(filepath.Join(src, "d/file"), []byte("hello"), 0o640))
	must(os.WriteFile(filepath.Join(src, "d/sub/deep"), []byte("deep"), 0o600))
	must(os.WriteFile(filepath.Join(src, "setuid"), []byte("#!/bin/sh\n"), 0o644))
	must(os.WriteFile(filepath.Join(src, "skip.me"), []byte("filtered"), 0o644))
	must(os.Symlink("/etc", filepath.Join(src, "etc-link")))
	must(os.Symlink("d/file", filepath.Join(src, "rel-link")))
	must(os.Link(filepath.Join(src, "d/file"), filepath.Join(src, "hardlink")))
	must(os.Link(filepath.Join(src, "d/file"), filepath.Join(src, "d/sub/hardlink2")))
	must(unix.Mkfifo(filepath.Join(src, "fifo"), 0o644))
	must(unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(os.Mkdir(filepath.Join(src, "ro"), 0o755))
	must(os.WriteFile(filepath.Join(src, "ro/f"), []byte("ro"), 0o444))
	must(os.Chmod(filepath.Join(src, "ro"), 0o555))
	must(os.Mkdir(filepath.Join(src, "sticky"), 0o755))
	must(unix.Chmod(filepath.Join(src, "sticky"), 0o1777))
	// Owners shifted up, mtimes in the past, children before parents.
	when := time.Date(2010, 1, 2, 3, 4, 5, 600, time.UTC)
	var paths []string
	filepath.Walk(src, func(p string, _ os.FileInfo, _ error) error { paths = append(paths, p); return nil })
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	for i, p := range paths {
		must(os.Lchown(p, 1<<20+1000+i, 1<<20+1000))
		ts := []unix.Timespec{unix.NsecToTimespec(when.UnixNano()), unix.NsecToTimespec(when.Add(time.Duration(i) * time.Hour).UnixNano())}
		must(unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	must(unix.Chmod(filepath.Join(src, "setuid"), 0o6755)) // after chown, which clears it
	return src
}

// TestCopyDir: every kind of entry, with its metadata, owners through
// MapID; symlinks copied, never followed; hardlinks kept as one group;
// Filter and Seen; the digest is TreeDigest's.
func TestCopyDir(t *testing.T) {
	requireRoot(t)
	src := mkSource(t)
	dst, _, check := confined(t)
	var seen []string
	st, err := CopyDir(context.Background(), src, dst, Options{
		MapID:  shiftDown,
		Filter: func(rel string, _ *unix.Stat_t) bool { return rel != "skip.me" },
		Seen:   func(rel string, _ *unix.Stat_t) { seen = append(seen, rel) },
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(seen)
	want := "d d/file d/sub d/sub/deep d/sub/hardlink2 etc-link fifo hardlink null rel-link ro ro/f setuid skip.me sticky"
	if got := strings.Join(seen, " "); got != want {
		t.Errorf("Seen:\n got %s\nwant %s", got, want)
	}
	absent(t, filepath.Join(dst, "skip.me"))
	absent(t, filepath.Join(dst, "fifo"))
	absent(t, filepath.Join(dst, "null"))
	if st.SkippedCount != 2 || strings.Join(st.Skipped, ",") != "fifo,null" {
		t.Errorf("skipped %q", st.Skipped)
	}
	if st.Files != 4 || st.Hardlinks != 2 || st.Symlinks != 2 || st.Dirs != 4 || st.Entries != 12 || st.StrippedSetid != 1 {
		t.Errorf("stats %+v", st)
	}
	if st.Bytes != int64(len("hello")+len("deep")+len("#!/bin/sh\n")+len("ro")) {
		t.Errorf("Bytes = %d", st.Bytes)
	}

	// Every entry: same type, mode (setuid stripped), shifted owner, mtime
	// to the nanosecond.
	err = filepath.Walk(src, func(p string, _ os.FileInfo, err error) error {
		rel, _ := filepath.Rel(src, p)
		if err != nil || rel == "skip.me" || rel == "fifo" || rel == "null" {
			return err
		}
		s, d := lstat(t, p), lstat(t, filepath.Join(dst, rel))
		wantMode := s.Mode
		if rel == "setuid" {
			wantMode = unix.S_IFREG | 0o755
		}
		if d.Mode != wantMode || d.Uid != s.Uid-1<<20 || d.Gid != s.Gid-1<<20 || d.Mtim != s.Mtim || d.Size != s.Size && s.Mode&unix.S_IFMT != unix.S_IFDIR {
			t.Errorf("%q: mode %o uid %d gid %d mtime %v size %d; source %o %d %d %v %d",
				rel, d.Mode, d.Uid, d.Gid, d.Mtim, d.Size, s.Mode, s.Uid, s.Gid, s.Mtim, s.Size)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if target, _ := os.Readlink(filepath.Join(dst, "etc-link")); target != "/etc" {
		t.Errorf("etc-link -> %q", target)
	}
	if fi, _ := os.Lstat(filepath.Join(dst, "etc-link")); fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("etc-link was followed")
	}
	a, b, c := lstat(t, filepath.Join(dst, "d/file")), lstat(t, filepath.Join(dst, "hardlink")), lstat(t, filepath.Join(dst, "d/sub/hardlink2"))
	if a.Ino != b.Ino || a.Ino != c.Ino || a.Nlink != 3 || a.Ino == lstat(t, filepath.Join(src, "d/file")).Ino {
		t.Errorf("hardlinks: inodes %d %d %d nlink %d", a.Ino, b.Ino, c.Ino, a.Nlink)
	}
	if d, err := TreeDigest(dst); err != nil || d != st.Digest {
		t.Errorf("TreeDigest %s (%v), Stats.Digest %s", d, err, st.Digest)
	}
	check()
}

// TestCopyDirDigest: identical trees give identical digests; a changed
// byte, mode, owner or mtime changes it.
func TestCopyDirDigest(t *testing.T) {
	requireRoot(t)
	src := mkSource(t)
	copyDigest := func() string {
		t.Helper()
		dst, _, check := confined(t)
		st, err := CopyDir(context.Background(), src, dst, Options{MapID: shiftDown})
		if err != nil {
			t.Fatal(err)
		}
		check()
		return st.Digest
	}
	base := copyDigest()
	if again := copyDigest(); again != base {
		t.Fatalf("identical copies, digests %s and %s", base, again)
	}
	// The same tree written by ExtractTar and by CopyDir: the digest depends
	// on the tree only, not on how it was written.
	tarDst, _, _ := confined(t)
	xst, err := extract(tarDst, mkTar(t, dirEnt(".", 0o750), dirEnt("d", 0o700), fileEnt("d/f", "x", 0o4755),
		linkEnt("d/g", "d/f"), symlinkEnt("l", "/etc"), devEnt("w", 'c', 0, 0)), Options{Overlay: true})
	if err != nil {
		t.Fatal(err)
	}
	copyDst, _, _ := confined(t)
	cst, err := CopyDir(context.Background(), tarDst, copyDst, Options{Overlay: true})
	if err != nil {
		t.Fatal(err)
	}
	if xst.Digest != cst.Digest {
		t.Errorf("same tree, ExtractTar digest %s, CopyDir digest %s", xst.Digest, cst.Digest)
	}
	seen := map[string]bool{}
	for name, change := range map[string]func(){
		"content": func() { os.WriteFile(filepath.Join(src, "d/sub/deep"), []byte("deeP"), 0o600) },
		"mode":    func() { os.Chmod(filepath.Join(src, "d/sub/deep"), 0o640) },
		"owner":   func() { os.Lchown(filepath.Join(src, "rel-link"), 1<<20+9, 1<<20+9) }, // not target's owner: map order varies
		"mtime": func() {
			os.Chtimes(filepath.Join(src, "d/sub"), time.Now(), time.Unix(12345, 0))
		},
		"target": func() {
			os.Remove(filepath.Join(src, "rel-link"))
			os.Symlink("d/filf", filepath.Join(src, "rel-link"))
			os.Lchown(filepath.Join(src, "rel-link"), 1<<20+7, 1<<20+7)
		},
		"unlink": func() { os.Remove(filepath.Join(src, "d/sub/hardlink2")) },
	} {
		before := copyDigest()
		change()
		after := copyDigest()
		if after == before || seen[after] {
			t.Errorf("%s: the digest did not change", name)
		}
		seen[after] = true
	}
}

// TestCopyDirOverlay: an upper directory's whiteouts and opaque directories
// are kept in Overlay mode only; metacopy uppers are refused.
func TestCopyDirOverlay(t *testing.T) {
	requireRoot(t)
	src := filepath.Join(t.TempDir(), "upper")
	os.MkdirAll(filepath.Join(src, "opaque"), 0o755)
	os.WriteFile(filepath.Join(src, "opaque/new"), []byte("n"), 0o644)
	if err := unix.Mknod(filepath.Join(src, "deleted"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(src, "opaque"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatalf("setxattr trusted.overlay.opaque: %v", err)
	}
	unix.Setxattr(filepath.Join(src, "opaque"), "trusted.overlay.origin", []byte{0, 1, 2}, 0)
	os.WriteFile(filepath.Join(src, "caps"), []byte("x"), 0o755)
	unix.Setxattr(filepath.Join(src, "caps"), "user.note", []byte("dropped"), 0)

	dst, _, check := confined(t)
	st, err := CopyDir(context.Background(), src, dst, Options{Overlay: true})
	if err != nil {
		t.Fatal(err)
	}
	if w := lstat(t, filepath.Join(dst, "deleted")); w.Mode&unix.S_IFMT != unix.S_IFCHR || w.Rdev != 0 {
		t.Errorf("whiteout: mode %o rdev %d", w.Mode, w.Rdev)
	}
	buf := make([]byte, 64)
	if n, err := unix.Lgetxattr(filepath.Join(dst, "opaque"), "user.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("opaque marker: %q %v", buf[:max(n, 0)], err)
	}
	for p, attr := range map[string]string{"opaque": "trusted.overlay.origin", "caps": "user.note"} {
		if _, err := unix.Lgetxattr(filepath.Join(dst, p), attr, buf); err == nil {
			t.Errorf("%s: xattr %s was copied", p, attr)
		}
	}
	if d, _ := TreeDigest(dst); d != st.Digest {
		t.Errorf("TreeDigest %s, Stats.Digest %s", d, st.Digest)
	}
	check()

	// Whiteouts are written 0:0 without asking MapID: overlayfs creates them
	// with the mounter's credentials, which no sandbox mapping covers.
	if err := os.Lchown(filepath.Join(src, "deleted"), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	dst, _, check = confined(t)
	refuse4242 := func(uid, gid uint32) (uint32, uint32, error) {
		if uid == 4242 {
			return 0, 0, errors.New("not the sandbox's")
		}
		return uid, gid, nil
	}
	if _, err := CopyDir(context.Background(), src, dst, Options{Overlay: true, MapID: refuse4242}); err != nil {
		t.Fatal(err)
	}
	if w := lstat(t, filepath.Join(dst, "deleted")); w.Uid != 0 || w.Gid != 0 || w.Mode != unix.S_IFCHR {
		t.Errorf("whiteout: owner %d:%d mode %o", w.Uid, w.Gid, w.Mode)
	}
	check()

	dst, _, check = confined(t)
	st2, err := CopyDir(context.Background(), src, dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	absent(t, filepath.Join(dst, "deleted"))
	if _, err := unix.Lgetxattr(filepath.Join(dst, "opaque"), "user.overlay.opaque", buf); err == nil {
		t.Errorf("opaque marker written without Overlay")
	}
	if st2.SkippedCount != 1 || st2.Digest == st.Digest {
		t.Errorf("without Overlay: skipped %q, digest %s", st2.Skipped, st2.Digest)
	}
	check()

	if err := unix.Setxattr(filepath.Join(src, "opaque/new"), "trusted.overlay.metacopy", nil, 0); err != nil {
		t.Fatal(err)
	}
	dst, _, check = confined(t)
	if _, err := CopyDir(context.Background(), src, dst, Options{Overlay: true}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("metacopy upper: got %v, want ErrUnsupported", err)
	}
	check()
}

// TestCopyDirMountPoint: a mount beneath the source is entered as an
// ordinary directory.
func TestCopyDirMountPoint(t *testing.T) {
	requireRoot(t)
	src := filepath.Join(t.TempDir(), "src")
	mnt := filepath.Join(src, "mnt")
	os.MkdirAll(mnt, 0o755)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs: %v", err)
		}
		t.Skipf("skipping: cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	os.WriteFile(filepath.Join(mnt, "on-tmpfs"), []byte("t"), 0o644)
	dst, _, check := confined(t)
	if _, err := CopyDir(context.Background(), src, dst, Options{}); err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(dst, "mnt/on-tmpfs")) != "t" {
		t.Error("the mount's content was not copied")
	}
	check()
}

// TestCopyDirRefusals: limits, a symlink as the source, cancellation, a
// MapID error.
func TestCopyDirRefusals(t *testing.T) {
	requireRoot(t)
	src := filepath.Join(t.TempDir(), "src")
	os.MkdirAll(filepath.Join(src, strings.Repeat("d/", 12)), 0o755)
	f, _ := os.Create(filepath.Join(src, "sparse"))
	f.Truncate(1 << 40) // a hostile upper can claim a huge size for free
	f.Close()
	ctx := context.Background()
	cases := []struct {
		name string
		opt  Options
		want error
		text string
	}{
		{"sparse-bytes", Options{}, ErrLimit, "MaxBytes"},
		{"depth", Options{Limits: Limits{MaxDepth: 5}}, ErrLimit, "MaxDepth"},
		{"entries", Options{Limits: Limits{MaxEntries: 5}}, ErrLimit, "MaxEntries"},
		{"mapid", Options{MapID: shiftDown}, nil, "is not the sandbox's"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst, _, check := confined(t)
			start := time.Now()
			_, err := CopyDir(ctx, src, dst, c.opt)
			if err == nil || c.want != nil && !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("got %v, want %v (%s)", err, c.want, c.text)
			}
			if time.Since(start) > 2*time.Second {
				t.Errorf("took %v", time.Since(start))
			}
			check()
		})
	}
	t.Run("symlink-source", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "link")
		os.Symlink(src, link)
		dst, _, check := confined(t)
		if _, err := CopyDir(ctx, link, dst, Options{}); err == nil {
			t.Fatal("a symlink source was followed")
		}
		check()
	})
	t.Run("canceled", func(t *testing.T) {
		dst, _, check := confined(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := CopyDir(cctx, src, dst, Options{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		check()
	})
}

// TestCopyDirRealOverlay: the upper directory of a real overlayfs mount,
// after deletions and a re-created directory, copies into a layer that,
// stacked on the same lower (mounted with userxattr, the namespace the
// layer's opaque markers use), shows what the original mount showed.
func TestCopyDirRealOverlay(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	dir := func(name string) string {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lower, upper, work, merged := dir("lower"), dir("upper"), dir("work"), dir("merged")
	for p, body := range map[string]string{"a/x": "x", "b/y": "y", "c": "c"} {
		os.MkdirAll(filepath.Join(lower, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(lower, p), []byte(body), 0o644)
	}
	mount := func(target, opts string) bool {
		t.Helper()
		if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("mount overlay %s: %v", opts, err)
			}
			t.Skipf("skipping: cannot mount overlayfs: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
		return true
	}
	mount(merged, "lowerdir="+lower+",upperdir="+upper+",workdir="+work)
	os.Remove(filepath.Join(merged, "c"))
	os.RemoveAll(filepath.Join(merged, "b"))
	os.Mkdir(filepath.Join(merged, "b"), 0o755)
	os.WriteFile(filepath.Join(merged, "b/new"), []byte("n"), 0o644)
	os.WriteFile(filepath.Join(merged, "a/z"), []byte("z"), 0o644)
	want := treeList(t, merged)
	if err := unix.Unmount(merged, 0); err != nil {
		t.Fatal(err)
	}

	dst, _, check := confined(t)
	if _, err := CopyDir(context.Background(), upper, dst, Options{Overlay: true}); err != nil {
		t.Fatal(err)
	}
	check()
	if w := lstat(t, filepath.Join(dst, "c")); w.Mode&unix.S_IFMT != unix.S_IFCHR || w.Rdev != 0 {
		t.Errorf("c is not a whiteout in the copy")
	}
	view := dir("view")
	mount(view, "userxattr,lowerdir="+dst+":"+lower)
	if got := treeList(t, view); !reflect.DeepEqual(got, want) {
		t.Errorf("the copied layer over the lower shows\n%q\nthe original mount showed\n%q", got, want)
	}
	if strings.Contains(strings.Join(want, "\n"), "b/y") || !strings.Contains(strings.Join(want, "\n"), "b/new") {
		t.Errorf("the original mount shows %q", want)
	}

	// Control: without Overlay the markers are lost and the deleted entries
	// come back.
	plain := dir("plain")
	if _, err := CopyDir(context.Background(), upper, plain, Options{}); err != nil {
		t.Fatal(err)
	}
	view2 := dir("view2")
	mount(view2, "userxattr,lowerdir="+plain+":"+lower)
	if got := treeList(t, view2); reflect.DeepEqual(got, want) {
		t.Errorf("control: without Overlay the copy still shows %q", got)
	}
}
