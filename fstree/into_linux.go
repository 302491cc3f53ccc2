package fstree

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// maxEntryName bounds the length of the name of an entry ExtractInto
// reads.
const maxEntryName = 4096

// ExtractInto extracts r, a plain tar stream of one file, symlink or
// directory tree (every entry under one top name, whatever that name
// is), as the entry name of the directory dirfd, as a user's cp -r copies
// into a directory of theirs. It is what a copy out of a sandbox writes
// on the host: the archive, and the destination tree (a workspace the
// sandbox writes), may both hold symlinks meant to lead a write
// elsewhere.
//
//   - The top entry is created with O_NOFOLLOW: a symlink at name is a
//     *SymlinkError, never written through; an existing regular file is
//     overwritten in place (its mode kept), an existing directory merged
//     into; anything else there is refused.
//   - The entries below it are written beneath the top directory with the
//     rules of ExtractTar: no name leaves it, no symlink is crossed (the
//     archive's or one already there), an entry replaces what is there (a
//     symlink is removed, not followed; a non-empty directory is refused),
//     symlink targets are written verbatim.
//   - Entries are written as the caller: owners and times of the archive
//     are not copied, permission bits (setuid, setgid and sticky bits
//     dropped) go through the umask, and a new directory is always u+rwx.
//     A directory that exists is kept as it is.
//   - Hardlinks, devices, FIFOs and sockets are left out and reported to
//     opt.Skipped; a sparse entry is refused (its holes would be written
//     out).
//
// name must be one path component. opt.Limits bound the copy (zero
// fields: the defaults of Limits); an entry's name is at most 4096
// bytes. On error what was written so far stays. Stats has no Digest.
func ExtractInto(ctx context.Context, r io.Reader, dirfd int, name string, opt HostOptions) (*Stats, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("fstree: extract into %q: not a file name", name)
	}
	w := &writer{ctx: ctx, root: -1, lim: opt.Limits.withDefaults(), mapID: defaultMapID,
		buf: make([]byte, copyBufSize), asCaller: true, onSkip: opt.Skipped}
	defer func() {
		if w.root >= 0 {
			unix.Close(w.root)
		}
	}()
	x, err := newExtractor(w, false)
	if err != nil {
		return nil, err
	}
	in := &into{w: w, x: x, dir: dirfd, name: name}
	tr := tar.NewReader(r)
	for {
		if err := w.canceled(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, tar.ErrInsecurePath) && hdr != nil {
			err = nil // judged by entry, with the other name rules
		}
		if err != nil {
			return nil, streamErr("tar", err)
		}
		if err := in.entry(hdr, tr); err != nil {
			return nil, err
		}
	}
	if !in.placed {
		return nil, fmt.Errorf("%w: the archive is empty", ErrHostile)
	}
	if err := x.drain(r); err != nil {
		return nil, err
	}
	st := w.stats
	return &st, nil
}

// into is the state of one ExtractInto.
type into struct {
	w      *writer
	x      *extractor
	dir    int    // the directory that gets the top entry
	name   string // the top entry's name there
	top    string // the first component of every entry's name
	placed bool   // the top entry was written
}

// entry applies one tar entry; r reads its content.
func (in *into) entry(hdr *tar.Header, r io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	if len(hdr.Name) > maxEntryName {
		return hostile(truncName(hdr.Name), "name longer than %d bytes", maxEntryName)
	}
	if hdr.Typeflag == tar.TypeGNUSparse {
		return fmt.Errorf("%w: entry %q: sparse entries are not copied", ErrUnsupported, hdr.Name)
	}
	for k := range hdr.PAXRecords {
		// A sparse entry of a few bytes can claim terabytes of holes.
		if strings.HasPrefix(k, "GNU.sparse.") {
			return fmt.Errorf("%w: entry %q: sparse entries are not copied", ErrUnsupported, hdr.Name)
		}
	}
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return hostile(hdr.Name, "%v", err)
	}
	if rel == "" {
		return hostile(hdr.Name, "names no top entry")
	}
	top, rest, _ := strings.Cut(rel, "/")
	if in.top == "" {
		in.top = top
	} else if top != in.top {
		return hostile(hdr.Name, "not under %q", in.top)
	}
	if rest == "" {
		if in.placed {
			return hostile(hdr.Name, "repeats the top entry")
		}
		in.placed = true
		return in.placeTop(hdr, r)
	}
	if in.w.root < 0 {
		return hostile(hdr.Name, "is not beneath a directory of the archive")
	}
	hdr.Name = rest
	return in.x.entry(hdr, r)
}

// placeTop writes the top entry as in.name in in.dir.
func (in *into) placeTop(hdr *tar.Header, r io.Reader) error {
	w := in.w
	if err := w.addEntry(hdr.Name); err != nil {
		return err
	}
	if _, err := headerStat(hdr); err != nil {
		return hostile(hdr.Name, "%v", err)
	}
	mode := uint32(hdr.Mode) & 0o777
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(in.dir, in.name, mode|0o700); err == nil {
			w.stats.Dirs++
			w.stats.Entries++
		} else if err != unix.EEXIST {
			return fmt.Errorf("%s: mkdir: %w", in.name, err)
		}
		fd, err := openBeneath(in.dir, in.name, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return in.topError(err)
		}
		w.root = fd
		return nil
	case tar.TypeReg, tar.TypeCont:
		if err := w.budget(hdr.Name, hdr.Size); err != nil {
			return err
		}
		// No O_TRUNC: the file is truncated once it is known to be a
		// regular file (O_NONBLOCK: a FIFO there does not block the open).
		fd, err := unix.Openat(in.dir, in.name, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, mode)
		if err != nil {
			return in.topError(err)
		}
		f := os.NewFile(uintptr(fd), in.name)
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("%s: stat: %w", in.name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%s exists and is not a regular file", in.name)
		}
		if err := unix.Ftruncate(fd, 0); err != nil {
			return fmt.Errorf("%s: truncate: %w", in.name, err)
		}
		if _, err := w.copyData(f, r, nil, hdr.Name); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("%s: close: %w", in.name, err)
		}
		w.stats.Files++
		w.stats.Entries++
		return nil
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return hostile(hdr.Name, "invalid symlink target %q", hdr.Linkname)
		}
		if err := unix.Symlinkat(hdr.Linkname, in.dir, in.name); err != nil {
			return in.topError(err)
		}
		w.stats.Symlinks++
		w.stats.Entries++
		return nil
	}
	return fmt.Errorf("%w: entry %q: the top entry is of type %q", ErrUnsupported, hdr.Name, hdr.Typeflag)
}

// topError explains a failure to open or create the top entry: a
// symlink there is a *SymlinkError.
func (in *into) topError(err error) error {
	var st unix.Stat_t
	if unix.Fstatat(in.dir, in.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return &SymlinkError{Path: in.name, Link: in.name}
		case unix.S_IFDIR, unix.S_IFREG:
		default:
			return fmt.Errorf("%s exists and is not a regular file or a directory", in.name)
		}
	}
	return fmt.Errorf("%s: %w", in.name, err)
}
