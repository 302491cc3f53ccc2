package fstree

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// extract runs ExtractTar on b into dst.
func extract(dst string, b []byte, opt Options) (*Stats, error) {
	return ExtractTar(context.Background(), bytes.NewReader(b), dst, opt)
}

func TestCleanName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a/b", "a/b"},
		{"/etc/x", "etc/x"},
		{"./a/./b/", "a/b"},
		{"//a//b", "a/b"},
		{"a/../b", "b"},
		{"./", ""},
		{"/", ""},
	} {
		got, err := cleanName(c.in)
		if err != nil || got != c.want {
			t.Errorf("cleanName(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "..", "../escape", "a/../../escape", "/../x", "a\x00b"} {
		if got, err := cleanName(in); err == nil {
			t.Errorf("cleanName(%q) = %q, want an error", in, got)
		}
	}
}

// TestExtractTarNames: names that leave the root are refused, absolute
// names are neutralised, and nothing lands outside dst.
func TestExtractTarNames(t *testing.T) {
	requireRoot(t)
	for _, name := range []string{"../escape", "a/../../escape", "./../escape", "a/b/../../../escape"} {
		t.Run(name, func(t *testing.T) {
			dst, _, check := confined(t)
			_, err := extract(dst, mkTar(t, fileEnt("ok", "x", 0o644), fileEnt(name, "pwned", 0o644)), Options{})
			if !errors.Is(err, ErrHostile) || !strings.Contains(err.Error(), "hostile archive: entry") {
				t.Fatalf("got %v, want a hostile archive error", err)
			}
			check()
		})
	}
	t.Run("absolute", func(t *testing.T) {
		dst, _, check := confined(t)
		host := randName("fstree-abs-")
		st, err := extract(dst, mkTar(t, fileEnt("/etc/"+host, "inside", 0o644), fileEnt("/tmp/"+host, "inside", 0o644)), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(dst, "etc", host)); got != "inside" {
			t.Errorf("dst/etc/%s = %q", host, got)
		}
		absent(t, "/etc/"+host)
		absent(t, "/tmp/"+host)
		if st.Files != 2 || st.Dirs != 2 {
			t.Errorf("stats %+v, want 2 files and 2 implicit dirs", st)
		}
		check()
	})
	t.Run("NUL", func(t *testing.T) {
		// archive/tar refuses to write a NUL, so write a PAX path record by
		// hand; the same record without the NUL is the control.
		withPath := func(p string) []byte {
			rec := "path=" + p + "\n"
			rec = fmt.Sprintf("%d %s", len(rec)+3, rec)
			var b bytes.Buffer
			b.Write(rawHeader("pax", tar.TypeXHeader, len(rec)))
			b.WriteString(rec)
			b.Write(make([]byte, 512-len(rec)))
			b.Write(mkTar(t, fileEnt("plain", "x", 0o644)))
			return b.Bytes()
		}
		dst, _, check := confined(t)
		if _, err := extract(dst, withPath("ctl/ok"), Options{}); err != nil {
			t.Fatalf("control: %v", err)
		}
		if readFile(t, filepath.Join(dst, "ctl/ok")) != "x" {
			t.Fatal("control: the PAX path was not used")
		}
		os.RemoveAll(dst)
		os.Mkdir(dst, 0o755)
		if _, err := extract(dst, withPath("x\x00/../../escape"), Options{}); err == nil {
			t.Fatal("a NUL byte in a name was accepted")
		}
		check()
	})
	t.Run("empty", func(t *testing.T) {
		dst, _, check := confined(t)
		_, err := extract(dst, mkTar(t, ent{Hdr: tar.Header{Typeflag: tar.TypeReg, Name: "", Format: tar.FormatGNU}}), Options{})
		if !errors.Is(err, ErrHostile) {
			t.Fatalf("got %v, want ErrHostile", err)
		}
		check()
	})
}

// rawHeader encodes a ustar header by hand, for what archive/tar will not
// write.
func rawHeader(name string, typ byte, size int) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	copy(h[100:108], "0000644\x00")
	copy(h[108:116], "0000000\x00")
	copy(h[116:124], "0000000\x00")
	copy(h[124:136], fmt.Sprintf("%011o\x00", size))
	copy(h[136:148], "00000000000\x00")
	h[156] = typ
	copy(h[257:265], "ustar\x0000")
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

// TestExtractTarSymlinkParent: a symlink the archive wrote never redirects
// a later entry, whatever it points at.
func TestExtractTarSymlinkParent(t *testing.T) {
	requireRoot(t)
	host := randName("fstree-pwned-")
	for _, target := range []string{"/", "..", "../..", "PARENT", "/tmp"} {
		t.Run(target, func(t *testing.T) {
			dst, parent, check := confined(t)
			if target == "PARENT" {
				target = parent
			}
			for _, later := range []string{"link/" + host, "link/sub/" + host} {
				_, err := extract(dst, mkTar(t, symlinkEnt("link", target), fileEnt(later, "pwned", 0o644)), Options{})
				if !errors.Is(err, ErrHostile) || !strings.Contains(err.Error(), later) || !strings.Contains(err.Error(), "symlink") {
					t.Fatalf("%s then %s: got %v, want a hostile error naming the entry", target, later, err)
				}
				os.RemoveAll(dst)
				os.Mkdir(dst, 0o755)
			}
			absent(t, "/"+host)
			absent(t, "/tmp/"+host)
			absent(t, filepath.Join(parent, host))
			check()
		})
	}
	t.Run("dir-entry", func(t *testing.T) {
		dst, parent, check := confined(t)
		_, err := extract(dst, mkTar(t, symlinkEnt("link", parent), dirEnt("link/newdir", 0o755)), Options{})
		if !errors.Is(err, ErrHostile) {
			t.Fatalf("got %v, want ErrHostile", err)
		}
		check()
	})
}

// TestExtractTarHardlinks: hardlinks only to regular files beneath dst,
// never through a symlink.
func TestExtractTarHardlinks(t *testing.T) {
	requireRoot(t)
	passwd := lstat(t, "/etc/passwd")
	cases := []struct {
		name string
		ents func(parent string) []ent
	}{
		{"through-symlink", func(p string) []ent { return []ent{symlinkEnt("link", p), linkEnt("h", "link/sentinel")} }},
		{"through-symlink-dotdot", func(p string) []ent { return []ent{symlinkEnt("link", ".."), linkEnt("h", "link/sentinel")} }},
		{"new-name-through-symlink", func(p string) []ent {
			return []ent{fileEnt("f", "x", 0o644), symlinkEnt("link", p), linkEnt("link/h", "f")}
		}},
		{"outside", func(string) []ent { return []ent{linkEnt("h", "../sentinel")} }},
		{"etc-passwd", func(string) []ent { return []ent{linkEnt("h", "/etc/passwd")} }},
		{"to-symlink", func(string) []ent { return []ent{symlinkEnt("s", "/etc/passwd"), linkEnt("h", "s")} }},
		{"to-dir", func(string) []ent { return []ent{dirEnt("d", 0o755), linkEnt("h", "d")} }},
		{"to-root", func(string) []ent { return []ent{linkEnt("h", "./")} }},
		{"to-itself", func(string) []ent { return []ent{fileEnt("h", "x", 0o644), linkEnt("h", "h")} }},
		{"missing", func(string) []ent { return []ent{linkEnt("h", "nothing")} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst, parent, check := confined(t)
			_, err := extract(dst, mkTar(t, c.ents(parent)...), Options{})
			if !errors.Is(err, ErrHostile) {
				t.Fatalf("got %v, want ErrHostile", err)
			}
			check()
		})
	}
	if after := lstat(t, "/etc/passwd"); after.Nlink != passwd.Nlink {
		t.Errorf("/etc/passwd has %d links, had %d", after.Nlink, passwd.Nlink)
	}
	t.Run("valid", func(t *testing.T) {
		dst, _, check := confined(t)
		st, err := extract(dst, mkTar(t, fileEnt("/etc/passwd", "root:x:0:0::/:/bin/sh\n", 0o644), linkEnt("a/h", "/etc/passwd")), Options{})
		if err != nil {
			t.Fatal(err)
		}
		a, b := lstat(t, filepath.Join(dst, "etc/passwd")), lstat(t, filepath.Join(dst, "a/h"))
		if a.Ino != b.Ino || a.Nlink != 2 || st.Hardlinks != 1 {
			t.Errorf("hardlink not made: inodes %d %d, nlink %d, stats %+v", a.Ino, b.Ino, a.Nlink, st)
		}
		check()
	})
}

// TestExtractTarSpecialFiles: devices and fifos are skipped and listed,
// setuid/setgid bits stripped, the sticky bit kept, whiteouts kept in
// Overlay mode only.
func TestExtractTarSpecialFiles(t *testing.T) {
	requireRoot(t)
	ents := []ent{
		devEnt("dev/null", tar.TypeChar, 1, 3),
		devEnt("dev/sda", tar.TypeBlock, 8, 0),
		devEnt("dev/fifo", tar.TypeFifo, 0, 0),
		devEnt("wh", tar.TypeChar, 0, 0),
		fileEnt("bin/su", "suid", 0o4755),
		fileEnt("bin/wall", "sgid", 0o2755),
		fileEnt("bin/plain", "plain", 0o755),
		dirEnt("tmp", 0o1777),
	}
	dst, _, check := confined(t)
	st, err := extract(dst, mkTar(t, ents...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.SkippedCount != 4 || strings.Join(st.Skipped, ",") != "dev/null,dev/sda,dev/fifo,wh" {
		t.Errorf("skipped %d %q", st.SkippedCount, st.Skipped)
	}
	for _, p := range []string{"dev/null", "dev/sda", "dev/fifo", "wh"} {
		absent(t, filepath.Join(dst, p))
	}
	if st.StrippedSetid != 2 {
		t.Errorf("StrippedSetid = %d, want 2", st.StrippedSetid)
	}
	for p, want := range map[string]uint32{"bin/su": 0o755, "bin/wall": 0o755, "bin/plain": 0o755, "tmp": 0o1777} {
		if got := lstat(t, filepath.Join(dst, p)).Mode & 0o7777; got != want {
			t.Errorf("%s mode %o, want %o", p, got, want)
		}
	}
	check()

	dst, _, check = confined(t)
	st, err = extract(dst, mkTar(t, ents...), Options{Overlay: true})
	if err != nil {
		t.Fatal(err)
	}
	if w := lstat(t, filepath.Join(dst, "wh")); w.Mode&unix.S_IFMT != unix.S_IFCHR || w.Rdev != 0 {
		t.Errorf("Overlay: wh is not a 0/0 whiteout: mode %o rdev %d", w.Mode, w.Rdev)
	}
	if st.SkippedCount != 3 {
		t.Errorf("Overlay: skipped %q", st.Skipped)
	}
	check()
}

// TestExtractTarOpaquePAX: in Overlay mode a directory's opaque marker in a
// PAX xattr record becomes user.overlay.opaque.
func TestExtractTarOpaquePAX(t *testing.T) {
	requireRoot(t)
	d := dirEnt("o", 0o755)
	d.Hdr.PAXRecords = map[string]string{"SCHILY.xattr.trusted.overlay.opaque": "y"}
	for _, overlay := range []bool{false, true} {
		dst, _, check := confined(t)
		if _, err := extract(dst, mkTar(t, d, fileEnt("o/f", "x", 0o644)), Options{Overlay: overlay}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 8)
		n, err := unix.Lgetxattr(filepath.Join(dst, "o"), opaqueXattr, buf)
		got := err == nil && string(buf[:n]) == "y"
		if got != overlay {
			t.Errorf("Overlay=%v: opaque marker written: %v", overlay, got)
		}
		check()
	}
}

// TestExtractTarLimits: MaxBytes (decompression bomb, huge declared size),
// MaxEntries and MaxDepth fail fast, with the limit named.
func TestExtractTarLimits(t *testing.T) {
	requireRoot(t)
	t.Run("gzip-bomb", func(t *testing.T) {
		dst, _, check := confined(t)
		bomb := gz(t, mkTar(t, fileEnt("zeros", string(make([]byte, 64<<20)), 0o644)))
		start := time.Now()
		_, err := extract(dst, bomb, Options{Limits: Limits{MaxBytes: 8 << 20}})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MaxBytes") {
			t.Fatalf("got %v, want a MaxBytes error", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v to refuse", d)
		}
		absent(t, filepath.Join(dst, "zeros"))
		check()
	})
	t.Run("many-files-bomb", func(t *testing.T) {
		dst, _, check := confined(t)
		mib := string(make([]byte, 1<<20))
		var ents []ent
		for i := range 64 {
			ents = append(ents, fileEnt(fmt.Sprintf("f%02d", i), mib, 0o644))
		}
		_, err := extract(dst, gz(t, mkTar(t, ents...)), Options{Limits: Limits{MaxBytes: 8 << 20}})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MaxBytes") {
			t.Fatalf("got %v, want a MaxBytes error", err)
		}
		var used int64
		filepath.Walk(dst, func(_ string, fi os.FileInfo, _ error) error {
			if fi != nil && fi.Mode().IsRegular() {
				used += fi.Size()
			}
			return nil
		})
		if used > 8<<20 {
			t.Errorf("%d bytes written past MaxBytes", used)
		}
		check()
	})
	t.Run("huge-declared-size", func(t *testing.T) {
		dst, _, check := confined(t)
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "sparse", Size: 1 << 40, Mode: 0o644})
		tw.Write(make([]byte, 4096)) // the rest never comes
		tw.Flush()
		_, err := extract(dst, b.Bytes(), Options{})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MaxBytes") {
			t.Fatalf("got %v, want a MaxBytes error", err)
		}
		absent(t, filepath.Join(dst, "sparse"))
		check()
	})
	t.Run("entries", func(t *testing.T) {
		dst, _, check := confined(t)
		var ents []ent
		for i := range 200 {
			ents = append(ents, fileEnt(fmt.Sprintf("f%03d", i), "", 0o644))
		}
		_, err := extract(dst, mkTar(t, ents...), Options{Limits: Limits{MaxEntries: 100}})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MaxEntries") {
			t.Fatalf("got %v, want a MaxEntries error", err)
		}
		check()
	})
	t.Run("implicit-dirs-count", func(t *testing.T) {
		dst, _, check := confined(t)
		_, err := extract(dst, mkTar(t, fileEnt(strings.Repeat("d/", 50)+"f", "", 0o644)), Options{Limits: Limits{MaxEntries: 10}})
		if !errors.Is(err, ErrLimit) {
			t.Fatalf("got %v, want ErrLimit", err)
		}
		check()
	})
	t.Run("depth", func(t *testing.T) {
		dst, _, check := confined(t)
		deep := strings.Repeat("d/", 300) + "f"
		_, err := extract(dst, mkTar(t, fileEnt(deep, "x", 0o644)), Options{})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MaxDepth") {
			t.Fatalf("got %v, want a MaxDepth error", err)
		}
		_, err = extract(dst, mkTar(t, fileEnt(strings.Repeat("d/", 10)+"f", "x", 0o644)), Options{Limits: Limits{MaxDepth: 10}})
		if !errors.Is(err, ErrLimit) {
			t.Fatalf("depth 11 with MaxDepth 10: got %v", err)
		}
		check()
	})
}

