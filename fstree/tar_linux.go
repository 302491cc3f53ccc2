package fstree

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// OCI whiteout names (the AUFS convention of the image spec).
const (
	whPrefix    = ".wh."
	whOpaque    = ".wh..wh..opq"
	whMetaInfix = ".wh..wh." // AUFS bookkeeping (.wh..wh.plnk, ...), never extracted
)

// trailingAllowance is how much data past the end of a tar archive (record
// padding) is read, beyond what is left of MaxBytes, before it is refused.
const trailingAllowance = 1 << 20

// ExtractTar extracts the tar stream r (plain or gzip-compressed, detected
// by content) into dst, an existing empty directory.
//
// Entry names are confined to dst: a leading "/" or "./" is stripped, ".."
// is resolved lexically and refused where it would leave dst, and an empty
// name or one with a NUL byte is refused. An entry whose parent is a symlink
// is refused; symlink targets are written verbatim and never followed.
// Hardlinks must name a regular file already beneath dst. A later entry
// for an existing path replaces it, except that a non-empty directory
// cannot be replaced by a non-directory; a directory over a directory only
// updates its metadata. An entry for the root itself (".", "./", "/") sets
// dst's metadata; without one, dst gets mode 0755, owner MapID(0, 0) and
// mtime 0, as do parent directories the archive does not list.
//
// The Digest in Stats is computed by walking the result (TreeDigest).
func ExtractTar(ctx context.Context, r io.Reader, dst string, opt Options) (*Stats, error) {
	w, err := newWriter(ctx, dst, opt)
	if err != nil {
		return nil, err
	}
	defer w.close()
	x, err := newExtractor(w, false)
	if err != nil {
		return nil, err
	}
	src, err := decompress(r)
	if err != nil {
		return nil, err
	}
	if err := x.apply(src); err != nil {
		return nil, err
	}
	return x.finish()
}

// decompress returns r, or a gzip reader of it if it starts with gzip's
// magic number.
func decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(2)
	if err != nil || magic[0] != 0x1f || magic[1] != 0x8b {
		return br, nil // short or not gzip: the tar reader has the last word
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, streamErr("gzip", err)
	}
	return zr, nil
}

