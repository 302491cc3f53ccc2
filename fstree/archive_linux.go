package fstree

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// WriteTar writes the entry name of the directory dirfd (dirfd itself, a
// directory, when name is "") to w as a plain tar stream whose entries
// are named under entry ("entry", "entry/a", ...): what ExtractInto
// reads. It is what a copy into a sandbox reads on the host, in a tree
// the sandbox may write (its workspace), so nothing is ever followed:
//
//   - A symlink is stored as a symlink, the top entry included.
//   - A directory's entries are looked at with fstatat(AT_SYMLINK_NOFOLLOW)
//     relative to its descriptor; a file is then opened with
//     O_NOFOLLOW|O_NONBLOCK and checked again with fstat, a directory
//     with O_NOFOLLOW|O_DIRECTORY, so an entry swapped for a symlink or a
//     FIFO meanwhile is never followed or waited on.
//   - FIFOs, sockets and devices are never opened. Below the top they,
//     and entries that vanish or change type while being read, are left
//     out and reported to opt.Skipped; the top entry must be a file, a
//     directory or a symlink.
//
// Entries carry their permission bits and modification time (seconds),
// no owner; a directory's entries come sorted by name. A file that
// shrinks while it is read is padded with zeros, as tar does. entry must
// be one path component; opt.Limits bound what is read (zero fields: the
// defaults of Limits).
func WriteTar(ctx context.Context, w io.Writer, dirfd int, name, entry string, opt HostOptions) (*Stats, error) {
	if entry == "" || entry == "." || entry == ".." || strings.ContainsAny(entry, "/\x00") {
		return nil, fmt.Errorf("fstree: write tar as %q: not a file name", entry)
	}
	a := &archiver{ctx: ctx, tw: tar.NewWriter(w), lim: opt.Limits.withDefaults(), skipped: opt.Skipped}
	var err error
	if name == "" {
		var fd int
		fd, err = unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			var st unix.Stat_t
			if err = unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
			} else {
				err = a.dir(fd, &st, entry, "")
			}
		}
	} else {
		err = a.add(dirfd, name, entry, "")
	}
	if err != nil {
		return nil, err
	}
	if err := a.tw.Close(); err != nil {
		return nil, err
	}
	return &a.stats, nil
}

// archiver is the state of one WriteTar.
type archiver struct {
	ctx     context.Context
	tw      *tar.Writer
	lim     Limits
	skipped func(rel, why string)
	stats   Stats
}

// header is the tar header of an entry, without owners.
func header(st *unix.Stat_t, arc string) *tar.Header {
	return &tar.Header{Name: arc, Mode: int64(st.Mode & 0o777), ModTime: time.Unix(st.Mtim.Sec, 0)}
}

// count counts one entry against MaxEntries.
func (a *archiver) count(rel string) error {
	a.stats.Entries++
	if a.stats.Entries > a.lim.MaxEntries {
		return fmt.Errorf("%w: %q: more than %d entries (MaxEntries)", ErrLimit, rel, a.lim.MaxEntries)
	}
	return nil
}

// add writes the entry name of the directory dir as arc, and what is
// below it; rel is its path below the top ("" for the top). For the top,
// anything amiss is an error; below, an entry that cannot be archived is
// left out and reported.
func (a *archiver) add(dir int, name, arc, rel string) error {
	if err := a.ctx.Err(); err != nil {
		return fmt.Errorf("fstree: %w", err)
	}
	skip := func(err error) error {
		if rel == "" {
			return err
		}
		a.skip(rel, err.Error())
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return skip(err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		f, st, err := OpenRegular(dir, name)
		if err != nil {
			if errors.Is(err, ErrNotRegular) {
				err = fmt.Errorf("%w (it was replaced while being copied)", err)
			}
			return skip(err)
		}
		defer f.Close()
		return a.file(f, st, arc, rel)
	case unix.S_IFLNK:
		target, err := readlinkAt(dir, name)
		if err != nil {
			return skip(err)
		}
		if err := a.count(rel); err != nil {
			return err
		}
		h := header(&st, arc)
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
		a.stats.Symlinks++
		return a.tw.WriteHeader(h)
	case unix.S_IFDIR:
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return skip(err)
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return skip(err)
		}
		return a.dir(fd, &st, arc, rel)
	}
	return skip(errors.New("not a file, directory or symlink (FIFOs, sockets and devices are not copied)"))
}

// file writes the regular file f, described by st.
func (a *archiver) file(f *os.File, st *unix.Stat_t, arc, rel string) error {
	if err := a.count(rel); err != nil {
		return err
	}
	if st.Size > a.lim.MaxBytes-a.stats.Bytes {
		return fmt.Errorf("%w: %q: %d bytes would exceed MaxBytes (%d)", ErrLimit, rel, st.Size, a.lim.MaxBytes)
	}
	h := header(st, arc)
	h.Typeflag, h.Size = tar.TypeReg, st.Size
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.CopyN(a.tw, f, st.Size)
	if err == io.EOF {
		// The file shrank while being read: pad, as tar does.
		_, err = io.CopyN(a.tw, zeroReader{}, st.Size-n)
	}
	if err != nil {
		return fmt.Errorf("%q: %w", rel, err)
	}
	a.stats.Files++
	a.stats.Bytes += st.Size
	return nil
}

// dir writes the directory fd (which it closes) and its entries, sorted
// by name.
func (a *archiver) dir(fd int, st *unix.Stat_t, arc, rel string) error {
	f := os.NewFile(uintptr(fd), arc)
	defer f.Close()
	if d := depth(rel); d > a.lim.MaxDepth {
		return fmt.Errorf("%w: %q: depth %d exceeds MaxDepth (%d)", ErrLimit, truncName(rel), d, a.lim.MaxDepth)
	}
	if err := a.count(rel); err != nil {
		return err
	}
	h := header(st, arc+"/")
	h.Typeflag = tar.TypeDir
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	a.stats.Dirs++
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%q: %w", rel, err)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := a.add(fd, n, arc+"/"+n, joinRel(rel, n)); err != nil {
			return err
		}
	}
	return nil
}

// skip reports an entry left out.
func (a *archiver) skip(rel, why string) {
	a.stats.skip(rel, why, a.skipped)
}

// zeroReader reads zeros.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
