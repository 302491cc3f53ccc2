package fstree

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
)

// isLowerRef tells whether an overlay xattr, trusted (overlayfs' default)
// or user (its userxattr mode), means that a file's data or a directory's
// contents live in a lower layer: such an upper directory cannot be copied
// on its own.
func isLowerRef(attr string) bool {
	switch attr {
	case "trusted.overlay.metacopy", "user.overlay.metacopy",
		"trusted.overlay.redirect", "user.overlay.redirect":
		return true
	}
	return false
}

// CopyDir copies the host directory src (its last component must not be a
// symlink) into dst, an existing empty directory, with the rules of the
// package: symlinks are copied as symlinks and never followed, mount points
// beneath src are entered as ordinary directories, hardlinked files stay
// hardlinked within the copy, owners pass through MapID, and src's own
// owner, mode and mtime are given to dst.
//
// The source is read through descriptors too (openat2 with RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS, fstatat with AT_SYMLINK_NOFOLLOW), so a source that
// changes during the copy cannot make it read outside src: an entry that
// changed type is an error, one that vanished is left out. Content is hashed
// while it is copied: the Digest in Stats costs no second read.
//
// Regular files keep their holes: only the data extents of the source
// (lseek SEEK_DATA/SEEK_HOLE) are written and the copy is truncated to the
// source's size, so a sparse file costs in the copy about what it costs in
// the source, whatever its apparent size (holes are hashed as the zeros
// they read as: the digest does not depend on the layout). Stats.DiskBytes
// is what the copy allocated, bounded by Limits.MaxDiskBytes.
func CopyDir(ctx context.Context, src, dst string, opt Options) (*Stats, error) {
	w, err := newWriter(ctx, dst, opt)
	if err != nil {
		return nil, err
	}
	defer w.close()
	sfd, err := openRoot(src)
	if err != nil {
		return nil, err
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", src, err)
	}
	c := &copier{w: w, links: make(map[inode]linked)}
	m, err := c.dirMeta(".", sfd, &st)
	if err != nil {
		return nil, err
	}
	if err := c.tree(sfd, w.root, ""); err != nil {
		return nil, err
	}
	if err := setMeta(w.root, m); err != nil {
		return nil, fmt.Errorf("destination root: %w", err)
	}
	if err := c.record(".", w.root, "", nil); err != nil {
		return nil, err
	}
	c.recs[len(c.recs)-1].opaque = m.opaque
	stats := w.stats
	stats.Digest = digestRecords(c.recs)
	return &stats, nil
}

// linked is the first copy of a source file with several links.
type linked struct {
	rel string
	sum [32]byte
}

// copier holds the state of one CopyDir.
type copier struct {
	w     *writer
	links map[inode]linked // source inode -> its first copy
	recs  []record         // the digest's listing of what was written
}

// record appends the record of what was written at name in dirfd (name ""
// is dirfd itself), as TreeDigest would see it.
func (c *copier) record(rel string, dirfd int, name string, sum *[32]byte) error {
	var st unix.Stat_t
	var err error
	if name == "" {
		err = unix.Fstat(dirfd, &st)
	} else {
		err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("entry %q: stat copy: %w", rel, err)
	}
	r := recordOf(rel, &st)
	r.ino = inode{}
	if sum != nil {
		r.sum = *sum
	}
	c.recs = append(c.recs, r)
	if st.Mode&unix.S_IFMT != unix.S_IFREG { // a hardlink's blocks are its first copy's
		return c.w.addDisk(rel, &st)
	}
	return nil
}

// roundUp rounds n up to a multiple of the power of two b.
func roundUp(n, b int64) int64 { return (n + b - 1) &^ (b - 1) }

// tree copies the entries of the source directory sfd into the destination
// directory dfd; dir is their relative path.
func (c *copier) tree(sfd, dfd int, dir string) error {
	names, err := readDirNames(sfd)
	if err != nil {
		return fmt.Errorf("source %q: %w", dir, err)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := c.w.canceled(); err != nil {
			return err
		}
		if err := c.entry(sfd, dfd, n, joinRel(dir, n)); err != nil {
			return err
		}
	}
	return nil
}

