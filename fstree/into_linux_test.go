package fstree

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/hosttest"
)

// The copies between host trees and tar streams (ExtractInto, WriteTar,
// OpenPath), as the SDK's CopyIn and CopyOut make them.

// hostLimits are the limits the SDK's copies set: none but the depth.
var hostLimits = Limits{MaxBytes: 1 << 62, MaxEntries: 1 << 40, MaxDepth: 4096}

// hostExtract runs ExtractInto as a copy out of a sandbox does, the
// entries left out written to warn ("rel: why" lines) if it is not nil.
func hostExtract(archive []byte, dirfd int, name string, warn io.Writer) error {
	opt := HostOptions{Limits: hostLimits}
	if warn != nil {
		opt.Skipped = func(rel, why string) { fmt.Fprintf(warn, "%s: %s\n", rel, why) }
	}
	_, err := ExtractInto(context.Background(), bytes.NewReader(archive), dirfd, name, opt)
	return err
}

// openDirFd opens dir for the *at calls of a test.
func openDirFd(t testing.TB, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
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

// The shared fixtures of host-side copy tests (internal/hosttest).
var (
	must        = hosttest.Must
	realTempDir = hosttest.RealTempDir
)

// extractFixture is hosttest's victims, and their directory open for the
// *at calls.
type extractFixture struct {
	*hosttest.Victims
	fd int
}

func newExtractFixture(t testing.TB) *extractFixture {
	t.Helper()
	x := &extractFixture{Victims: hosttest.NewVictims(t)}
	x.fd = openDirFd(t, x.Parent)
	return x
}

// plant prepares what is at the destination before an extraction.
func (x *extractFixture) plant(t testing.TB, pre byte) {
	t.Helper()
	target := filepath.Join(x.Parent, "target")
	switch pre % 6 {
	case 1: // the destination is a symlink to a file
		must(t, os.Symlink(x.File, target))
	case 2: // ... to a directory
		must(t, os.Symlink(x.Dir, target))
	case 3: // an existing directory with symlinks inside
		must(t, os.Mkdir(target, 0o755))
		must(t, os.Symlink(x.Dir, filepath.Join(target, "sub")))
		must(t, os.Symlink(x.File, filepath.Join(target, "f")))
		must(t, os.Symlink("..", filepath.Join(target, "up")))
	case 4: // a FIFO (opening it for writing must not block)
		must(t, unix.Mkfifo(target, 0o600))
	case 5: // a relative symlink up
		must(t, os.Symlink("victimdir", target))
	}
}

var (
	hent    = hosttest.E
	hostTar = hosttest.Tar
)

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
		{"dotdot", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/../../victim", "", tar.TypeReg, "x"))},
		{"dotdot top", 0, hostTar(hent("../", "", tar.TypeDir, ""), hent("../../victim", "", tar.TypeReg, "x"), hent("../x/../../victim", "", tar.TypeReg, "x"))},
		{"absolute", 0, hostTar(hent("/t/", "", tar.TypeDir, ""), hent("/t/abs", "", tar.TypeReg, "x"), hent("//t/../t/victim", "", tar.TypeReg, "x"))},
		{"symlink then file through it", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/l", "../victimdir", tar.TypeSymlink, ""), hent("t/l/x", "", tar.TypeReg, "x"))},
		{"absolute symlink then file through it", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/l", "/", tar.TypeSymlink, ""), hent("t/l/tmp/x", "", tar.TypeReg, "x"))},
		{"symlink then file over it", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/l", "../victim", tar.TypeSymlink, ""), hent("t/l", "", tar.TypeReg, "x"))},
		{"symlink then dir through it", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/l", "../victimdir", tar.TypeSymlink, ""), hent("t/l/d/", "", tar.TypeDir, ""))},
		{"hardlink out", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/h", "../victim", tar.TypeLink, ""), hent("t/h", "", tar.TypeReg, "x"))},
		{"hardlink absolute", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/h", "/etc/passwd", tar.TypeLink, ""))},
		{"duplicate top dir", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/", "", tar.TypeDir, ""))},
		{"duplicate top file", 0, hostTar(hent("t", "", tar.TypeReg, "a"), hent("t", "", tar.TypeReg, "b"))},
		{"file then under it", 0, hostTar(hent("t", "", tar.TypeReg, "a"), hent("t/x", "", tar.TypeReg, "b"))},
		{"top symlink then under it", 0, hostTar(hent("t", "victimdir", tar.TypeSymlink, ""), hent("t/x", "", tar.TypeReg, "b"))},
		{"not under the top", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("victim", "", tar.TypeReg, "x"))},
		{"huge name", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/"+strings.Repeat("x", 5000), "", tar.TypeReg, "x"))},
		{"long component", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/"+long, "", tar.TypeReg, "x"))},
		{"deep", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent(deep, "", tar.TypeReg, "x"))},
		{"devices and fifos", 0, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/fifo", "", tar.TypeFifo, ""), hent("t/dev", "", tar.TypeChar, ""))},
		{"onto a file symlink", 1, hostTar(hent("t", "", tar.TypeReg, "x"))},
		{"onto a dir symlink", 2, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/x", "", tar.TypeReg, "x"))},
		{"symlink onto a dir symlink", 2, hostTar(hent("t", "/", tar.TypeSymlink, ""))},
		{"into host symlinks", 3, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/sub/x", "", tar.TypeReg, "x"), hent("t/up/victim", "", tar.TypeReg, "x"), hent("t/f", "", tar.TypeReg, "x"))},
		{"onto a fifo", 4, hostTar(hent("t", "", tar.TypeReg, "x"))},
		{"onto a relative symlink", 5, hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/x", "", tar.TypeReg, "x"))},
		{"sparse bomb", 0, sparseBomb("t")},
		{"sparse bomb inside", 0, sparseBomb("t/s", tarBlock("t/", '5', 0))},
		{"old GNU sparse", 0, append(append(tarBlock("t/", '5', 0), tarBlock("t/s", 'S', 0)...), make([]byte, 1024)...)},
		{"empty", 0, hostTar()},
		{"not a tar", 0, []byte("hello")},
	}
}

// TestExtractIntoHostile: no archive writes outside the destination,
// and none writes through a symlink that was there before, whether it is
// the destination or inside it. Controls: the planted links do lead to the
// victim (a plain write through them reaches it).
func TestExtractIntoHostile(t *testing.T) {
	for pre := byte(1); pre < 6; pre++ {
		x := newExtractFixture(t)
		x.plant(t, pre)
		p := filepath.Join(x.Parent, "target")
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
		if ents, _ := os.ReadDir(x.Dir); pre != 1 && len(ents) != 1 {
			t.Errorf("control %d: the write did not reach the victim directory", pre)
		}
		if b, _ := os.ReadFile(x.File); pre == 1 && string(b) != "probe" {
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
			err := hostExtract(c.tar, x.fd, "target", &warn)
			if mustFail[c.name] != (err != nil) {
				t.Errorf("err = %v", err)
			}
			if strings.HasPrefix(c.name, "sparse") && (err == nil || !strings.Contains(err.Error(), "sparse entries are not copied")) {
				t.Errorf("a sparse entry: %v", err)
			}
			if err != nil && c.pre != 0 && c.pre != 3 && !strings.Contains(err.Error(), "symlink") && c.pre != 4 {
				t.Errorf("the error does not name the symlink: %v", err)
			}
			x.Check(t)
		})
	}
	// What the hostile archives that succeed leave.
	x := newExtractFixture(t)
	var warn bytes.Buffer
	c := hostileArchives()
	for _, a := range c {
		switch a.name {
		case "absolute":
			must(t, hostExtract(a.tar, x.fd, "target", &warn))
			if b, err := os.ReadFile(filepath.Join(x.Parent, "target", "abs")); err != nil || string(b) != "x" {
				t.Errorf("absolute: %q %v", b, err)
			}
			if b, err := os.ReadFile(filepath.Join(x.Parent, "target", "victim")); err != nil || string(b) != "x" {
				t.Errorf("absolute: %q %v", b, err)
			}
		case "symlink then file over it", "hardlink out", "devices and fifos":
			os.RemoveAll(filepath.Join(x.Parent, "target"))
			must(t, hostExtract(a.tar, x.fd, "target", &warn))
			ents, _ := os.ReadDir(filepath.Join(x.Parent, "target"))
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
	x.Check(t)
	if !strings.Contains(warn.String(), "h: type '1' is not copied") || !strings.Contains(warn.String(), "fifo: type '6' is not copied") {
		t.Errorf("warnings: %q", warn.String())
	}
}

// TestExtractIntoMerge: a tree copied onto an existing directory merges
// into it; an existing regular file as the destination is overwritten in
// place (its mode kept).
func TestExtractIntoMerge(t *testing.T) {
	x := newExtractFixture(t)
	target := filepath.Join(x.Parent, "target")
	must(t, os.MkdirAll(filepath.Join(target, "keep"), 0o755))
	must(t, os.WriteFile(filepath.Join(target, "a"), []byte("old"), 0o600))
	a := hostTar(hent("t/", "", tar.TypeDir, ""), hent("t/a", "", tar.TypeReg, "new"), hent("t/keep/", "", tar.TypeDir, ""), hent("t/keep/b", "", tar.TypeReg, "b"), hent("t/l", "a", tar.TypeSymlink, ""))
	must(t, hostExtract(a, x.fd, "target", nil))
	for p, want := range map[string]string{"a": "new", "keep/b": "b", "l": "new"} {
		if b, err := os.ReadFile(filepath.Join(target, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	must(t, os.WriteFile(filepath.Join(x.Parent, "file"), []byte("a longer old content"), 0o640))
	must(t, hostExtract(hostTar(hent("f", "", tar.TypeReg, "short")), x.fd, "file", nil))
	b, _ := os.ReadFile(filepath.Join(x.Parent, "file"))
	st, _ := os.Stat(filepath.Join(x.Parent, "file"))
	if string(b) != "short" || st.Mode() != 0o640 {
		t.Errorf("overwritten file: %q %v", b, st.Mode())
	}
	os.Remove(filepath.Join(x.Parent, "file"))
	x.Check(t)
}

// FuzzExtractInto: whatever the archive and whatever was planted at the
// destination, nothing outside it is written and no symlink there is
// written through. The seeds are hostileArchives.
func FuzzExtractInto(f *testing.F) {
	for _, c := range hostileArchives() {
		f.Add(c.pre, c.tar)
	}
	f.Fuzz(func(t *testing.T, pre byte, archive []byte) {
		x := newExtractFixture(t)
		x.plant(t, pre)
		_ = hostExtract(archive, x.fd, "target", nil)
		x.Check(t)
	})
}
