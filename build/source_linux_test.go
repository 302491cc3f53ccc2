package build

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/fstree"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// ent is one entry of a test tar.
type ent struct {
	name string
	typ  byte
	body string
	mode int64
	link string
	size int64 // regular files: the size written in the header when body is ""
	uid  int
	at   time.Time
}

func file(name, body string) ent  { return ent{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func dir(name string) ent         { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) ent { return ent{name: name, typ: tar.TypeSymlink, link: to} }
func hardlink(name, to string) ent {
	return ent{name: name, typ: tar.TypeLink, link: to}
}
func special(name string, typ byte) ent { return ent{name: name, typ: typ, mode: 0o644} }
func sized(name string, n int) ent      { return file(name, strings.Repeat("x", n)) }

// mkTar packs ents.
func mkTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Uid: e.uid, Gid: e.uid, ModTime: e.at, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar %q: %v", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawTar is a tar of one regular file written by hand, for names
// archive/tar will not write (a trailing "/" on a file).
func rawTar(name, body string) []byte {
	hdr := make([]byte, 512)
	copy(hdr[0:100], name)
	copy(hdr[100:], "0000644\x00")
	copy(hdr[108:], "0000000\x00")
	copy(hdr[116:], "0000000\x00")
	copy(hdr[124:], fmt.Sprintf("%011o\x00", len(body)))
	copy(hdr[136:], "00000000000\x00")
	hdr[156] = tar.TypeReg
	copy(hdr[257:], "ustar\x0000")
	copy(hdr[148:156], "        ")
	sum := 0
	for _, c := range hdr {
		sum += int(c)
	}
	copy(hdr[148:], fmt.Sprintf("%06o\x00 ", sum))
	data := make([]byte, (len(body)+511)/512*512)
	copy(data, body)
	out := append(hdr, data...)
	return append(out, make([]byte, 1024)...)
}

// gzipped compresses b.
func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// files are n regular files at the top.
func files(n int) []ent {
	var out []ent
	for i := range n {
		out = append(out, file(fmt.Sprintf("f%d", i), "x"))
	}
	return out
}

// small are the limits of the table's cases.
var small = Limits{MaxFiles: 5, MaxFileBytes: 10, MaxTotalBytes: 25}

// unpackCase is a source package refused with reason, and its control:
// the same package within the limit, or with the bad entry fixed.
type unpackCase struct {
	name    string
	bad, ok []byte
	lim     Limits
	reason  string
}

func unpackCases(t testing.TB) []unpackCase {
	good := mkTar(t, dir("./"), dir("src/"), file("src/main.c", "int x;"), symlink("src/link", "main.c"))
	corrupt := gzipped(good)
	corrupt[len(corrupt)/2] ^= 0xff
	return []unpackCase{
		{"too many files", mkTar(t, files(6)...), mkTar(t, files(5)...), small, api.ReasonSourceTooManyFiles},
		{"too many files counting unlisted parents", mkTar(t, file("a/b/c/d/e/f", "x")), mkTar(t, file("a/b/c/d/e", "x")), small, api.ReasonSourceTooManyFiles},
		{"file too large", mkTar(t, sized("big", 11)), mkTar(t, sized("big", 10)), small, api.ReasonSourceFileTooLarge},
		{"total too large", mkTar(t, sized("a", 10), sized("b", 10), sized("c", 6)), mkTar(t, sized("a", 10), sized("b", 10), sized("c", 5)), small, api.ReasonSourceTooLarge},
		{"absolute path", mkTar(t, file("/etc/passwd", "x")), mkTar(t, file("etc/passwd", "x")), small, api.ReasonSourceBadPath},
		{"absolute root", mkTar(t, dir("/"), file("a", "x")), mkTar(t, dir("./"), file("a", "x")), small, api.ReasonSourceBadPath},
		{"dot dot", mkTar(t, file("../x", "x")), mkTar(t, file("x", "x")), small, api.ReasonSourceBadPath},
		{"dot dot inside", mkTar(t, file("a/../../x", "x")), mkTar(t, file("a/x", "x")), small, api.ReasonSourceBadPath},
		{"unclean path", mkTar(t, file("a//b", "x")), mkTar(t, file("a/b", "x")), small, api.ReasonSourceBadPath},
		{"trailing slash on a file", rawTar("a/", "x"), rawTar("a", "x"), small, api.ReasonSourceBadPath},
		{"listed twice", mkTar(t, file("a", "x"), file("a", "y")), mkTar(t, file("a", "x"), file("b", "y")), small, api.ReasonSourceBadPath},
		{"beneath a file", mkTar(t, file("a", "x"), file("a/b", "y")), mkTar(t, dir("a/"), file("a/b", "y")), small, api.ReasonSourceBadPath},
		{"beneath a symlink", mkTar(t, dir("d/"), symlink("l", "d"), file("l/x", "y")), mkTar(t, dir("d/"), symlink("l", "d"), file("d/x", "y")), small, api.ReasonSourceBadPath},
		{"symlink absolute", mkTar(t, symlink("etc", "/etc")), mkTar(t, symlink("etc", "etc2")), small, api.ReasonSourceBadPath},
		{"symlink escaping", mkTar(t, symlink("a/l", "../../x")), mkTar(t, symlink("a/l", "../x")), small, api.ReasonSourceBadPath},
		{"symlink escaping through the root", mkTar(t, symlink("l", "a/../../x")), mkTar(t, symlink("l", "a/../x")), small, api.ReasonSourceBadPath},
		{"hardlink to an unknown path", mkTar(t, hardlink("h", "nowhere")), mkTar(t, file("f", "x"), hardlink("h", "f")), small, api.ReasonSourceBadPath},
		{"hardlink out of the tree", mkTar(t, file("f", "x"), hardlink("h", "../f")), mkTar(t, file("f", "x"), hardlink("h", "./f")), small, api.ReasonSourceBadPath},
		{"hardlink to a later file", mkTar(t, hardlink("h", "f"), file("f", "x")), mkTar(t, file("f", "x"), hardlink("h", "f")), small, api.ReasonSourceBadPath},
		{"hardlink to a directory", mkTar(t, dir("d/"), hardlink("h", "d")), mkTar(t, dir("d/"), file("d/f", ""), hardlink("h", "d/f")), small, api.ReasonSourceBadPath},
		{"char device", mkTar(t, special("null", tar.TypeChar)), mkTar(t, file("null", "")), small, api.ReasonSourceBadType},
		{"block device", mkTar(t, special("sda", tar.TypeBlock)), mkTar(t, file("sda", "")), small, api.ReasonSourceBadType},
		{"fifo", mkTar(t, special("pipe", tar.TypeFifo)), mkTar(t, file("pipe", "")), small, api.ReasonSourceBadType},
		{"garbage", bytes.Repeat([]byte("not a tar archive\n"), 100), good, small, api.ReasonSourceUnreadable},
		{"empty", nil, good, small, api.ReasonSourceUnreadable},
		{"truncated", good[:len(good)/2+100], good, small, api.ReasonSourceUnreadable},
		{"no end-of-archive marker", good[:len(good)-1024], good, small, api.ReasonSourceUnreadable},
		{"one zero block", good[:len(good)-512], good, small, api.ReasonSourceUnreadable},
		{"the root as a file", mkTar(t, file(".", "x")), mkTar(t, dir(".")), small, api.ReasonSourceBadPath},
		{"hardlink to a symlink", mkTar(t, file("f", "x"), symlink("l", "f"), hardlink("h", "l")), mkTar(t, file("f", "x"), symlink("l", "f"), hardlink("h", "f")), small, api.ReasonSourceBadPath},
		{"unknown type", mkTar(t, special("v", 'V')), mkTar(t, file("v", "")), small, api.ReasonSourceBadType},
		{"truncated gzip", gzipped(good)[:40], gzipped(good), small, api.ReasonSourceUnreadable},
		{"bad gzip", corrupt, gzipped(good), small, api.ReasonSourceUnreadable},
		{"trailing data", append(bytes.Clone(good), bytes.Repeat([]byte{1}, maxTrailing+1)...), append(bytes.Clone(good), make([]byte, 10240)...), small, api.ReasonSourceUnreadable},
	}
}

// normalizeOnly runs the check of a package without writing a tree.
func normalizeOnly(b []byte, lim Limits) (*Source, error) {
	n := newNormalizer(lim.Or(Defaults), DefaultEpoch)
	err := n.run(context.Background(), bytes.NewReader(b), io.Discard)
	return n.src, err
}

// newLayer is an empty layer directory, 0755.
func newLayer(t testing.TB) string {
	t.Helper()
	layer := filepath.Join(t.TempDir(), "layer")
	if err := os.Mkdir(layer, 0o755); err != nil {
		t.Fatal(err)
	}
	return layer
}

// wantRefusal fails unless err is a Refusal of reason.
func wantRefusal(t *testing.T, err error, reason string) {
	t.Helper()
	r, ok := AsRefusal(err)
	if !ok || r.Reason != reason {
		t.Fatalf("error %v, want a refusal %s", err, reason)
	}
	if strings.ContainsFunc(r.Message, func(c rune) bool { return c < 0x20 }) {
		t.Errorf("message %q has a control character", r.Message)
	}
}

func TestUnpackRefusals(t *testing.T) {
	root := os.Geteuid() == 0
	for _, c := range unpackCases(t) {
		t.Run(c.name, func(t *testing.T) {
			// The check alone (no root needed).
			_, err := normalizeOnly(c.bad, c.lim)
			wantRefusal(t, err, c.reason)
			if _, err := normalizeOnly(c.ok, c.lim); err != nil {
				t.Fatalf("control: %v", err)
			}
			if !root {
				return
			}
			_, err = Unpack(context.Background(), bytes.NewReader(c.bad), newLayer(t), c.lim, DefaultEpoch)
			wantRefusal(t, err, c.reason)
			if _, err := Unpack(context.Background(), bytes.NewReader(c.ok), newLayer(t), c.lim, DefaultEpoch); err != nil {
				t.Fatalf("control: %v", err)
			}
		})
	}
}

func TestUnpack(t *testing.T) {
	testutil.RequireRoot(t)
	const epoch = 1_700_000_000
	src := mkTar(t,
		ent{name: "./", typ: tar.TypeDir, mode: 0o700, uid: 0},
		ent{name: "bin/", typ: tar.TypeDir, mode: 0o2775, uid: 501},
		ent{name: "bin/tool", typ: tar.TypeReg, mode: 0o4755, body: "#!/bin/sh\n", uid: 0, at: time.Unix(12345, 0)},
		file("pkg/a/b.go", "package b\n"),
		symlink("pkg/latest", "a/b.go"),
		hardlink("pkg/again", "pkg/a/b.go"),
	)
	layer := newLayer(t)
	s, err := Unpack(context.Background(), bytes.NewReader(src), layer, Limits{}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	// bin, bin/tool, pkg, pkg/a, pkg/a/b.go, pkg/latest, pkg/again.
	if s.Files != 7 || s.Bytes != int64(len("#!/bin/sh\n")+len("package b\n")) || s.Stripped != 2 {
		t.Errorf("source %+v", s)
	}
	want := map[string]uint32{
		"src": unix.S_IFDIR | 0o755, "src/bin": unix.S_IFDIR | 0o775, "src/bin/tool": unix.S_IFREG | 0o755,
		"src/pkg": unix.S_IFDIR | 0o755, "src/pkg/a": unix.S_IFDIR | 0o755, "src/pkg/a/b.go": unix.S_IFREG | 0o644,
		"src/pkg/latest": unix.S_IFLNK | 0o777, "src/pkg/again": unix.S_IFREG | 0o644,
		"build": unix.S_IFDIR | 0o755, "build/home": unix.S_IFDIR | 0o755, "build/tmp": unix.S_IFDIR | 0o755, "build/cache": unix.S_IFDIR | 0o755,
	}
	seen := 0
	err = filepath.WalkDir(layer, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == layer {
			return err
		}
		rel, _ := filepath.Rel(layer, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		mode, ok := want[rel]
		if !ok {
			t.Errorf("unexpected %s", rel)
			return nil
		}
		seen++
		if st.Mode != mode || st.Uid != SourceUID || st.Gid != SourceGID || st.Mtim.Sec != epoch {
			t.Errorf("%s: mode %o owner %d:%d mtime %d; want %o 1000:1000 %d", rel, st.Mode, st.Uid, st.Gid, st.Mtim.Sec, mode, epoch)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(want) {
		t.Errorf("%d entries in the layer, want %d", seen, len(want))
	}
	if got, _ := os.Readlink(filepath.Join(layer, "src/pkg/latest")); got != "a/b.go" {
		t.Errorf("symlink target %q", got)
	}
	d, err := fstree.TreeDigest(filepath.Join(layer, "src"))
	if err != nil || d != s.Digest {
		t.Errorf("digest %q, the tree's %q (%v)", s.Digest, d, err)
	}
}

// TestUnpackDigest: the digest depends on the tree only.
func TestUnpackDigest(t *testing.T) {
	testutil.RequireRoot(t)
	digest := func(b []byte, epoch int64) string {
		t.Helper()
		s, err := Unpack(context.Background(), bytes.NewReader(b), newLayer(t), Limits{}, epoch)
		if err != nil {
			t.Fatal(err)
		}
		return s.Digest
	}
	at := time.Unix(1_600_000_000, 0)
	one := mkTar(t,
		ent{name: "./", typ: tar.TypeDir, mode: 0o755},
		ent{name: "./d/", typ: tar.TypeDir, mode: 0o750, uid: 7, at: at},
		ent{name: "./d/f", typ: tar.TypeReg, mode: 0o640, body: "hello", uid: 7, at: at},
		ent{name: "./g", typ: tar.TypeReg, mode: 0o755, body: "world", uid: 7, at: at},
		ent{name: "./l", typ: tar.TypeSymlink, link: "d/f", uid: 7, at: at},
	)
	// Other owners and times, another order, no "./" entries, the
	// directory after its contents.
	two := mkTar(t,
		ent{name: "l", typ: tar.TypeSymlink, link: "d/f", uid: 99, at: at.Add(time.Hour)},
		ent{name: "g", typ: tar.TypeReg, mode: 0o755, body: "world", uid: 0},
		ent{name: "d/f", typ: tar.TypeReg, mode: 0o640, body: "hello", uid: 1234, at: at.Add(-time.Hour)},
		ent{name: "d/", typ: tar.TypeDir, mode: 0o750, uid: 5},
	)
	changed := mkTar(t,
		ent{name: "d/", typ: tar.TypeDir, mode: 0o750},
		ent{name: "d/f", typ: tar.TypeReg, mode: 0o640, body: "hellO"},
		ent{name: "g", typ: tar.TypeReg, mode: 0o755, body: "world"},
		ent{name: "l", typ: tar.TypeSymlink, link: "d/f"},
	)
	d1 := digest(one, DefaultEpoch)
	if d2 := digest(gzipped(two), DefaultEpoch); d2 != d1 {
		t.Errorf("the same tree packed otherwise: %s, want %s", d2, d1)
	}
	if d := digest(changed, DefaultEpoch); d == d1 {
		t.Error("a byte of content changed, and the digest did not")
	}
	if d := digest(one, DefaultEpoch+1); d == d1 {
		t.Error("another epoch, and the digest did not change")
	}
}

// TestUnpackCanceled: a context that ends while a file streams stops
// both sides; the error is the context's, not a refusal.
func TestUnpackCanceled(t *testing.T) {
	testutil.RequireRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := mkTar(t, sized("big", 8<<20))
	r := &cancelAt{r: bytes.NewReader(b), at: 4 << 20, cancel: cancel}
	_, err := Unpack(ctx, r, newLayer(t), Limits{}, DefaultEpoch)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if _, ok := AsRefusal(err); ok {
		t.Errorf("a canceled unpack is a refusal: %v", err)
	}
}

// cancelAt reads r, calling cancel once at bytes were read.
type cancelAt struct {
	r      io.Reader
	n, at  int
	cancel func()
}

func (c *cancelAt) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	if c.n >= c.at {
		c.cancel()
	}
	return n, err
}

// TestUnpackInputError: an error of the input reader itself (the
// request's body) is the caller's to see, wrapped, not a refusal.
func TestUnpackInputError(t *testing.T) {
	testutil.RequireRoot(t)
	boom := errors.New("connection reset")
	r := io.MultiReader(bytes.NewReader(mkTar(t, sized("f", 5000))[:2048]), &failing{boom})
	_, err := Unpack(context.Background(), r, newLayer(t), Limits{}, DefaultEpoch)
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want the input's", err)
	}
	if _, ok := AsRefusal(err); ok {
		t.Errorf("the input's error is a refusal: %v", err)
	}
}

type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }

// TestEntryName covers what archive/tar itself refuses before the
// normalizer sees it (a NUL byte) and the limits of names.
func TestEntryName(t *testing.T) {
	long := strings.Repeat("n", maxNameBytes+1)
	deep := strings.Repeat("d/", maxDepth) + "f"
	for _, name := range []string{"a\x00b", "", "/a", "a/../b", long, "x/" + long, deep, strings.Repeat("abcdefg/", 600)} {
		if _, err := entryName(name, false); err == nil {
			t.Errorf("entryName(%.40q) accepted", name)
		}
	}
	for name, want := range map[string]string{"./a": "a", "a": "a", ".": "", "./": "", "..a": "..a", strings.Repeat("d/", maxDepth-1) + "f": strings.Repeat("d/", maxDepth-1) + "f"} {
		if got, err := entryName(name, true); err != nil || got != want {
			t.Errorf("entryName(%.40q) = %.40q, %v", name, got, err)
		}
	}
}

func TestExtractErr(t *testing.T) {
	for err, reason := range map[error]string{
		fmt.Errorf("%w: entry %q: x", fstree.ErrHostile, "a"): api.ReasonSourceBadPath,
		fmt.Errorf("%w: entries", fstree.ErrLimit):            api.ReasonSourceTooLarge,
		fmt.Errorf("%w: tar", fstree.ErrTruncated):            api.ReasonSourceUnreadable,
	} {
		if r, ok := AsRefusal(extractErr(err)); !ok || r.Reason != reason {
			t.Errorf("extractErr(%v) = %v, want %s", err, extractErr(err), reason)
		}
	}
	disk := fmt.Errorf("write: %w", unix.ENOSPC)
	if err := extractErr(disk); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("extractErr(%v) = %v, want it wrapped", disk, err)
	}
}

// FuzzUnpack: whatever the input, Unpack does not panic, writes nothing
// outside the layer, leaves no symlink pointing out of the tree, and
// fails only with a Refusal.
func FuzzUnpack(f *testing.F) {
	for _, c := range unpackCases(f) {
		for _, b := range [][]byte{c.bad, c.ok} {
			if len(b) <= 64<<10 { // large inputs only slow the mutator
				f.Add(b)
			}
		}
	}
	lim := Limits{MaxFiles: 64, MaxFileBytes: 1 << 20, MaxTotalBytes: 4 << 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		testutil.RequireRoot(t)
		base := t.TempDir()
		layer := filepath.Join(base, "outer", "layer")
		if err := os.MkdirAll(layer, 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := Unpack(context.Background(), bytes.NewReader(b), layer, lim, DefaultEpoch)
		if _, ok := AsRefusal(err); err != nil && !ok {
			t.Fatalf("error %v: neither nil nor a refusal", err)
		}
		src := filepath.Join(layer, "src")
		err = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != base && p != filepath.Dir(layer) && p != layer && !strings.HasPrefix(p, layer+"/") {
				t.Errorf("%s: written outside the layer", p)
			}
			if d.Type()&fs.ModeSymlink != 0 {
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(src, filepath.Dir(p))
				if j := path.Join(rel, target); strings.HasPrefix(target, "/") || j == ".." || strings.HasPrefix(j, "../") {
					t.Errorf("%s: symlink to %q leaves the tree", p, target)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkUnpack unpacks a source of 2000 files of 4 KiB in 100
// directories (8 MiB, gzip).
func BenchmarkUnpack(b *testing.B) {
	testutil.RequireRoot(b)
	var ents []ent
	body := strings.Repeat("int x = 42; /* some C */\n", 164)[:4096]
	for i := range 2000 {
		ents = append(ents, file(fmt.Sprintf("pkg%02d/file%04d.c", i%100, i), body))
	}
	src := gzipped(mkTar(b, ents...))
	b.SetBytes(2000 * 4096)
	for b.Loop() {
		b.StopTimer()
		layer := newLayer(b)
		b.StartTimer()
		if _, err := Unpack(context.Background(), bytes.NewReader(src), layer, Limits{}, DefaultEpoch); err != nil {
			b.Fatal(err)
		}
	}
}
