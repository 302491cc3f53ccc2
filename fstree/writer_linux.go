package fstree

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// copyBufSize is the size of the buffer file contents are copied through.
const copyBufSize = 256 << 10

// meta is the metadata written for one entry, already mapped and stripped.
type meta struct {
	mode     uint32 // permission bits
	uid, gid uint32
	mtime    unix.Timespec
	opaque   bool // directories only: write the overlay opaque marker
}

// writer holds the state of one operation writing beneath a destination
// directory: its descriptor, the limits and what was written so far.
type writer struct {
	ctx   context.Context
	root  int // descriptor of the destination directory
	lim   Limits
	opt   Options
	mapID func(uid, gid uint32) (uint32, uint32, error)
	stats Stats
	count int // entries counted against MaxEntries
	buf   []byte
	// asCaller: the destination is a tree a user owns, written as a copy
	// by that user would write it (ExtractInto): entries get no owner
	// and no times of the source, permission bits go through the umask,
	// directories that exist are kept as they are.
	asCaller bool
	// onSkip, if set, is told of every entry left out, and why.
	onSkip func(rel, why string)
}

// newWriter opens dst, which must be an existing empty directory.
func newWriter(ctx context.Context, dst string, opt Options) (*writer, error) {
	root, err := openRoot(dst)
	if err != nil {
		return nil, err
	}
	empty, err := isEmptyDir(root)
	if err == nil && !empty {
		err = fmt.Errorf("%s: %w", dst, ErrNotEmpty)
	}
	if err != nil {
		unix.Close(root)
		return nil, err
	}
	w := &writer{
		ctx:   ctx,
		root:  root,
		lim:   opt.Limits.withDefaults(),
		opt:   opt,
		mapID: opt.MapID,
		buf:   make([]byte, copyBufSize),
	}
	if w.mapID == nil {
		w.mapID = defaultMapID
	}
	return w, nil
}

// close releases the destination descriptor.
func (w *writer) close() {
	unix.Close(w.root)
}

// canceled returns the context's error, if it is done.
func (w *writer) canceled() error {
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("fstree: %w", err)
	}
	return nil
}

// addEntry counts one entry against MaxEntries.
func (w *writer) addEntry(rel string) error {
	w.count++
	if w.count > w.lim.MaxEntries {
		return fmt.Errorf("%w: entry %q: more than %d entries (MaxEntries)", ErrLimit, rel, w.lim.MaxEntries)
	}
	return nil
}

// checkDepth refuses a path deeper than MaxDepth.
func (w *writer) checkDepth(rel string) error {
	if d := depth(rel); d > w.lim.MaxDepth {
		return fmt.Errorf("%w: entry %q: depth %d exceeds MaxDepth (%d)", ErrLimit, truncName(rel), d, w.lim.MaxDepth)
	}
	return nil
}

// truncName shortens a very long path for an error message.
func truncName(rel string) string {
	const max = 200
	if len(rel) <= max {
		return rel
	}
	return rel[:max] + "..."
}

// budget refuses, before anything is written, a file whose declared size
// alone would exceed what is left of MaxBytes.
func (w *writer) budget(rel string, size int64) error {
	if size > w.lim.MaxBytes-w.stats.Bytes {
		return fmt.Errorf("%w: entry %q: %d bytes would exceed MaxBytes (%d)", ErrLimit, rel, size, w.lim.MaxBytes)
	}
	return nil
}

// owner maps a source owner through MapID.
func (w *writer) owner(rel string, uid, gid uint32) (uint32, uint32, error) {
	u, g, err := w.mapID(uid, gid)
	if err != nil {
		return 0, 0, fmt.Errorf("entry %q: owner %d:%d: %w", rel, uid, gid, err)
	}
	return u, g, nil
}

// fileMode returns the permission bits written for a regular file: setuid
// and setgid stripped (and counted), the sticky bit kept.
func (w *writer) fileMode(perm uint32) uint32 {
	perm &= 0o7777
	if perm&(unix.S_ISUID|unix.S_ISGID) != 0 {
		w.stats.StrippedSetid++
		perm &^= unix.S_ISUID | unix.S_ISGID
	}
	return perm
}