// streamErr wraps an error of the tar or compressed stream itself, telling a
// truncated stream apart.
func streamErr(what string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || (what == "gzip" && errors.Is(err, io.EOF)) {
		return fmt.Errorf("%w: %s: %w", ErrTruncated, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// extractor applies tar entries to a writer. In OCI mode it applies image
// layers: ".wh." entries are whiteouts of lower layers, and a later layer
// may replace a non-empty directory of an earlier one.
type extractor struct {
	w         *writer
	oci       bool
	rootOwner [2]uint32       // MapID(0, 0), owner of implicit directories
	dirs      map[string]meta // directory metadata, applied by finish
	layer     map[string]bool // OCI mode: paths the current layer wrote, and their parents
}

// newExtractor returns an extractor writing through w.
func newExtractor(w *writer, oci bool) (*extractor, error) {
	uid, gid, err := w.owner(".", 0, 0)
	if err != nil {
		return nil, err
	}
	x := &extractor{
		w:         w,
		oci:       oci,
		rootOwner: [2]uint32{uid, gid},
		dirs:      make(map[string]meta),
		layer:     make(map[string]bool),
	}
	x.dirs[""] = x.implicitDir()
	return x, nil
}

// implicitDir is the metadata of a directory the archive does not list.
func (x *extractor) implicitDir() meta {
	return meta{mode: 0o755, uid: x.rootOwner[0], gid: x.rootOwner[1]}
}

// startLayer begins a new OCI layer.
func (x *extractor) startLayer() {
	clear(x.layer)
}

// apply extracts every entry of the tar stream r, then reads r to its end
// (so that a compressed stream's checksum is verified).
func (x *extractor) apply(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		if err := x.w.canceled(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return streamErr("tar", err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
	}
	return x.drain(r)
}

// drain reads what follows the end of the archive, refusing more than
// record padding can explain once MaxBytes is used up.
func (x *extractor) drain(r io.Reader) error {
	// Saturated: MaxBytes may be math.MaxInt64 (no limit).
	allow := min(max(x.w.lim.MaxBytes-x.w.stats.Bytes, 0), math.MaxInt64-trailingAllowance-1) + trailingAllowance
	n, err := io.CopyN(io.Discard, r, allow+1)
	if err != nil && err != io.EOF {
		return streamErr("after the end of the tar archive", err)
	}
	if n > allow {
		return fmt.Errorf("%w: more than %d bytes of trailing data after the tar archive", ErrLimit, allow)
	}
	return nil
}

// headerStat describes a tar header as an lstat would, for Filter and Seen.
func headerStat(hdr *tar.Header) (*unix.Stat_t, error) {
	if hdr.Uid < 0 || hdr.Uid > math.MaxUint32 || hdr.Gid < 0 || hdr.Gid > math.MaxUint32 {
		return nil, fmt.Errorf("owner %d:%d out of range", hdr.Uid, hdr.Gid)
	}
	if hdr.Devmajor < 0 || hdr.Devmajor > math.MaxUint32 || hdr.Devminor < 0 || hdr.Devminor > math.MaxUint32 {
		return nil, fmt.Errorf("device %d:%d out of range", hdr.Devmajor, hdr.Devminor)
	}
	if hdr.Size < 0 {
		return nil, fmt.Errorf("negative size %d", hdr.Size)
	}
	typ := uint32(unix.S_IFREG)
	switch hdr.Typeflag {
	case tar.TypeDir:
		typ = unix.S_IFDIR
	case tar.TypeSymlink:
		typ = unix.S_IFLNK
	case tar.TypeChar:
		typ = unix.S_IFCHR
	case tar.TypeBlock:
		typ = unix.S_IFBLK
	case tar.TypeFifo:
		typ = unix.S_IFIFO
	}
	mt := timespec(hdr)
	return &unix.Stat_t{
		Mode:  typ | uint32(hdr.Mode&0o7777),
		Uid:   uint32(hdr.Uid),
		Gid:   uint32(hdr.Gid),
		Size:  hdr.Size,
		Nlink: 1,
		Rdev:  unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)),
		Mtim:  mt,
		Atim:  mt,
		Ctim:  mt,
	}, nil
}

// timespec is a header's modification time.
func timespec(hdr *tar.Header) unix.Timespec {
	return unix.Timespec{Sec: hdr.ModTime.Unix(), Nsec: int64(hdr.ModTime.Nanosecond())}
}

// paxOpaque tells whether a directory header carries an overlay opaque
// marker as a PAX xattr record.
func paxOpaque(hdr *tar.Header) bool {
	for _, attr := range []string{trustedOpaqueXattr, opaqueXattr} {
		if hdr.PAXRecords["SCHILY.xattr."+attr] == "y" {
			return true
		}
	}
	return false
}

// entry applies one tar entry; r reads its content.
func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	w := x.w
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // PAX global header: nothing to write
	}
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return hostile(hdr.Name, "%v", err)
	}
	if err := w.addEntry(hdr.Name); err != nil {
		return err
	}
	if err := w.checkDepth(rel); err != nil {
		return err
	}
	st, err := headerStat(hdr)
	if err != nil {
		return hostile(hdr.Name, "%v", err)
	}
	if rel == "" {
		return x.root(hdr)
	}
	if w.opt.Seen != nil {
		w.opt.Seen(rel, st)
	}
	if x.oci && strings.Contains(rel, whPrefix) {
		if done, err := x.ociWhiteout(rel); done || err != nil {
			return err
		}
	}
	if hdr.Typeflag != tar.TypeDir && w.opt.Filter != nil && !w.opt.Filter(rel, st) {
		return nil
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.dir(rel, hdr)
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		return x.file(rel, hdr, r)
	case tar.TypeSymlink:
		return x.symlink(rel, hdr)
	case tar.TypeLink:
		if !w.asCaller {
			return x.hardlink(rel, hdr)
		}
	case tar.TypeChar:
		if w.opt.Overlay && hdr.Devmajor == 0 && hdr.Devminor == 0 {
			return x.whiteout(rel, hdr)
		}
	}
	// Devices, fifos, unknown types; hardlinks in a copy as the caller.
	w.skip(rel, fmt.Sprintf("type %q is not copied", hdr.Typeflag))
	return nil
}