// entry copies the source entry name of sfd into dfd.
func (c *copier) entry(sfd, dfd int, name, rel string) error {
	w := c.w
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil // vanished since it was listed
		}
		return fmt.Errorf("source %q: stat: %w", rel, err)
	}
	if err := w.checkDepth(rel); err != nil {
		return err
	}
	if w.opt.Seen != nil {
		w.opt.Seen(rel, &st)
	}
	if err := w.addEntry(rel); err != nil {
		return err
	}
	typ := st.Mode & unix.S_IFMT
	if typ != unix.S_IFDIR && w.opt.Filter != nil && !w.opt.Filter(rel, &st) {
		return nil
	}
	switch {
	case typ == unix.S_IFDIR:
		return c.dir(sfd, dfd, name, rel, &st)
	case typ == unix.S_IFREG:
		return c.file(sfd, dfd, name, rel, &st)
	case typ == unix.S_IFLNK:
		return c.symlink(sfd, dfd, name, rel, &st)
	case typ == unix.S_IFCHR && st.Rdev == 0 && w.opt.Overlay:
		return c.whiteout(dfd, name, rel, &st)
	}
	w.skip(rel, "not a file, directory or symlink")
	return nil
}

// sameFile tells whether an opened file is the one stat described.
func sameFile(fd int, st *unix.Stat_t) (bool, error) {
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		return false, err
	}
	return fst.Dev == st.Dev && fst.Ino == st.Ino && fst.Mode&unix.S_IFMT == st.Mode&unix.S_IFMT, nil
}

// openSource opens the source entry name of sfd, checking that it is still
// the one st describes.
func openSource(sfd int, name, rel string, st *unix.Stat_t, flags int) (int, error) {
	fd, err := openBeneath(sfd, name, flags)
	if err != nil {
		return -1, fmt.Errorf("source %q: open: %w", rel, err)
	}
	same, err := sameFile(fd, st)
	if err == nil && !same {
		err = fmt.Errorf("changed during the copy")
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("source %q: %w", rel, err)
	}
	return fd, nil
}

// checkLowerRefs refuses, in Overlay mode, a source whose data lives in a
// lower layer (metacopy files, redirected directories).
func (c *copier) checkLowerRefs(fd int, rel string) error {
	if !c.w.opt.Overlay {
		return nil
	}
	names, err := listXattrs(fd)
	if err != nil {
		return fmt.Errorf("source %q: %w", rel, err)
	}
	for _, attr := range names {
		if isLowerRef(attr) {
			return fmt.Errorf("source %q: %w: overlay upper entry with %s (its data is in a lower layer)", rel, ErrUnsupported, attr)
		}
	}
	return nil
}

// dirMeta is the metadata written for the source directory fd.
func (c *copier) dirMeta(rel string, fd int, st *unix.Stat_t) (meta, error) {
	uid, gid, err := c.w.owner(rel, st.Uid, st.Gid)
	if err != nil {
		return meta{}, err
	}
	m := meta{mode: st.Mode & 0o7777, uid: uid, gid: gid, mtime: st.Mtim}
	if c.w.opt.Overlay {
		if err := c.checkLowerRefs(fd, rel); err != nil {
			return meta{}, err
		}
		if m.opaque, err = isOpaque(fd); err != nil {
			return meta{}, fmt.Errorf("source %q: %w", rel, err)
		}
	}
	return m, nil
}

// dir copies a directory and, recursively, its contents; it gets its
// metadata after them.
func (c *copier) dir(sfd, dfd int, name, rel string, st *unix.Stat_t) error {
	scfd, err := openSource(sfd, name, rel, st, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(scfd)
	m, err := c.dirMeta(rel, scfd, st)
	if err != nil {
		return err
	}
	if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
		return fmt.Errorf("entry %q: mkdir: %w", rel, err)
	}
	dcfd, err := openDir(dfd, name)
	if err != nil {
		return fmt.Errorf("entry %q: open: %w", rel, err)
	}
	defer unix.Close(dcfd)
	c.w.stats.Dirs++
	c.w.stats.Entries++
	if err := c.tree(scfd, dcfd, rel); err != nil {
		return err
	}
	if err := setMeta(dcfd, m); err != nil {
		return fmt.Errorf("entry %q: %w", rel, err)
	}
	if err := c.record(rel, dcfd, "", nil); err != nil {
		return err
	}
	c.recs[len(c.recs)-1].opaque = m.opaque
	return nil
}

