package build

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// Source describes a source package Unpack wrote.
type Source struct {
	// Digest is the fstree digest of the normalized tree ("sha256:" and
	// hex): the same tree gives the same digest however it was packed.
	Digest string
	// Files counts the tree's entries (files, directories, symlinks,
	// hardlinks, and the parent directories the tar did not list), not
	// its root.
	Files int
	// Bytes adds up the regular files' sizes (a hardlink counts none).
	Bytes int64
	// Stripped counts entries whose setuid/setgid bits were removed.
	Stripped int
}

// The owner of every entry of the normalized source: the build's user.
const (
	SourceUID = 1000
	SourceGID = 1000
)

// Bounds of names, as Linux has them (NAME_MAX, PATH_MAX less the NUL),
// and of the depth of paths (fstree's default).
const (
	maxNameBytes = 255
	maxPathBytes = 4095
	maxDepth     = 256
)

// Bounds of the parts of the input that are not entries of the tree.
const (
	// maxSkippedHeaders: root entries and PAX global headers, dropped.
	maxSkippedHeaders = 64
	// maxTrailing: bytes after the tar archive's end (record padding).
	maxTrailing = 1 << 20
)

// pathKey identifies a path of the tree: a hostile package's names may
// be 4 KiB each, and compress well; what the normalizer keeps of each is
// 16 bytes.
type pathKey [16]byte

// keyOf is the key of path p.
func keyOf(p string) pathKey {
	sum := sha256.Sum256([]byte(p))
	return pathKey(sum[:16])
}

// kind is the type of a path of the normalized tree.
type kind uint8

const (
	kindDir      kind = iota + 1 // listed by the tar
	kindImplicit                 // a parent the tar did not list (yet)
	kindFile                     // a regular file or a hardlink to one
	kindSymlink
)

// normalizer reads a source tar and writes the normalized tar: it checks
// every header before writing anything of it (see Unpack).
type normalizer struct {
	lim   Limits
	mtime time.Time
	src   *Source
	paths map[pathKey]kind // every path of the tree but the root
	// skipped counts the headers dropped (root entries, PAX global
	// headers).
	skipped int
	// in records the first error of the input reader itself (not of its
	// format): the transport's or the host's, never a refusal.
	in  inputReader
	buf []byte // copyData's
}

// inputReader is the source reader, remembering its first error other
// than io.EOF.
type inputReader struct {
	r   io.Reader
	err error
}

func (r *inputReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF && r.err == nil {
		r.err = err
	}
	return n, err
}

// endReader tells whether a read found nothing left: the tar reader
// asked for more than the stream holds (it reads the end-of-archive
// marker without reading past it).
type endReader struct {
	r     io.Reader
	short bool
}

func (r *endReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n == 0 && err == io.EOF && len(p) > 0 {
		r.short = true
	}
	return n, err
}

// newNormalizer returns a normalizer of lim's caps (complete: see
// Limits.Or) and the epoch.
func newNormalizer(lim Limits, epoch int64) *normalizer {
	return &normalizer{
		lim:   lim,
		mtime: time.Unix(epoch, 0),
		src:   &Source{},
		paths: make(map[pathKey]kind),
	}
}

// run normalizes the tar stream r (plain or gzip) into w. Its errors are
// *Refusal for what the input holds, or wrap the error of r, of w or of
// ctx.
func (n *normalizer) run(ctx context.Context, r io.Reader, w io.Writer) error {
	n.in.r = r
	br := bufio.NewReaderSize(&n.in, 64<<10)
	var in io.Reader = br
	magic, err := br.Peek(2)
	switch {
	case len(magic) == 0 && err == io.EOF:
		return refuse(api.ReasonSourceUnreadable, "the source is empty: not a tar archive")
	case len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return n.readErr("gzip", err)
		}
		in = zr
	}
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(n.dirHeader("./", 0o755)); err != nil {
		return fmt.Errorf("write the normalized source: %w", err)
	}
	end := &endReader{r: in}
	tr := tar.NewReader(end)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF && end.short {
			// archive/tar takes a stream that ends between two entries
			// for the end of the archive: not a truncated source.
			return refuse(api.ReasonSourceUnreadable, "tar: truncated (no end-of-archive marker)")
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n.readErr("tar", err)
		}
		if err := n.entry(ctx, hdr, tr, tw); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write the normalized source: %w", err)
	}
	// Read to the end: a gzip stream's checksum is checked there, and the
	// input must hold nothing but padding after the archive.
	m, err := io.CopyN(io.Discard, in, maxTrailing+1)
	if err != nil && err != io.EOF {
		return n.readErr("after the end of the tar archive", err)
	}
	if m > maxTrailing {
		return refuse(api.ReasonSourceUnreadable, "more than %d bytes after the end of the tar archive", maxTrailing)
	}
	return nil
}