// root applies an entry naming the root itself.
func (x *extractor) root(hdr *tar.Header) error {
	if hdr.Typeflag != tar.TypeDir {
		return hostile(hdr.Name, "the root can only be a directory")
	}
	m, err := x.meta(".", hdr)
	if err != nil {
		return err
	}
	m.mode = uint32(hdr.Mode) & 0o7777
	m.opaque = x.w.opt.Overlay && paxOpaque(hdr)
	x.dirs[""] = m
	return nil
}

// meta is the mapped metadata of a header (mode left to the caller).
func (x *extractor) meta(rel string, hdr *tar.Header) (meta, error) {
	uid, gid, err := x.w.owner(rel, uint32(hdr.Uid), uint32(hdr.Gid))
	if err != nil {
		return meta{}, err
	}
	return meta{uid: uid, gid: gid, mtime: timespec(hdr)}, nil
}

// mark records, in OCI mode, that the current layer wrote rel (and so holds
// its parents).
func (x *extractor) mark(rel string) {
	if !x.oci {
		return
	}
	for rel != "" && !x.layer[rel] {
		x.layer[rel] = true
		rel, _ = splitRel(rel)
	}
}

// parent opens the parent directory dir of entry rel, creating missing
// directories (0700, metadata applied by finish; asCaller: 0755 less the
// umask).
func (x *extractor) parent(rel, dir string) (int, error) {
	fd, err := openDir(x.w.root, dir)
	if err == nil {
		return fd, nil
	}
	if err != unix.ENOENT {
		return -1, walkError(x.w.root, dir, rel, err)
	}
	if fd, err = openDir(x.w.root, ""); err != nil {
		return -1, fmt.Errorf("open destination: %w", err)
	}
	p := ""
	for _, c := range strings.Split(dir, "/") {
		p = joinRel(p, c)
		nfd, err := openDir(fd, c)
		if err == unix.ENOENT {
			if err = x.w.addEntry(p); err != nil {
				unix.Close(fd)
				return -1, err
			}
			mode := uint32(0o700) // 0755 once finished
			if x.w.asCaller {
				mode = 0o755 // less the umask, for good
			}
			if err = unix.Mkdirat(fd, c, mode); err != nil {
				unix.Close(fd)
				return -1, fmt.Errorf("entry %q: mkdir %q: %w", rel, p, err)
			}
			if !x.w.asCaller {
				x.dirs[p] = x.implicitDir()
			}
			x.w.stats.Dirs++
			x.w.stats.Entries++
			x.mark(p)
			nfd, err = openDir(fd, c)
		}
		unix.Close(fd)
		if err != nil {
			return -1, walkError(x.w.root, p, rel, err)
		}
		fd = nfd
	}
	return fd, nil
}

// prepare opens the parent of entry rel and makes room for it: an existing
// non-directory is unlinked, an empty directory removed; a non-empty
// directory is refused, unless an earlier OCI layer wrote it (then it is
// removed with its contents). A directory entry over a directory keeps it:
// exists reports that case.
func (x *extractor) prepare(rel string, isDir bool) (pfd int, base string, exists bool, err error) {
	dir, base := splitRel(rel)
	if pfd, err = x.parent(rel, dir); err != nil {
		return -1, "", false, err
	}
	defer func() {
		if err != nil {
			unix.Close(pfd)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return pfd, base, false, nil
		}
		return -1, "", false, fmt.Errorf("entry %q: stat: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(pfd, base, 0); err != nil {
			return -1, "", false, fmt.Errorf("entry %q: unlink: %w", rel, err)
		}
		return pfd, base, false, nil
	}
	if isDir {
		return pfd, base, true, nil
	}
	err = unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
	if err == unix.ENOTEMPTY || err == unix.EEXIST {
		if !x.oci || x.layer[rel] {
			return -1, "", false, hostile(rel, "replaces a non-empty directory")
		}
		err = removeAllAt(pfd, base, 0)
	}
	if err != nil {
		return -1, "", false, fmt.Errorf("entry %q: remove directory: %w", rel, err)
	}
	return pfd, base, false, nil
}

