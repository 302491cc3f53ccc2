// Package treetest holds the test helpers of fstree and fstree/oci: test
// archives, a Confined destination that proves nothing was written beside
// it, and tree listings. It is linked by tests only.
package treetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RequireRoot skips a test that needs root when not root, except under CI
// (CI=true), where it fails: CI runs as root and must run every test.
func RequireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root, and CI=true runs must run it")
	}
	t.Skip("skipping: needs root (chown, mknod, trusted xattrs)")
}

// testTime is the mtime of the test archives' entries.
var testTime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// Ent is one entry of a test archive.
type Ent struct {
	Hdr  tar.Header
	Body []byte
}

// File is a regular file entry.
func File(name, body string, mode int64) Ent {
	return Ent{Hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: testTime}, Body: []byte(body)}
}

// Dir is a directory entry.
func Dir(name string, mode int64) Ent {
	return Ent{Hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: testTime}}
}

// Symlink is a symbolic link entry.
func Symlink(name, target string) Ent {
	return Ent{Hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: testTime}}
}

// Link is a hard link entry.
func Link(name, target string) Ent {
	return Ent{Hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644, ModTime: testTime}}
}

// Dev is a device (or fifo) entry of type typ.
func Dev(name string, typ byte, major, minor int64) Ent {
	return Ent{Hdr: tar.Header{Typeflag: typ, Name: name, Mode: 0o600, Devmajor: major, Devminor: minor, ModTime: testTime}}
}

// Tar writes the entries as a tar archive (PAX where needed).
func Tar(t testing.TB, ents ...Ent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		h := e.Hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar header %q: %v", h.Name, err)
		}
		if len(e.Body) > 0 {
			if _, err := tw.Write(e.Body); err != nil {
				t.Fatalf("tar body %q: %v", h.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Gzip compresses b.
func Gzip(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// RandName is a name no test run used before, for host paths that must not
// appear.
func RandName(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Confined creates, in a fresh temporary parent, the destination directory
// dst and a sentinel file next to it. The returned check fails the test if
// the parent holds anything but dst and the sentinel, or if the sentinel
// changed: nothing may be written outside dst.
func Confined(t *testing.T) (dst, parent string, check func()) {
	t.Helper()
	parent = t.TempDir()
	dst = filepath.Join(parent, "dst")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	sentinel := filepath.Join(parent, "sentinel")
	if err := os.WriteFile(sentinel, []byte("untouched\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var before unix.Stat_t
	if err := unix.Lstat(sentinel, &before); err != nil {
		t.Fatal(err)
	}
	check = func() {
		t.Helper()
		names, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range names {
			got = append(got, n.Name())
		}
		sort.Strings(got)
		if len(got) != 2 || got[0] != "dst" || got[1] != "sentinel" {
			t.Errorf("outside dst: parent holds %q, want only dst and sentinel", got)
		}
		var after unix.Stat_t
		if err := unix.Lstat(sentinel, &after); err != nil {
			t.Fatalf("sentinel: %v", err)
		}
		b, _ := os.ReadFile(sentinel)
		if string(b) != "untouched\n" || after.Mode != before.Mode || after.Uid != before.Uid ||
			after.Nlink != before.Nlink || after.Mtim != before.Mtim || after.Ino != before.Ino {
			t.Errorf("sentinel next to dst changed: %q mode %o uid %d nlink %d", b, after.Mode, after.Uid, after.Nlink)
		}
	}
	return dst, parent, check
}

// Lstat returns the Lstat of p, failing the test if it does not exist.
func Lstat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("Lstat %s: %v", p, err)
	}
	return st
}

// Absent fails the test if p exists.
func Absent(t *testing.T, p string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err == nil {
		t.Errorf("%s exists; it must not", p)
	}
}

// ReadFile returns the content of p, failing the test on error.
func ReadFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TreeList lists a tree as "path type" lines, for comparing whole trees.
func TreeList(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		kind := "file"
		switch {
		case fi.IsDir():
			kind = "dir"
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			kind = "-> " + target
		case fi.Mode()&os.ModeCharDevice != 0:
			kind = "char"
		}
		if kind == "file" {
			b, _ := os.ReadFile(p)
			kind = "file " + string(b)
		}
		out = append(out, rel+" "+kind)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