// TestExtractTarTruncated: a tar or gzip stream cut short is an error
// saying so.
func TestExtractTarTruncated(t *testing.T) {
	requireRoot(t)
	full := mkTar(t, fileEnt("a", strings.Repeat("a", 5000), 0o644), fileEnt("b", strings.Repeat("b", 5000), 0o644))
	zipped := gz(t, full)
	for name, b := range map[string][]byte{
		"tar-in-content": full[:512+2000],
		"tar-in-header":  full[:512+5120+100],
		"gzip":           zipped[:len(zipped)/2],
		"gzip-trailer":   zipped[:len(zipped)-4],
	} {
		t.Run(name, func(t *testing.T) {
			dst, _, check := confined(t)
			_, err := extract(dst, b, Options{})
			if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "truncated") {
				t.Fatalf("got %v, want ErrTruncated", err)
			}
			check()
		})
	}
}

// TestExtractTarReplace: later entries replace earlier ones, but never a
// non-empty directory with a non-directory.
func TestExtractTarReplace(t *testing.T) {
	requireRoot(t)
	dst, _, check := confined(t)
	_, err := extract(dst, mkTar(t,
		fileEnt("a", "file", 0o644), dirEnt("a", 0o750), // file -> dir
		dirEnt("b", 0o755), symlinkEnt("b", "/etc"), // empty dir -> symlink
		fileEnt("c", "one", 0o644), fileEnt("c", "two", 0o600), // file -> file
		symlinkEnt("d", "x"), fileEnt("d", "real", 0o644), // symlink -> file, not written through
		dirEnt("e", 0o755), fileEnt("e/f", "x", 0o644), dirEnt("e", 0o700), // dir over dir: metadata only
	), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, filepath.Join(dst, "a")); st.Mode != unix.S_IFDIR|0o750 {
		t.Errorf("a: mode %o", st.Mode)
	}
	if target, _ := os.Readlink(filepath.Join(dst, "b")); target != "/etc" {
		t.Errorf("b -> %q", target)
	}
	if got := readFile(t, filepath.Join(dst, "c")); got != "two" || lstat(t, filepath.Join(dst, "c")).Mode&0o777 != 0o600 {
		t.Errorf("c = %q", got)
	}
	if st := lstat(t, filepath.Join(dst, "d")); st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("d is not a regular file")
	}
	absent(t, filepath.Join(dst, "x"))
	if got := readFile(t, filepath.Join(dst, "e/f")); got != "x" || lstat(t, filepath.Join(dst, "e")).Mode&0o777 != 0o700 {
		t.Errorf("e/f = %q, e mode %o", got, lstat(t, filepath.Join(dst, "e")).Mode)
	}
	check()

	dst, _, check = confined(t)
	_, err = extract(dst, mkTar(t, dirEnt("a", 0o755), fileEnt("a/f", "x", 0o644), fileEnt("a", "replaces", 0o644)), Options{})
	if !errors.Is(err, ErrHostile) || !strings.Contains(err.Error(), "non-empty directory") {
		t.Fatalf("non-empty dir replaced by a file: got %v", err)
	}
	check()
}

