package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/api"
)

// openDirFd opens dir for the *at calls of a test.
func openDirFd(t testing.TB, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// fdPath is where the descriptor fd leads.
func fdPath(t testing.TB, fd int) string {
	t.Helper()
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// realTempDir is t.TempDir() with its symlinks resolved.
func realTempDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOpenHost: a host path is resolved without following any symlink,
// wherever it is on the path, magic links included; the error names the
// symlink. Controls: the kernel's own resolution follows the same links.
func TestOpenHost(t *testing.T) {
	base := realTempDir(t)
	outside := realTempDir(t)
	must(t, os.MkdirAll(filepath.Join(base, "real", "sub"), 0o755))
	must(t, os.Symlink(outside, filepath.Join(base, "link")))
	must(t, os.Symlink("real", filepath.Join(base, "rel")))
	must(t, os.Symlink(outside, filepath.Join(base, "real", "deep")))
	for _, p := range []string{"link", "rel/sub", "real/deep"} {
		if st, err := os.Stat(filepath.Join(base, p)); err != nil || !st.IsDir() {
			t.Fatalf("control: %s does not resolve: %v", p, err)
		}
	}
	for _, c := range []struct{ p, link string }{
		{"real", ""},
		{"real/sub", ""},
		{"real/sub/..", ""},
		{"real/sub/../sub/", ""},
		{"link", "link"},
		{"link/", "link"},
		{"rel/sub", "rel"},
		{"real/deep", "real/deep"},
		{"real/../link", "link"},
	} {
		for _, abs := range []bool{true, false} {
			p, dirfd := filepath.Join(base, c.p), unix.AT_FDCWD
			if !abs {
				p, dirfd = "../"+c.p, openDirFd(t, filepath.Join(base, "real"))
			}
			fd, err := openHost(dirfd, p, oPath|unix.O_DIRECTORY)
			if c.link == "" {
				if err != nil {
					t.Errorf("%s: %v", p, err)
					continue
				}
				if got, want := fdPath(t, fd), filepath.Join(base, c.p); got != want {
					t.Errorf("%s opened %s, want %s", p, got, want)
				}
				unix.Close(fd)
				continue
			}
			var he *hostPathError
			if err == nil {
				unix.Close(fd)
				t.Errorf("%s: opened through a symlink", p)
			} else if !errors.Is(err, errHostSymlink) || !errors.As(err, &he) || !strings.HasSuffix(he.Link, c.link) || !strings.Contains(err.Error(), "is a symlink") {
				t.Errorf("%s: %v (link %+v), want the symlink %s named", p, err, he, c.link)
			}
		}
	}
	for _, p := range []string{"/proc/self/cwd", "/proc/self/root/" + base, "/dev/fd/0", fmt.Sprintf("/proc/%d/cwd", os.Getpid()), fmt.Sprintf("/proc/%d/root/tmp", os.Getpid())} {
		if fd, err := openHost(unix.AT_FDCWD, p, oPath|unix.O_DIRECTORY); err == nil {
			unix.Close(fd)
			t.Errorf("%s: a magic link was followed", p)
		}
	}
	if _, err := openHost(unix.AT_FDCWD, filepath.Join(base, "none"), oPath|unix.O_DIRECTORY); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// extractFixture is a destination directory with, next to it, a 0600
// file and a directory that an escape would reach.
type extractFixture struct {
	parent, victim, victimDir string
	fd                        int
}

const victimContent = "do not touch\n"

func newExtractFixture(t testing.TB) *extractFixture {
	t.Helper()
	x := &extractFixture{parent: realTempDir(t)}
	x.victim = filepath.Join(x.parent, "victim")
	x.victimDir = filepath.Join(x.parent, "victimdir")
	must(t, os.WriteFile(x.victim, []byte(victimContent), 0o600))
	must(t, os.Mkdir(x.victimDir, 0o755))
	x.fd = openDirFd(t, x.parent)
	return x
}

// check fails if anything next to the destination ("target") changed.
func (x *extractFixture) check(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile(x.victim)
	st, serr := os.Lstat(x.victim)
	if err != nil || string(b) != victimContent || serr != nil || st.Mode() != 0o600 {
		t.Errorf("the victim file changed: %q %v %v", b, err, st)
	}
	ents, _ := os.ReadDir(x.victimDir)
	if len(ents) != 0 {
		t.Errorf("the victim directory holds %v", ents)
	}
	ents, _ = os.ReadDir(x.parent)
	for _, e := range ents {
		if n := e.Name(); n != "victim" && n != "victimdir" && n != "target" {
			t.Errorf("%s was created next to the destination", n)
		}
	}
}

// plant prepares what is at the destination before an extraction.
func (x *extractFixture) plant(t testing.TB, pre byte) {
	t.Helper()
	target := filepath.Join(x.parent, "target")
	switch pre % 6 {
	case 1: // the destination is a symlink to a file
		must(t, os.Symlink(x.victim, target))
	case 2: // ... to a directory
		must(t, os.Symlink(x.victimDir, target))
	case 3: // an existing directory with symlinks inside
		must(t, os.Mkdir(target, 0o755))
		must(t, os.Symlink(x.victimDir, filepath.Join(target, "sub")))
		must(t, os.Symlink(x.victim, filepath.Join(target, "f")))
		must(t, os.Symlink("..", filepath.Join(target, "up")))
	case 4: // a FIFO (opening it for writing must not block)
		must(t, unix.Mkfifo(target, 0o600))
	case 5: // a relative symlink up
		must(t, os.Symlink("victimdir", target))
	}
}

type ent struct {
	name, link string
	typ        byte
	body       string
}

func tarOf(entries ...ent) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), Format: tar.FormatPAX})
		io.WriteString(tw, e.body)
	}
	tw.Close()
	return buf.Bytes()
}