// dir applies a directory entry.
func (x *extractor) dir(rel string, hdr *tar.Header) error {
	m, err := x.meta(rel, hdr)
	if err != nil {
		return err
	}
	m.mode = uint32(hdr.Mode) & 0o7777
	m.opaque = x.w.opt.Overlay && paxOpaque(hdr)
	pfd, base, exists, err := x.prepare(rel, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if !exists {
		// Metadata applied by finish; as the caller, the mode is final
		// (less the umask) and keeps the directory writable.
		mode := uint32(0o700)
		if x.w.asCaller {
			mode |= m.mode & 0o777
		}
		if err := unix.Mkdirat(pfd, base, mode); err != nil {
			return fmt.Errorf("entry %q: mkdir: %w", rel, err)
		}
		x.w.stats.Dirs++
		x.w.stats.Entries++
	}
	if x.w.asCaller {
		x.mark(rel)
		return nil // a directory that was there is kept as it is
	}
	x.dirs[rel] = m
	x.mark(rel)
	return nil
}

// file applies a regular file entry, reading its content from r.
func (x *extractor) file(rel string, hdr *tar.Header, r io.Reader) error {
	if err := x.w.budget(rel, hdr.Size); err != nil {
		return err
	}
	m, err := x.meta(rel, hdr)
	if err != nil {
		return err
	}
	pfd, base, _, err := x.prepare(rel, false)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if x.w.asCaller {
		m.mode = uint32(hdr.Mode) & 0o777
	} else {
		m.mode = x.w.fileMode(uint32(hdr.Mode))
	}
	if _, err := x.w.createFile(pfd, base, rel, r, m, nil, nil); err != nil {
		return err
	}
	x.w.stats.Files++
	x.w.stats.Entries++
	x.mark(rel)
	return nil
}

// symlink applies a symlink entry; its target is written verbatim.
func (x *extractor) symlink(rel string, hdr *tar.Header) error {
	if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
		return hostile(rel, "invalid symlink target %q", hdr.Linkname)
	}
	m, err := x.meta(rel, hdr)
	if err != nil {
		return err
	}
	pfd, base, _, err := x.prepare(rel, false)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if x.w.asCaller {
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return fmt.Errorf("entry %q: symlink: %w", rel, err)
		}
	} else if err := createSymlink(pfd, base, rel, hdr.Linkname, m); err != nil {
		return err
	}
	x.w.stats.Symlinks++
	x.w.stats.Entries++
	x.mark(rel)
	return nil
}

// hardlink applies a hardlink entry: its target must be a regular file
// beneath the destination, reached without crossing a symlink.
func (x *extractor) hardlink(rel string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return hostile(rel, "hardlink target %q: %v", hdr.Linkname, err)
	}
	switch target {
	case "":
		return hostile(rel, "hardlink to the root")
	case rel:
		return hostile(rel, "hardlink to itself")
	}
	pfd, base, _, err := x.prepare(rel, false)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	tdir, tbase := splitRel(target)
	tfd, err := openDir(x.w.root, tdir)
	if err == unix.ENOENT {
		return hostile(rel, "hardlink target %q does not exist beneath the destination", hdr.Linkname)
	}
	if err != nil {
		return fmt.Errorf("hardlink target %q: %w", hdr.Linkname, walkError(x.w.root, tdir, rel, err))
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return hostile(rel, "hardlink target %q does not exist beneath the destination", hdr.Linkname)
		}
		return fmt.Errorf("entry %q: stat hardlink target %q: %w", rel, hdr.Linkname, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return hostile(rel, "hardlink target %q is not a regular file", hdr.Linkname)
	}
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return fmt.Errorf("entry %q: link to %q: %w", rel, hdr.Linkname, err)
	}
	x.w.stats.Hardlinks++
	x.w.stats.Entries++
	x.mark(rel)
	return nil
}