// skip records an entry left out, and why.
func (w *writer) skip(rel, why string) {
	w.stats.skip(rel, why, w.onSkip)
}

// readErr wraps an error reading the source of entry rel, telling a
// truncated stream apart.
func readErr(rel string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: entry %q: %w", ErrTruncated, rel, err)
	}
	return fmt.Errorf("entry %q: read: %w", rel, err)
}

// createFile creates the regular file name in pfd (O_EXCL, O_NOFOLLOW),
// copies r into it within MaxBytes (hashing into sum if not nil), and sets
// its owner, mode and times (asCaller: it is created with m.mode, less the
// umask, and keeps the caller's owner and the time of the copy). If st is
// not nil it receives the file's stat.
func (w *writer) createFile(pfd int, name, rel string, r io.Reader, m meta, sum hash.Hash, st *unix.Stat_t) (int64, error) {
	perm := uint32(0o600)
	if w.asCaller {
		perm = m.mode
	}
	fd, err := unix.Openat(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return 0, fmt.Errorf("entry %q: create: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	n, err := w.copyData(f, r, sum, rel)
	if err == nil && !w.asCaller {
		err = setMeta(fd, m)
		if err != nil {
			err = fmt.Errorf("entry %q: %w", rel, err)
		}
	}
	if err == nil && st != nil {
		if err = unix.Fstat(fd, st); err != nil {
			err = fmt.Errorf("entry %q: stat: %w", rel, err)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("entry %q: close: %w", rel, cerr)
	}
	return n, err
}

// copyData copies r to f through the writer's buffer, counting every byte
// against MaxBytes before it is written.
func (w *writer) copyData(f *os.File, r io.Reader, sum hash.Hash, rel string) (int64, error) {
	var total int64
	for {
		n, rerr := r.Read(w.buf)
		if n > 0 {
			if int64(n) > w.lim.MaxBytes-w.stats.Bytes {
				return total, fmt.Errorf("%w: entry %q: more than MaxBytes (%d) written", ErrLimit, rel, w.lim.MaxBytes)
			}
			if _, err := f.Write(w.buf[:n]); err != nil {
				return total, fmt.Errorf("entry %q: write: %w", rel, err)
			}
			if sum != nil {
				sum.Write(w.buf[:n])
			}
			w.stats.Bytes += int64(n)
			total += int64(n)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, readErr(rel, rerr)
		}
	}
}

// setMeta sets the owner, mode, opaque marker and times of the open file or
// directory fd. Owner first: chown may clear mode bits.
func setMeta(fd int, m meta) error {
	if err := unix.Fchown(fd, int(m.uid), int(m.gid)); err != nil {
		return fmt.Errorf("chown %d:%d: %w", m.uid, m.gid, err)
	}
	if err := unix.Fchmod(fd, m.mode); err != nil {
		return fmt.Errorf("chmod %o: %w", m.mode, err)
	}
	if m.opaque {
		if err := setOpaqueFd(fd); err != nil {
			return err
		}
	}
	if err := futimens(fd, m.mtime); err != nil {
		return fmt.Errorf("utimens: %w", err)
	}
	return nil
}

// createSymlink creates the symlink name -> target in pfd with its owner
// and times (symlinks have no mode of their own).
func createSymlink(pfd int, name, rel, target string, m meta) error {
	if err := unix.Symlinkat(target, pfd, name); err != nil {
		return fmt.Errorf("entry %q: symlink: %w", rel, err)
	}
	return lmeta(pfd, name, rel, m)
}

// createWhiteout creates an overlay whiteout (0/0 character device, mode 0)
// name in pfd with the owner and times of m.
func createWhiteout(pfd int, name, rel string, m meta) error {
	if err := unix.Mknodat(pfd, name, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("entry %q: mknod whiteout: %w", rel, err)
	}
	return lmeta(pfd, name, rel, m)
}

// lmeta sets the owner and times of name in pfd without following it.
func lmeta(pfd int, name, rel string, m meta) error {
	if err := unix.Fchownat(pfd, name, int(m.uid), int(m.gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("entry %q: chown: %w", rel, err)
	}
	if err := lutimens(pfd, name, m.mtime); err != nil {
		return fmt.Errorf("entry %q: utimens: %w", rel, err)
	}
	return nil
}