// tarBlock is one raw ustar header block (for what tar.Writer refuses
// to write).
func tarBlock(name string, typ byte, size int) []byte {
	b := make([]byte, 512)
	copy(b, name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], "00000000000\x00")
	b[156] = typ
	copy(b[257:], "ustar\x0000")
	copy(b[148:], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// sparseBomb is a tar of the entries before (raw blocks) and a GNU sparse
// (PAX 0.1) file name of 1 TB, all holes, in a few blocks.
func sparseBomb(name string, before ...[]byte) []byte {
	var recs string
	for _, kv := range [][2]string{{"GNU.sparse.major", "0"}, {"GNU.sparse.minor", "1"}, {"GNU.sparse.size", "1000000000000"}, {"GNU.sparse.numblocks", "1"}, {"GNU.sparse.map", "999999999999,0"}} {
		r := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(r) + 1
		for len(fmt.Sprint(n))+len(r) != n {
			n++
		}
		recs += fmt.Sprint(n) + r
	}
	var buf bytes.Buffer
	for _, b := range before {
		buf.Write(b)
	}
	buf.Write(tarBlock("PaxHeaders/"+name, 'x', len(recs)))
	buf.WriteString(recs)
	buf.Write(make([]byte, (512-len(recs)%512)%512))
	buf.Write(tarBlock(name, '0', 0))
	buf.Write(make([]byte, 1024))
	return buf.Bytes()
}

// hostileArchives are archives (and what is at the destination before)
// that try to write outside the destination; the fuzz seeds.
func hostileArchives() []struct {
	name string
	pre  byte
	tar  []byte
} {
	long := strings.Repeat("n", 300)
	deep := "t/" + strings.Repeat("d/", 1500) + "f"
	return []struct {
		name string
		pre  byte
		tar  []byte
	}{
		{"dotdot", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/../../victim", "", tar.TypeReg, "x"})},
		{"dotdot top", 0, tarOf(ent{"../", "", tar.TypeDir, ""}, ent{"../../victim", "", tar.TypeReg, "x"}, ent{"../x/../../victim", "", tar.TypeReg, "x"})},
		{"absolute", 0, tarOf(ent{"/t/", "", tar.TypeDir, ""}, ent{"/t/abs", "", tar.TypeReg, "x"}, ent{"//t/../t/victim", "", tar.TypeReg, "x"})},
		{"symlink then file through it", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/l", "../victimdir", tar.TypeSymlink, ""}, ent{"t/l/x", "", tar.TypeReg, "x"})},
		{"absolute symlink then file through it", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/l", "/", tar.TypeSymlink, ""}, ent{"t/l/tmp/x", "", tar.TypeReg, "x"})},
		{"symlink then file over it", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/l", "../victim", tar.TypeSymlink, ""}, ent{"t/l", "", tar.TypeReg, "x"})},
		{"symlink then dir through it", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/l", "../victimdir", tar.TypeSymlink, ""}, ent{"t/l/d/", "", tar.TypeDir, ""})},
		{"hardlink out", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/h", "../victim", tar.TypeLink, ""}, ent{"t/h", "", tar.TypeReg, "x"})},
		{"hardlink absolute", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/h", "/etc/passwd", tar.TypeLink, ""})},
		{"duplicate top dir", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/", "", tar.TypeDir, ""})},
		{"duplicate top file", 0, tarOf(ent{"t", "", tar.TypeReg, "a"}, ent{"t", "", tar.TypeReg, "b"})},
		{"file then under it", 0, tarOf(ent{"t", "", tar.TypeReg, "a"}, ent{"t/x", "", tar.TypeReg, "b"})},
		{"top symlink then under it", 0, tarOf(ent{"t", "victimdir", tar.TypeSymlink, ""}, ent{"t/x", "", tar.TypeReg, "b"})},
		{"not under the top", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"victim", "", tar.TypeReg, "x"})},
		{"huge name", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/" + strings.Repeat("x", 5000), "", tar.TypeReg, "x"})},
		{"long component", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/" + long, "", tar.TypeReg, "x"})},
		{"deep", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{deep, "", tar.TypeReg, "x"})},
		{"devices and fifos", 0, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/fifo", "", tar.TypeFifo, ""}, ent{"t/dev", "", tar.TypeChar, ""})},
		{"onto a file symlink", 1, tarOf(ent{"t", "", tar.TypeReg, "x"})},
		{"onto a dir symlink", 2, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/x", "", tar.TypeReg, "x"})},
		{"symlink onto a dir symlink", 2, tarOf(ent{"t", "/", tar.TypeSymlink, ""})},
		{"into host symlinks", 3, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/sub/x", "", tar.TypeReg, "x"}, ent{"t/up/victim", "", tar.TypeReg, "x"}, ent{"t/f", "", tar.TypeReg, "x"})},
		{"onto a fifo", 4, tarOf(ent{"t", "", tar.TypeReg, "x"})},
		{"onto a relative symlink", 5, tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/x", "", tar.TypeReg, "x"})},
		{"sparse bomb", 0, sparseBomb("t")},
		{"sparse bomb inside", 0, sparseBomb("t/s", tarBlock("t/", '5', 0))},
		{"old GNU sparse", 0, append(append(tarBlock("t/", '5', 0), tarBlock("t/s", 'S', 0)...), make([]byte, 1024)...)},
		{"empty", 0, tarOf()},
		{"not a tar", 0, []byte("hello")},
	}
}

// TestExtractTarHostile: no archive writes outside the destination, and
// none writes through a symlink that was there before, whether it is the
// destination or inside it. Controls: the planted links do lead to the
// victim (a plain write through them reaches it).
func TestExtractTarHostile(t *testing.T) {
	for pre := byte(1); pre < 6; pre++ {
		x := newExtractFixture(t)
		x.plant(t, pre)
		p := filepath.Join(x.parent, "target")
		switch pre {
		case 1:
		case 3:
			p = filepath.Join(p, "sub", "probe")
		case 4:
			continue // a FIFO: no control (a plain open would block)
		default:
			p = filepath.Join(p, "probe")
		}
		must(t, os.WriteFile(p, []byte("probe"), 0o600))
		if ents, _ := os.ReadDir(x.victimDir); pre != 1 && len(ents) != 1 {
			t.Errorf("control %d: the write did not reach the victim directory", pre)
		}
		if b, _ := os.ReadFile(x.victim); pre == 1 && string(b) != "probe" {
			t.Errorf("control 1: the write did not reach the victim: %q", b)
		}
	}
	mustFail := map[string]bool{
		"dotdot": true, "dotdot top": true, "symlink then file through it": true, "absolute symlink then file through it": true,
		"symlink then dir through it": true, "duplicate top dir": true, "duplicate top file": true, "file then under it": true,
		"top symlink then under it": true, "not under the top": true, "huge name": true, "long component": true,
		"onto a file symlink": true, "onto a dir symlink": true, "symlink onto a dir symlink": true, "into host symlinks": true,
		"onto a fifo": true, "onto a relative symlink": true, "empty": true, "not a tar": true,
		"sparse bomb": true, "sparse bomb inside": true, "old GNU sparse": true,
	}
	for _, c := range hostileArchives() {
		t.Run(c.name, func(t *testing.T) {
			x := newExtractFixture(t)
			x.plant(t, c.pre)
			var warn bytes.Buffer
			err := extractTar(bytes.NewReader(c.tar), x.fd, "target", &warn)
			if mustFail[c.name] != (err != nil) {
				t.Errorf("err = %v", err)
			}
			if strings.HasPrefix(c.name, "sparse") && (err == nil || !strings.Contains(err.Error(), "sparse entries are not copied")) {
				t.Errorf("a sparse entry: %v", err)
			}
			if err != nil && c.pre != 0 && c.pre != 3 && !strings.Contains(err.Error(), "symlink") && c.pre != 4 {
				t.Errorf("the error does not name the symlink: %v", err)
			}
			x.check(t)
		})
	}
	// What the hostile archives that succeed leave.
	x := newExtractFixture(t)
	var warn bytes.Buffer
	c := hostileArchives()
	for _, a := range c {
		switch a.name {
		case "absolute":
			must(t, extractTar(bytes.NewReader(a.tar), x.fd, "target", &warn))
			if b, err := os.ReadFile(filepath.Join(x.parent, "target", "abs")); err != nil || string(b) != "x" {
				t.Errorf("absolute: %q %v", b, err)
			}
			if b, err := os.ReadFile(filepath.Join(x.parent, "target", "victim")); err != nil || string(b) != "x" {
				t.Errorf("absolute: %q %v", b, err)
			}
		case "symlink then file over it", "hardlink out", "devices and fifos":
			os.RemoveAll(filepath.Join(x.parent, "target"))
			must(t, extractTar(bytes.NewReader(a.tar), x.fd, "target", &warn))
			ents, _ := os.ReadDir(filepath.Join(x.parent, "target"))
			var names []string
			for _, e := range ents {
				names = append(names, e.Name()+":"+e.Type().String())
			}
			want := map[string]string{"symlink then file over it": "l:----------", "hardlink out": "h:----------", "devices and fifos": ""}[a.name]
			if strings.Join(names, ",") != want {
				t.Errorf("%s: %q, want %q", a.name, names, want)
			}
		}
	}
	x.check(t)
	if !strings.Contains(warn.String(), "t/h: type '1' is not copied") || !strings.Contains(warn.String(), "t/fifo") {
		t.Errorf("warnings: %q", warn.String())
	}
}

// TestExtractTarMerge: a tree copied onto an existing directory merges
// into it; an existing regular file as the destination is overwritten in
// place (its mode kept).
func TestExtractTarMerge(t *testing.T) {
	x := newExtractFixture(t)
	target := filepath.Join(x.parent, "target")
	must(t, os.MkdirAll(filepath.Join(target, "keep"), 0o755))
	must(t, os.WriteFile(filepath.Join(target, "a"), []byte("old"), 0o600))
	a := tarOf(ent{"t/", "", tar.TypeDir, ""}, ent{"t/a", "", tar.TypeReg, "new"}, ent{"t/keep/", "", tar.TypeDir, ""}, ent{"t/keep/b", "", tar.TypeReg, "b"}, ent{"t/l", "a", tar.TypeSymlink, ""})
	must(t, extractTar(bytes.NewReader(a), x.fd, "target", io.Discard))
	for p, want := range map[string]string{"a": "new", "keep/b": "b", "l": "new"} {
		if b, err := os.ReadFile(filepath.Join(target, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	must(t, os.WriteFile(filepath.Join(x.parent, "file"), []byte("a longer old content"), 0o640))
	must(t, extractTar(bytes.NewReader(tarOf(ent{"f", "", tar.TypeReg, "short"})), x.fd, "file", io.Discard))
	b, _ := os.ReadFile(filepath.Join(x.parent, "file"))
	st, _ := os.Stat(filepath.Join(x.parent, "file"))
	if string(b) != "short" || st.Mode() != 0o640 {
		t.Errorf("overwritten file: %q %v", b, st.Mode())
	}
	os.Remove(filepath.Join(x.parent, "file"))
	x.check(t)
}

// FuzzExtractTar: whatever the archive and whatever was planted at the
// destination, nothing outside it is written and no symlink there is
// written through. The seeds are hostileArchives.
func FuzzExtractTar(f *testing.F) {
	for _, c := range hostileArchives() {
		f.Add(c.pre, c.tar)
	}
	f.Fuzz(func(t *testing.T, pre byte, archive []byte) {
		x := newExtractFixture(t)
		x.plant(t, pre)
		_ = extractTar(bytes.NewReader(archive), x.fd, "target", io.Discard)
		x.check(t)
	})
}

// FuzzOpenHost: a host path opens, if at all, exactly where it says
// lexically: no symlink (of the fixture's several) was followed.
func FuzzOpenHost(f *testing.F) {
	for _, p := range []string{".", "..", "e", "e/", "l", "l/", "l/x", "abs/d", "e/../l", "../d/e", "../../..", "./e/./", "e/up/e", "f", "f/", "f/x", "self/e", "../d/self/../e", "/etc", "e/x/../../l"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 || len(p) > 1024 {
			return
		}
		base := realTempDir(t)
		d := filepath.Join(base, "d")
		must(t, os.MkdirAll(filepath.Join(d, "e", "x"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "f"), nil, 0o600))
		must(t, os.Symlink("e", filepath.Join(d, "l")))
		must(t, os.Symlink(base, filepath.Join(d, "abs")))
		must(t, os.Symlink(".", filepath.Join(d, "self")))
		must(t, os.Symlink("..", filepath.Join(d, "e", "up")))
		fd, err := openHost(openDirFd(t, d), p, oPath|unix.O_DIRECTORY)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		if got, want := fdPath(t, fd), filepath.Join(d, p); got != want {
			t.Fatalf("%q opened %s, want %s", p, got, want)
		}
	})
}

// TestWriteTarNoFollow: a host tree travels with its symlinks as
// symlinks; FIFOs and sockets are skipped (never opened, so nothing
// blocks); a source that is a symlink is a symlink entry.
func TestWriteTarNoFollow(t *testing.T) {
	base := realTempDir(t)
	outside := realTempDir(t)
	secret := filepath.Join(outside, "secret")
	must(t, os.WriteFile(secret, []byte("secret"), 0o600))
	tree := filepath.Join(base, "tree")
	must(t, os.MkdirAll(filepath.Join(tree, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(tree, "ok"), []byte("ok"), 0o644))
	must(t, os.Symlink(secret, filepath.Join(tree, "leak")))
	must(t, os.Symlink(outside, filepath.Join(tree, "sub", "leakdir")))
	must(t, unix.Mkfifo(filepath.Join(tree, "fifo"), 0o600))
	l, err := net.Listen("unix", filepath.Join(tree, "sock"))
	must(t, err)
	defer l.Close()
	must(t, os.Symlink(tree, filepath.Join(base, "treelink")))

	dirfd := openDirFd(t, base)
	var buf, warn bytes.Buffer
	must(t, writeTar(&buf, dirfd, "tree", "tree", tree, &warn))
	got := readTar(t, &buf)
	want := []string{"tree/ 5", "tree/leak 2 " + secret, "tree/ok 0  ok", "tree/sub/ 5", "tree/sub/leakdir 2 " + outside}
	if !slices.Equal(got, want) {
		t.Errorf("archive:\n%q\nwant\n%q", got, want)
	}
	if !strings.Contains(warn.String(), "fifo") || !strings.Contains(warn.String(), "sock") {
		t.Errorf("warnings: %q", warn.String())
	}
	buf.Reset()
	must(t, writeTar(&buf, dirfd, "treelink", "x", filepath.Join(base, "treelink"), &warn))
	if got := readTar(t, &buf); !slices.Equal(got, []string{"x 2 " + tree}) {
		t.Errorf("a symlink source: %q", got)
	}

	// A directory named by its own descriptor (a trailing /, "."): its
	// entries under the name given.
	buf.Reset()
	must(t, writeTar(&buf, openDirFd(t, filepath.Join(tree, "sub")), "", "s", filepath.Join(tree, "sub"), &warn))
	if got := readTar(t, &buf); !slices.Equal(got, []string{"s/ 5", "s/leakdir 2 " + outside}) {
		t.Errorf("a directory by descriptor: %q", got)
	}

	// The open that follows the walk's fstatat refuses what the entry may
	// have become since: a symlink, a FIFO (at once, without blocking).
	treefd := openDirFd(t, tree)
	for _, n := range []string{"leak", "fifo", "sock"} {
		if f, _, err := openRegular(treefd, n); err == nil {
			f.Close()
			t.Errorf("%s: opened", n)
		}
	}
}

// TestCopyHostSymlinks: without a daemon able to bind host paths, the
// same refusals through the command (a fake daemon; the symlinks stand
// for ones a sandbox planted in its workspace).
func TestCopyHostSymlinks(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("GET /v1/sandboxes/sb-1/archive", func(w http.ResponseWriter, r *http.Request) {
		w.Write(tarOf(ent{"out", "", tar.TypeReg, "pwned"}))
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/files/stat", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 404, api.Error{Code: api.CodeFile, Errno: "ENOENT", Message: "no such file"})
	})
	var uploaded []string
	mux.HandleFunc("PUT /v1/sandboxes/sb-1/archive", func(w http.ResponseWriter, r *http.Request) {
		uploaded = append(uploaded, readTar(t, r.Body)...)
		replyJSON(w, 200, api.Written{})
	})
	mux.HandleFunc("PUT /v1/sandboxes/sb-1/files", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		uploaded = append(uploaded, string(b))
		replyJSON(w, 200, api.Written{})
	})
	x := newExtractFixture(t)
	ws := filepath.Join(x.parent, "target")
	must(t, os.Mkdir(ws, 0o755))
	must(t, os.Symlink(x.victim, filepath.Join(ws, "out")))
	must(t, os.Symlink(x.victimDir, filepath.Join(ws, "dir")))
	must(t, os.Symlink(x.parent, filepath.Join(ws, "up")))
	for _, dst := range []string{"out", "dir", "dir/", "up/victim", "up/victimdir/x"} {
		_, errOut, code := sbRun(t, "", "cp", "sb-1:/workspace/out", ws+"/"+dst)
		if code == 0 || !strings.Contains(errOut, "is a symlink") {
			t.Errorf("cp to %s: %d %q", dst, code, errOut)
		}
		t.Logf("cp to %s: %s", dst, errOut)
	}
	for _, src := range []string{"dir/", "up/victim", "up/victimdir"} {
		_, errOut, code := sbRun(t, "", "cp", ws+"/"+src, "sb-1:/tmp/x")
		if code == 0 || !strings.Contains(errOut, "is a symlink") {
			t.Errorf("cp from %s: %d %q", src, code, errOut)
		}
		t.Logf("cp from %s: %s", src, errOut)
	}
	if _, errOut, code := sbRun(t, "", "cp", filepath.Join(ws, "out"), "sb-1:/tmp/x"); code != 0 {
		t.Errorf("cp of a symlink: %d %q", code, errOut)
	}
	if want := []string{"x 2 " + x.victim}; !slices.Equal(uploaded, want) {
		t.Errorf("uploaded %q, want %q", uploaded, want)
	}
	x.check(t)
	// The control: a host program writing to the same path reaches the
	// victim.
	must(t, os.WriteFile(filepath.Join(ws, "out"), []byte("pwned"), 0o644))
	if b, _ := os.ReadFile(x.victim); string(b) != "pwned" {
		t.Errorf("control: %q", b)
	}
}