// TestExtractTarMetadata: owners (default mapping and MapID), modes of
// read-only directories applied after their contents, mtimes of files,
// symlinks and directories, the root entry.
func TestExtractTarMetadata(t *testing.T) {
	requireRoot(t)
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	owned := func(e ent, uid, gid int) ent { e.Hdr.Uid, e.Hdr.Gid = uid, gid; e.Hdr.ModTime = old; return e }
	ents := []ent{
		owned(dirEnt(".", 0o751), 0, 0),
		owned(dirEnt("ro", 0o555), 1000, 1000),
		owned(fileEnt("ro/f", "x", 0o444), 1000, 100),
		owned(symlinkEnt("ro/l", "f"), 1001, 1001),
		owned(fileEnt("big", "x", 0o644), 200000, 70000),
	}
	dst, _, check := confined(t)
	if _, err := extract(dst, mkTar(t, ents...), Options{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string][3]uint32{
		"":     {0, 0, unix.S_IFDIR | 0o751},
		"ro":   {1000, 1000, unix.S_IFDIR | 0o555},
		"ro/f": {1000, 100, unix.S_IFREG | 0o444},
		"ro/l": {1001, 1001, unix.S_IFLNK | 0o777},
		"big":  {65534, 65534, unix.S_IFREG | 0o644},
	} {
		st := lstat(t, filepath.Join(dst, p))
		if st.Uid != want[0] || st.Gid != want[1] || st.Mode != want[2] {
			t.Errorf("%q: %d:%d %o, want %d:%d %o", p, st.Uid, st.Gid, st.Mode, want[0], want[1], want[2])
		}
		if st.Mtim.Sec != old.Unix() {
			t.Errorf("%q: mtime %d, want %d", p, st.Mtim.Sec, old.Unix())
		}
	}
	check()

	// MapID shifts owners; its error refuses the whole operation.
	dst, _, check = confined(t)
	shift := func(uid, gid uint32) (uint32, uint32, error) {
		if uid >= 1<<16 {
			return 0, 0, fmt.Errorf("uid %d out of the sandbox's range", uid)
		}
		return uid + 1<<20, gid + 1<<20, nil
	}
	_, err := extract(dst, mkTar(t, ents[:4]...), Options{MapID: shift})
	if err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, filepath.Join(dst, "ro/f")); st.Uid != 1000+1<<20 || st.Gid != 100+1<<20 {
		t.Errorf("MapID: ro/f owned by %d:%d", st.Uid, st.Gid)
	}
	if st := lstat(t, dst); st.Uid != 1<<20 {
		t.Errorf("MapID: root owned by %d", st.Uid)
	}
	check()
	dst, _, check = confined(t)
	if _, err := extract(dst, mkTar(t, ents...), Options{MapID: shift}); err == nil || !strings.Contains(err.Error(), "out of the sandbox's range") {
		t.Fatalf("MapID error: got %v", err)
	}
	check()

	// Without a root entry the root gets 0755 and parents the archive does
	// not list too.
	dst, _, check = confined(t)
	os.Chmod(dst, 0o700)
	if _, err := extract(dst, mkTar(t, fileEnt("a/b/c", "x", 0o600)), Options{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "a", "a/b"} {
		if st := lstat(t, filepath.Join(dst, p)); st.Mode != unix.S_IFDIR|0o755 || st.Mtim.Sec != 0 {
			t.Errorf("implicit %q: mode %o mtime %d", p, st.Mode, st.Mtim.Sec)
		}
	}
	check()

	// The root can only be a directory.
	dst, _, check = confined(t)
	if _, err := extract(dst, mkTar(t, fileEnt(".", "", 0o644)), Options{}); !errors.Is(err, ErrHostile) {
		t.Fatalf("file at the root: got %v", err)
	}
	check()
}

// TestExtractTarFilterSeen: Filter leaves entries out (never directories),
// Seen sees every entry but the root.
func TestExtractTarFilterSeen(t *testing.T) {
	requireRoot(t)
	dst, _, check := confined(t)
	var seen []string
	st, err := extract(dst, mkTar(t, dirEnt(".", 0o755), dirEnt("d", 0o755), fileEnt("d/keep", "k", 0o644), fileEnt("d/drop", "d", 0o644), symlinkEnt("l", "d")), Options{
		Filter: func(rel string, st *unix.Stat_t) bool {
			return !strings.HasSuffix(rel, "drop") && st.Mode&unix.S_IFMT != unix.S_IFLNK
		},
		Seen: func(rel string, st *unix.Stat_t) { seen = append(seen, fmt.Sprintf("%s:%o", rel, st.Mode&unix.S_IFMT)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, " "); got != "d:40000 d/keep:100000 d/drop:100000 l:120000" {
		t.Errorf("Seen: %s", got)
	}
	absent(t, filepath.Join(dst, "d/drop"))
	absent(t, filepath.Join(dst, "l"))
	if readFile(t, filepath.Join(dst, "d/keep")) != "k" || st.Files != 1 || st.Dirs != 1 || st.Entries != 2 {
		t.Errorf("stats %+v", st)
	}
	check()
}

// TestExtractTarMisc: the destination must be empty, cancellation stops
// between entries, and the digest is TreeDigest's and reproducible.
func TestExtractTarMisc(t *testing.T) {
	requireRoot(t)
	b := mkTar(t, dirEnt("d", 0o755), fileEnt("d/f", "x", 0o644), symlinkEnt("l", "d/f"), linkEnt("h", "d/f"))

	dst, _, _ := confined(t)
	os.WriteFile(filepath.Join(dst, "already"), nil, 0o644)
	if _, err := extract(dst, b, Options{}); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("non-empty dst: got %v", err)
	}

	dst, _, check := confined(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ExtractTar(ctx, bytes.NewReader(b), dst, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: got %v", err)
	}
	check()

	var digests []string
	for range 2 {
		dst, _, check := confined(t)
		st, err := extract(dst, b, Options{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := TreeDigest(dst)
		if err != nil {
			t.Fatal(err)
		}
		if d != st.Digest || !strings.HasPrefix(d, "sha256:") || len(d) != 71 {
			t.Errorf("Stats.Digest %s, TreeDigest %s", st.Digest, d)
		}
		digests = append(digests, d)
		check()
	}
	if digests[0] != digests[1] {
		t.Errorf("same archive, different digests: %v", digests)
	}
}

// TestWhiteoutSetOpaque: the helpers for building overlay uppers.
func TestWhiteoutSetOpaque(t *testing.T) {
	requireRoot(t)
	dst, parent, check := confined(t)
	if _, err := extract(dst, mkTar(t, dirEnt("d", 0o755), fileEnt("d/f", "x", 0o644), dirEnt("e", 0o755), symlinkEnt("l", parent)), Options{}); err != nil {
		t.Fatal(err)
	}
	if err := Whiteout(dst, "d/f"); err != nil {
		t.Fatal(err)
	}
	if err := Whiteout(dst, "/e"); err != nil { // a directory, replaced
		t.Fatal(err)
	}
	for _, p := range []string{"d/f", "e"} {
		if st := lstat(t, filepath.Join(dst, p)); st.Mode != unix.S_IFCHR || st.Rdev != 0 {
			t.Errorf("%s: mode %o rdev %d, want a 0/0 whiteout", p, st.Mode, st.Rdev)
		}
	}
	for _, p := range []string{"l/sentinel", "l/new", "../sentinel", "x/../../sentinel"} {
		if err := Whiteout(dst, p); err == nil {
			t.Errorf("Whiteout(%q) succeeded", p)
		}
	}
	if err := Whiteout(dst, "missing/x"); err == nil {
		t.Errorf("Whiteout with a missing parent succeeded")
	}
	if err := SetOpaque(dst, "d"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(filepath.Join(dst, "d"), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("SetOpaque: %q %v", buf[:n], err)
	}
	for _, p := range []string{"l", "../", "d/f"} {
		if err := SetOpaque(dst, p); err == nil {
			t.Errorf("SetOpaque(%q) succeeded", p)
		}
	}
	if n, _ := unix.Lgetxattr(parent, opaqueXattr, buf); n > 0 {
		t.Errorf("SetOpaque wrote outside dst")
	}
	check()
}
