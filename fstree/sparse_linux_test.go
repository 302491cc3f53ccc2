package fstree

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// sparseFile is a test file: its apparent size and the data written at
// offsets; everything else is a hole.
type sparseFile struct {
	name string
	size int64
	data map[int64]string
}

// sparseCases are files with holes at the start, the end, between data,
// of nothing but holes, and none at all.
var sparseCases = []sparseFile{
	{name: "holes-both-ends", size: 1 << 30, data: map[int64]string{
		64 << 10: "first extent", 512 << 20: "middle extent", 1<<30 - 1<<20: "last extent"}},
	{name: "data-both-ends", size: 1 << 30, data: map[int64]string{0: "at the start", 1<<30 - 5: "tail!"}},
	{name: "only-holes", size: 1 << 30},
	{name: "empty", size: 0},
	{name: "dense", size: 3 * 4096, data: map[int64]string{0: string(bytes.Repeat([]byte("d"), 3*4096))}},
}

// mkSparse writes f beneath dir.
func mkSparse(t *testing.T, dir string, f sparseFile) {
	t.Helper()
	fh, err := os.OpenFile(filepath.Join(dir, f.name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	for off, s := range f.data {
		if _, err := fh.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := fh.Truncate(f.size); err != nil {
		t.Fatal(err)
	}
}

// allocated is what a file costs on disk: st_blocks * 512.
func allocated(t *testing.T, p string) int64 {
	t.Helper()
	st := lstat(t, p)
	return st.Blocks * 512
}

// sameContent compares two files byte for byte, in chunks.
func sameContent(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 4<<20), make([]byte, 4<<20)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if ea != nil || eb != nil {
			return (ea == io.EOF || ea == io.ErrUnexpectedEOF) && (eb == io.EOF || eb == io.ErrUnexpectedEOF)
		}
	}
}

// dataAt reads the file p at the offsets of data.
func dataAt(t *testing.T, p string, data map[int64]string) map[int64]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[int64]string{}
	for off, s := range data {
		b := make([]byte, len(s))
		n, _ := f.ReadAt(b, off)
		got[off] = string(b[:n])
	}
	return got
}