// whiteout applies, in Overlay mode, a 0/0 character device entry (owned
// by 0:0, see Options.Overlay).
func (x *extractor) whiteout(rel string, hdr *tar.Header) error {
	m := meta{mtime: timespec(hdr)}
	pfd, base, _, err := x.prepare(rel, false)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := createWhiteout(pfd, base, rel, m); err != nil {
		return err
	}
	x.w.stats.Entries++
	x.mark(rel)
	return nil
}

// ociWhiteout handles, in OCI mode, an entry with ".wh." in its path.
// done reports that the entry was consumed: a whiteout (applied, never
// written) or AUFS bookkeeping (ignored).
func (x *extractor) ociWhiteout(rel string) (done bool, err error) {
	dir, base := splitRel(rel)
	if base == whOpaque {
		return true, x.opaque(rel, dir)
	}
	if strings.HasPrefix(base, whMetaInfix) || strings.Contains("/"+dir, "/"+whMetaInfix) {
		return true, nil
	}
	if !strings.HasPrefix(base, whPrefix) {
		return false, nil
	}
	name := base[len(whPrefix):]
	if name == "" || name == "." || name == ".." {
		return true, hostile(rel, "invalid whiteout")
	}
	target := joinRel(dir, name)
	if x.layer[target] {
		return true, nil // a whiteout hides lower layers only
	}
	pfd, err := openDir(x.w.root, dir)
	if err == unix.ENOENT {
		return true, nil // nothing below to hide
	}
	if err == unix.ENOTDIR {
		if _, symlink, _ := badComponent(x.w.root, dir); !symlink {
			return true, nil // a lower file where the layer has a directory: nothing below
		}
	}
	if err != nil {
		return true, walkError(x.w.root, dir, rel, err)
	}
	defer unix.Close(pfd)
	if err := removeAllAt(pfd, name, 0); err != nil {
		return true, fmt.Errorf("entry %q: whiteout: %w", rel, err)
	}
	return true, nil
}

// opaque applies, in OCI mode, an opaque whiteout of directory dir: every
// entry beneath it that the current layer did not write is removed.
func (x *extractor) opaque(rel, dir string) error {
	fd, err := openDir(x.w.root, dir)
	if err == unix.ENOENT {
		x.mark(dir)
		return nil
	}
	if err != nil {
		return walkError(x.w.root, dir, rel, err)
	}
	defer unix.Close(fd)
	x.mark(dir)
	if err := x.clearLower(fd, dir, 0); err != nil {
		return fmt.Errorf("entry %q: opaque whiteout: %w", rel, err)
	}
	return nil
}

// clearLower removes from the directory fd (at dir) every entry the current
// layer did not write, descending into those it did.
func (x *extractor) clearLower(fd int, dir string, level int) error {
	if level > maxWalkDepth {
		return fmt.Errorf("%w: deeper than %d levels", ErrLimit, maxWalkDepth)
	}
	names, err := readDirNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := joinRel(dir, n)
		if !x.layer[p] {
			if err := removeAllAt(fd, n, 0); err != nil {
				return err
			}
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %q: %w", p, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		cfd, err := openDir(fd, n)
		if err != nil {
			return fmt.Errorf("open %q: %w", p, err)
		}
		err = x.clearLower(cfd, p, level+1)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// finish gives every directory its final metadata, children before parents
// and the root last, and returns the stats with the tree's digest.
func (x *extractor) finish() (*Stats, error) {
	paths := make([]string, 0, len(x.dirs))
	for p := range x.dirs {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool {
		di, dj := depth(paths[i]), depth(paths[j])
		if di != dj {
			return di > dj
		}
		return paths[i] < paths[j]
	})
	for _, p := range paths {
		fd, err := openDir(x.w.root, p)
		if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
			continue // replaced or removed by a later entry
		}
		if err != nil {
			return nil, fmt.Errorf("directory %q: open: %w", p, err)
		}
		err = setMeta(fd, x.dirs[p])
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("directory %q: %w", p, err)
		}
	}
	digest, err := treeDigest(x.w.root)
	if err != nil {
		return nil, err
	}
	st := x.w.stats
	st.Digest = digest
	return &st, nil
}