// readErr is the error of reading the input: the input reader's own
// (wrapped as it is), or a refusal of its format.
func (n *normalizer) readErr(what string, err error) error {
	if n.in.err != nil {
		return fmt.Errorf("read the source: %w", n.in.err)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || what == "gzip" && errors.Is(err, io.EOF) {
		return refuse(api.ReasonSourceUnreadable, "%s: truncated", what)
	}
	return refuse(api.ReasonSourceUnreadable, "%s: %v", what, err)
}

// dirHeader is the normalized header of a directory (name ends in "/").
func (n *normalizer) dirHeader(name string, mode int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: SourceUID, Gid: SourceGID, ModTime: n.mtime}
}

// entry checks one header of the input and writes its normalized form
// (with the parent directories the input did not list) to tw.
func (n *normalizer) entry(ctx context.Context, hdr *tar.Header, r io.Reader, tw *tar.Writer) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return n.skip()
	}
	isDir := hdr.Typeflag == tar.TypeDir
	rel, err := entryName(hdr.Name, isDir)
	if err != nil {
		return refuse(api.ReasonSourceBadPath, "entry %s: %v", quote(hdr.Name), err)
	}
	if rel == "" {
		if !isDir {
			return refuse(api.ReasonSourceBadPath, "entry %s: the root of the tree is not a directory", quote(hdr.Name))
		}
		return n.skip()
	}
	out := &tar.Header{Name: rel, Uid: SourceUID, Gid: SourceGID, ModTime: n.mtime}
	k := kindFile
	switch hdr.Typeflag {
	case tar.TypeDir:
		out.Typeflag, out.Name, out.Mode, k = tar.TypeDir, rel+"/", n.mode(hdr), kindDir
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		out.Typeflag, out.Size, out.Mode = tar.TypeReg, hdr.Size, n.mode(hdr)
	case tar.TypeSymlink:
		if err := symlinkTarget(rel, hdr.Linkname); err != nil {
			return refuse(api.ReasonSourceBadPath, "symlink %s: %v", quote(rel), err)
		}
		out.Typeflag, out.Linkname, out.Mode, k = tar.TypeSymlink, hdr.Linkname, 0o777, kindSymlink
	case tar.TypeLink:
		target, err := entryName(hdr.Linkname, false)
		if err == nil && n.paths[keyOf(target)] != kindFile {
			err = errors.New("not a regular file listed earlier")
		}
		if err != nil {
			return refuse(api.ReasonSourceBadPath, "hardlink %s to %s: %v", quote(rel), quote(hdr.Linkname), err)
		}
		out.Typeflag, out.Linkname, out.Mode = tar.TypeLink, target, 0
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return refuse(api.ReasonSourceBadType, "entry %s: a %s", quote(rel), typeName(hdr.Typeflag))
	default:
		return refuse(api.ReasonSourceBadType, "entry %s: type %s is not a file, directory or link", quote(rel), quote(string(hdr.Typeflag)))
	}
	if err := n.place(rel, k, out, tw); err != nil {
		return err
	}
	if out.Typeflag == tar.TypeReg {
		return n.copyData(ctx, tw, r, out.Size)
	}
	return nil
}

// mode is the permission bits of a file or directory, less the setuid
// and setgid bits (counted in Stripped).
func (n *normalizer) mode(hdr *tar.Header) int64 {
	m := hdr.Mode & 0o7777
	if m&0o6000 != 0 {
		m &^= 0o6000
		n.src.Stripped++
	}
	return m
}