// TestCopyDirSparse: holes are kept. A 1 GiB file with a few data extents
// costs a few blocks in the copy (a copy through io.Copy would cost its
// whole apparent size), reads back identical, and digests as the same
// content written densely would.
func TestCopyDirSparse(t *testing.T) {
	requireRoot(t)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	var apparent int64
	for _, f := range sparseCases {
		mkSparse(t, src, f)
		apparent += f.size
	}
	// Control: the source files are what the test claims (1 GiB apparent,
	// a few blocks), so the copy's figures below mean something.
	for _, f := range sparseCases {
		p := filepath.Join(src, f.name)
		if st := lstat(t, p); st.Size != f.size {
			t.Fatalf("control: %s has size %d, want %d", f.name, st.Size, f.size)
		}
		if f.size >= 1<<30 && allocated(t, p) > 1<<20 {
			t.Skipf("the test filesystem does not keep holes: %s costs %d bytes", f.name, allocated(t, p))
		}
	}
	dst, _, check := confined(t)
	st, err := CopyDir(context.Background(), src, dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	check()
	var cost int64
	for _, f := range sparseCases {
		p, q := filepath.Join(src, f.name), filepath.Join(dst, f.name)
		dstSt := lstat(t, q)
		if dstSt.Size != f.size {
			t.Errorf("%s: copy has size %d, want %d", f.name, dstSt.Size, f.size)
		}
		// A dense copy would allocate the whole apparent size (rounded to
		// blocks); a sparse one at most the source's data, a few blocks.
		srcCost, dstCost := allocated(t, p), allocated(t, q)
		cost += dstCost
		t.Logf("%s: apparent %d bytes, source %d bytes on disk, copy %d bytes on disk", f.name, f.size, srcCost, dstCost)
		if dstCost > srcCost+64<<10 {
			t.Errorf("%s: the copy costs %d bytes on disk for %d in the source (apparent size %d): holes were filled", f.name, dstCost, srcCost, f.size)
		}
		// Byte for byte for the main case (reading 1 GiB of holes costs
		// seconds); the data at its offsets for the others, whose
		// content the digests below compare in full.
		if f.name == "holes-both-ends" && !sameContent(t, p, q) {
			t.Errorf("%s: content differs", f.name)
		}
		if got := dataAt(t, q, f.data); !reflect.DeepEqual(got, f.data) && len(f.data) > 0 {
			t.Errorf("%s: data %v, want %v", f.name, got, f.data)
		}
	}
	if cost > 4<<20 {
		t.Errorf("the copy of %d apparent bytes costs %d bytes on disk", apparent, cost)
	}
	if st.Bytes != apparent {
		t.Errorf("Stats.Bytes = %d, want the apparent size %d", st.Bytes, apparent)
	}
	// The digest is of the content: the same as the source tree's (which
	// TreeDigest reads without writing anything) and as the copy's.
	for _, tree := range []string{src, dst} {
		d, err := TreeDigest(tree)
		if err != nil {
			t.Fatal(err)
		}
		if d != st.Digest {
			t.Errorf("TreeDigest(%s) = %s, CopyDir's digest %s", tree, d, st.Digest)
		}
	}
}

// TestCopyDirSparseDigest: a file with holes digests as the same bytes
// written densely (zeros written explicitly), so a layer's name does not
// depend on how its files were laid out on disk.
func TestCopyDirSparseDigest(t *testing.T) {
	requireRoot(t)
	sparse, dense := filepath.Join(t.TempDir(), "s"), filepath.Join(t.TempDir(), "d")
	for _, d := range []string{sparse, dense} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const size = 3<<20 + 17
	mkSparse(t, sparse, sparseFile{name: "f", size: size, data: map[int64]string{1 << 20: "x", size - 1: "y"}})
	buf := make([]byte, size)
	buf[1<<20], buf[size-1] = 'x', 'y'
	if err := os.WriteFile(filepath.Join(dense, "f"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{sparse, dense} {
		ts := []unix.Timespec{{Sec: 1e9}, {Sec: 1e9}}
		for _, p := range []string{filepath.Join(d, "f"), d} {
			if err := unix.UtimesNano(p, ts); err != nil {
				t.Fatal(err)
			}
		}
	}
	var digests []string
	for _, d := range []string{sparse, dense} {
		dst, _, _ := confined(t)
		st, err := CopyDir(context.Background(), d, dst, Options{})
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, st.Digest)
	}
	if digests[0] != digests[1] {
		t.Fatalf("same content, sparse digest %s, dense digest %s", digests[0], digests[1])
	}
}

// du is what the tree at root allocates on disk: st_blocks × 512 of every
// entry, a file with several links once.
func du(t *testing.T, root string) int64 {
	t.Helper()
	var total int64
	seen := map[uint64]bool{}
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := lstat(t, p)
		if !seen[st.Ino] {
			seen[st.Ino] = true
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// TestCopyDirDiskLimit: Stats.DiskBytes is what the copy allocates (as du
// counts it), and MaxDiskBytes bounds it, not the apparent size: 1 GiB of
// holes fits in 1 MiB, 2 MiB of data does not, and the refusal is
// ErrDiskLimit (an ErrLimit).
func TestCopyDirDiskLimit(t *testing.T) {
	requireRoot(t)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(filepath.Join(src, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	mkSparse(t, src, sparseCases[0])
	if err := os.Symlink("holes-both-ends", filepath.Join(src, "d/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(src, "holes-both-ends"), filepath.Join(src, "d/hard")); err != nil {
		t.Fatal(err)
	}
	dst, _, check := confined(t)
	st, err := CopyDir(context.Background(), src, dst, Options{Limits: Limits{MaxDiskBytes: 1 << 20}})
	if err != nil {
		t.Fatalf("1 GiB of holes under a 1 MiB disk limit: %v", err)
	}
	check()
	if got := du(t, dst); st.DiskBytes != got || got == 0 {
		t.Errorf("Stats.DiskBytes = %d, du of the copy = %d", st.DiskBytes, got)
	}
	if st.Bytes != 1<<30 {
		t.Errorf("Stats.Bytes = %d, want the apparent size %d", st.Bytes, 1<<30)
	}

	if err := os.WriteFile(filepath.Join(src, "d/dense"), bytes.Repeat([]byte("x"), 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dst2, _, _ := confined(t)
	_, err = CopyDir(context.Background(), src, dst2, Options{Limits: Limits{MaxDiskBytes: 1 << 20}})
	if !errors.Is(err, ErrDiskLimit) || !errors.Is(err, ErrLimit) {
		t.Fatalf("2 MiB of data under a 1 MiB disk limit: %v, want ErrDiskLimit", err)
	}
	if !strings.Contains(err.Error(), `"d/dense"`) {
		t.Errorf("the error does not name the entry: %v", err)
	}
	if got := du(t, dst2); got > 1<<20+64<<10 {
		t.Errorf("the refused copy allocated %d bytes, past its limit", got)
	}
}