// file copies a regular file, or links it to the copy of another link of
// the same source inode.
func (c *copier) file(sfd, dfd int, name, rel string, st *unix.Stat_t) error {
	key := inode{dev: st.Dev, ino: st.Ino}
	if st.Nlink > 1 {
		if l, ok := c.links[key]; ok {
			return c.link(dfd, name, rel, key, l)
		}
	}
	if err := c.w.budget(rel, st.Size); err != nil {
		return err
	}
	// What the source allocates is about what the copy will: a file that
	// cannot fit is refused before anything of it is written.
	if err := c.w.diskBudget(rel, min(diskCost(st), roundUp(st.Size, 4096))); err != nil {
		return err
	}
	fd, err := openSource(sfd, name, rel, st, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := c.checkLowerRefs(fd, rel); err != nil {
		return err
	}
	uid, gid, err := c.w.owner(rel, st.Uid, st.Gid)
	if err != nil {
		return err
	}
	m := meta{mode: c.w.fileMode(st.Mode), uid: uid, gid: gid, mtime: st.Mtim}
	h := sha256.New()
	var dst unix.Stat_t
	if err := c.w.createSparse(dfd, name, rel, fd, st.Size, m, h, &dst); err != nil {
		return err
	}
	r := recordOf(rel, &dst)
	h.Sum(r.sum[:0])
	if st.Nlink > 1 {
		r.ino = key
		c.links[key] = linked{rel: rel, sum: r.sum}
	}
	c.recs = append(c.recs, r)
	c.w.stats.Files++
	c.w.stats.Entries++
	return nil
}

// link makes name in dfd a hardlink of the first copy l of a source inode.
func (c *copier) link(dfd int, name, rel string, key inode, l linked) error {
	ldir, lbase := splitRel(l.rel)
	lfd, err := openDir(c.w.root, ldir)
	if err != nil {
		return fmt.Errorf("entry %q: open %q: %w", rel, ldir, err)
	}
	defer unix.Close(lfd)
	if err := unix.Linkat(lfd, lbase, dfd, name, 0); err != nil {
		return fmt.Errorf("entry %q: link to %q: %w", rel, l.rel, err)
	}
	if err := c.record(rel, dfd, name, &l.sum); err != nil {
		return err
	}
	c.recs[len(c.recs)-1].ino = key
	c.w.stats.Hardlinks++
	c.w.stats.Entries++
	return nil
}

// symlink copies a symlink; its target is copied verbatim.
func (c *copier) symlink(sfd, dfd int, name, rel string, st *unix.Stat_t) error {
	target, err := readlinkAt(sfd, name)
	if err != nil {
		return fmt.Errorf("source %q: %w", rel, err)
	}
	uid, gid, err := c.w.owner(rel, st.Uid, st.Gid)
	if err != nil {
		return err
	}
	if err := createSymlink(dfd, name, rel, target, meta{uid: uid, gid: gid, mtime: st.Mtim}); err != nil {
		return err
	}
	if err := c.record(rel, dfd, name, nil); err != nil {
		return err
	}
	c.recs[len(c.recs)-1].target = target
	c.w.stats.Symlinks++
	c.w.stats.Entries++
	return nil
}

// whiteout copies an overlay whiteout (owned by 0:0, see Options.Overlay).
func (c *copier) whiteout(dfd int, name, rel string, st *unix.Stat_t) error {
	if err := createWhiteout(dfd, name, rel, meta{mtime: st.Mtim}); err != nil {
		return err
	}
	if err := c.record(rel, dfd, name, nil); err != nil {
		return err
	}
	c.w.stats.Entries++
	return nil
}