// place checks a new path of kind k (not listed before, beneath
// directories only, within max_files counting the parents the input did
// not list, and for a regular file within the sizes), then writes the
// headers of those parents and hdr.
func (n *normalizer) place(rel string, k kind, hdr *tar.Header, tw *tar.Writer) error {
	key := keyOf(rel)
	switch prev := n.paths[key]; {
	case prev == kindImplicit && k == kindDir:
		n.paths[key] = kindDir // listed after its contents: its mode applies
		return writeHeader(tw, hdr)
	case prev != 0:
		return refuse(api.ReasonSourceBadPath, "entry %s: listed twice", quote(rel))
	}
	// The parents not seen yet, nearest first.
	var missing []string
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		pk := n.paths[keyOf(dir)]
		if pk == kindDir || pk == kindImplicit {
			break
		}
		if pk != 0 {
			return refuse(api.ReasonSourceBadPath, "entry %s: its parent %s is not a directory", quote(rel), quote(dir))
		}
		missing = append(missing, dir)
	}
	if len(missing)+1 > n.lim.MaxFiles-n.src.Files {
		return refuse(api.ReasonSourceTooManyFiles, "entry %s: more than max_files (%d) entries, counting the directories the tar does not list", quote(rel), n.lim.MaxFiles)
	}
	if hdr.Typeflag == tar.TypeReg {
		if hdr.Size > n.lim.MaxFileBytes {
			return refuse(api.ReasonSourceFileTooLarge, "file %s: %d bytes, above max_file_bytes (%d)", quote(rel), hdr.Size, n.lim.MaxFileBytes)
		}
		if hdr.Size > n.lim.MaxTotalBytes-n.src.Bytes {
			return refuse(api.ReasonSourceTooLarge, "file %s: the files add up to more than max_total_bytes (%d)", quote(rel), n.lim.MaxTotalBytes)
		}
		n.src.Bytes += hdr.Size
	}
	n.src.Files += len(missing) + 1
	for _, dir := range slices.Backward(missing) {
		n.paths[keyOf(dir)] = kindImplicit
		if err := writeHeader(tw, n.dirHeader(dir+"/", 0o755)); err != nil {
			return err
		}
	}
	n.paths[key] = k
	return writeHeader(tw, hdr)
}

// skip counts a header that is not an entry of the tree.
func (n *normalizer) skip() error {
	n.skipped++
	if n.skipped > maxSkippedHeaders {
		return refuse(api.ReasonSourceUnreadable, "more than %d root entries and global headers", maxSkippedHeaders)
	}
	return nil
}

// writeHeader writes a normalized header.
func writeHeader(tw *tar.Writer, hdr *tar.Header) error {
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write the normalized source: %w", err)
	}
	return nil
}

// copyData copies size bytes of a file's content from r to w, looking at
// ctx between chunks.
func (n *normalizer) copyData(ctx context.Context, w io.Writer, r io.Reader, size int64) error {
	if n.buf == nil {
		n.buf = make([]byte, 64<<10)
	}
	for size > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := io.ReadFull(r, n.buf[:min(size, int64(len(n.buf)))])
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return n.readErr("tar", err)
		}
		if _, err := w.Write(n.buf[:m]); err != nil {
			return fmt.Errorf("write the normalized source: %w", err)
		}
		size -= int64(m)
	}
	return nil
}

// entryName checks the name of an entry (or a hardlink's target) and
// returns it as a path relative to the tree's root ("" for the root): a
// leading "./" is dropped, a trailing "/" only on a directory; the rest
// must be clean, relative, without "..", at most 4095 bytes, 255 a name
// and 256 levels deep.
func entryName(name string, isDir bool) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("NUL byte in the name")
	}
	rel := strings.TrimPrefix(name, "./")
	switch {
	case name == "":
		return "", errors.New("empty name")
	case strings.HasPrefix(rel, "/"):
		return "", errors.New("absolute path")
	case isDir:
		rel = strings.TrimSuffix(rel, "/")
	case strings.HasSuffix(rel, "/"):
		return "", errors.New("a trailing \"/\" on what is not a directory")
	}
	switch {
	case rel == "" || rel == ".":
		return "", nil
	case rel == ".." || strings.HasPrefix(rel, "../") || strings.HasSuffix(rel, "/..") || strings.Contains(rel, "/../"):
		return "", errors.New(`".." in the path`)
	case path.Clean(rel) != rel:
		return "", errors.New("not a clean path")
	case len(rel) > maxPathBytes:
		return "", fmt.Errorf("longer than %d bytes", maxPathBytes)
	case strings.Count(rel, "/")+1 > maxDepth:
		return "", fmt.Errorf("deeper than %d levels", maxDepth)
	}
	for c := range strings.SplitSeq(rel, "/") {
		if len(c) > maxNameBytes {
			return "", fmt.Errorf("a name longer than %d bytes", maxNameBytes)
		}
	}
	return rel, nil
}

// symlinkTarget checks the target of symlink rel: relative, and inside the
// tree once joined to rel's directory (lexically: ".." may not climb
// above the root).
func symlinkTarget(rel, target string) error {
	switch {
	case target == "":
		return errors.New("empty target")
	case strings.IndexByte(target, 0) >= 0:
		return errors.New("NUL byte in the target")
	case len(target) > maxPathBytes:
		return fmt.Errorf("target longer than %d bytes", maxPathBytes)
	case strings.HasPrefix(target, "/"):
		return fmt.Errorf("absolute target %s", quote(target))
	}
	if j := path.Join(path.Dir(rel), target); j == ".." || strings.HasPrefix(j, "../") {
		return fmt.Errorf("target %s leaves the tree", quote(target))
	}
	return nil
}

// typeName names a special file's tar type.
func typeName(t byte) string {
	switch t {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "fifo"
	}
	return "special file"
}
