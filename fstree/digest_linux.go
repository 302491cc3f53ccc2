package fstree

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"
)

// digestVersion starts every digest's input, so that a change of the
// listing's format changes every digest.
const digestVersion = "moat-fstree-digest-v1\n"

// inode identifies a file with more than one link, to group hardlinks.
type inode struct{ dev, ino uint64 }

// record is one entry of the canonical listing a tree digest is made of.
type record struct {
	path     string // relative, slash-separated; "." is the root
	mode     uint32 // st_mode: type and permission bits (symlinks: type only)
	uid, gid uint32
	size     int64 // regular files and symlinks
	mtime    int64 // seconds
	rdev     uint64
	target   string   // symlinks
	sum      [32]byte // regular files: sha256 of the content
	opaque   bool     // directories: overlay opaque marker
	ino      inode    // regular files with more than one link
}

// recordOf makes the record of path from its lstat; the content hash,
// symlink target and opaque marker are the caller's to fill in.
func recordOf(path string, st *unix.Stat_t) record {
	r := record{
		path:  path,
		mode:  st.Mode,
		uid:   st.Uid,
		gid:   st.Gid,
		mtime: st.Mtim.Sec,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		r.size = st.Size
		if st.Nlink > 1 {
			r.ino = inode{dev: st.Dev, ino: st.Ino}
		}
	case unix.S_IFLNK:
		r.mode = unix.S_IFLNK
		r.size = st.Size
	case unix.S_IFCHR, unix.S_IFBLK:
		r.rdev = st.Rdev
	}
	return r
}

// typeName names the type of an entry in the listing.
func typeName(r *record) string {
	switch r.mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFREG:
		return "file"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFCHR:
		if r.rdev == 0 {
			return "whiteout"
		}
		return "char"
	case unix.S_IFBLK:
		return "block"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	}
	return "unknown"
}

// digestRecords computes the digest of a tree from its records: sha256 over
// the records sorted by path, each a sequence of length-prefixed fields
// (path, type, permission bits, uid, gid, size, mtime, symlink target,
// content sha256, hardlink group, opaque marker, device number). A
// hardlink group is named by the first path of the group in that order.
func digestRecords(recs []record) string {
	sort.Slice(recs, func(i, j int) bool { return recs[i].path < recs[j].path })
	leader := make(map[inode]string)
	links := make(map[inode]int)
	for i := range recs {
		if ino := recs[i].ino; ino != (inode{}) {
			links[ino]++
			if _, ok := leader[ino]; !ok {
				leader[ino] = recs[i].path
			}
		}
	}
	h := sha256.New()
	io.WriteString(h, digestVersion)
	var b []byte
	field := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
		b = append(b, ',')
	}
	num := func(n int64, base int) { field(strconv.FormatInt(n, base)) }
	for i := range recs {
		r := &recs[i]
		b = b[:0]
		field(r.path)
		field(typeName(r))
		num(int64(r.mode&0o7777), 8)
		num(int64(r.uid), 10)
		num(int64(r.gid), 10)
		num(r.size, 10)
		num(r.mtime, 10)
		field(r.target)
		if r.mode&unix.S_IFMT == unix.S_IFREG {
			field(hex.EncodeToString(r.sum[:]))
		} else {
			field("")
		}
		if r.ino != (inode{}) && links[r.ino] > 1 {
			field(leader[r.ino])
		} else {
			field("")
		}
		if r.opaque {
			field("y")
		} else {
			field("")
		}
		if r.mode&unix.S_IFMT == unix.S_IFCHR || r.mode&unix.S_IFMT == unix.S_IFBLK {
			field(fmt.Sprintf("%d:%d", unix.Major(r.rdev), unix.Minor(r.rdev)))
		} else {
			field("")
		}
		b = append(b, '\n')
		h.Write(b)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// TreeDigest returns the digest of the tree at dst, as Stats.Digest of the
// operation that wrote it: sha256 over a canonical listing, sorted by path,
// of every entry (the root included): path, type, permission bits, uid,
// gid, size, symlink target, hardlink group, overlay markers (whiteouts and
// opaque directories), mtime in seconds and the sha256 of each regular
// file's content. It walks dst through descriptors, following no symlink.
func TreeDigest(dst string) (string, error) {
	root, err := openRoot(dst)
	if err != nil {
		return "", err
	}
	defer unix.Close(root)
	return treeDigest(root)
}

// digester walks a tree collecting records.
type digester struct {
	recs []record
	buf  []byte
}

// treeDigest is TreeDigest of the directory root.
func treeDigest(root int) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		return "", fmt.Errorf("digest: stat root: %w", err)
	}
	rec := recordOf(".", &st)
	opaque, err := isOpaque(root)
	if err != nil {
		return "", fmt.Errorf("digest: root: %w", err)
	}
	rec.opaque = opaque
	d := &digester{recs: []record{rec}, buf: make([]byte, copyBufSize)}
	if err := d.walk(root, "", 1); err != nil {
		return "", fmt.Errorf("digest: %w", err)
	}
	return digestRecords(d.recs), nil
}

// walk records every entry of the directory fd, at dir, recursively.
func (d *digester) walk(fd int, dir string, level int) error {
	if level > maxWalkDepth {
		return fmt.Errorf("%w: %q is deeper than %d levels", ErrLimit, truncName(dir), maxWalkDepth)
	}
	names, err := readDirNames(fd)
	if err != nil {
		return fmt.Errorf("%q: %w", dir, err)
	}
	for _, n := range names {
		p := joinRel(dir, n)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %q: %w", p, err)
		}
		rec := recordOf(p, &st)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			cfd, err := openDir(fd, n)
			if err != nil {
				return fmt.Errorf("open %q: %w", p, err)
			}
			if rec.opaque, err = isOpaque(cfd); err == nil {
				d.recs = append(d.recs, rec)
				err = d.walk(cfd, p, level+1)
			}
			unix.Close(cfd)
			if err != nil {
				return err
			}
			continue
		case unix.S_IFREG:
			if rec.size, rec.sum, err = d.hashFile(fd, n); err != nil {
				return fmt.Errorf("read %q: %w", p, err)
			}
		case unix.S_IFLNK:
			if rec.target, err = readlinkAt(fd, n); err != nil {
				return err
			}
		}
		d.recs = append(d.recs, rec)
	}
	return nil
}

// hashFile returns the size and sha256 of the regular file name in dirfd.
// Holes (SEEK_HOLE) are hashed as the zeros they read as, without reading
// them.
func (d *digester) hashFile(dirfd int, name string) (int64, [32]byte, error) {
	var sum [32]byte
	fd, err := openBeneath(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return 0, sum, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, sum, err
	}
	h := sha256.New()
	err = extents(fd, st.Size, d.buf,
		func(n int64) error { return hashZeros(h, n, nil) },
		func(b []byte, _ int64) error { h.Write(b); return nil })
	if err != nil {
		return 0, sum, err
	}
	h.Sum(sum[:0])
	return st.Size, sum, nil
}
