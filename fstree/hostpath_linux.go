package fstree

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenBeneath is openBeneath for callers outside the layer store: rel is
// opened beneath dirfd, no symlink is followed on the way or at its end,
// and nothing outside dirfd is reached. With O_PATH|O_NOFOLLOW (no
// O_DIRECTORY), a symlink as the last component is opened as itself
// rather than refused: check the type.
func OpenBeneath(dirfd int, rel string, flags int) (int, error) {
	return openBeneath(dirfd, rel, flags)
}

// OpenPath opens the path p with flags (O_PATH|O_DIRECTORY, say),
// following no symlink in any of its components, the last one included,
// and no magic link (/proc/self/cwd, /dev/stdout). A relative p starts at
// the directory dirfd (unix.AT_FDCWD: the working directory), an absolute
// one at /. p is cleaned lexically first, and its leading ".." components
// are walked with plain openat (".." is never a symlink).
//
// A symlink on the way is a *SymlinkError naming it; other failures are
// the kernel's errno.
func OpenPath(dirfd int, p string, flags int) (int, error) {
	clean := filepath.Clean(p)
	rel, start := clean, dirfd
	owned := -1 // start, when opened here
	defer func() {
		if owned >= 0 {
			unix.Close(owned)
		}
	}()
	step := func(at int, name string) error {
		fd, err := unix.Openat(at, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if owned >= 0 {
			unix.Close(owned)
		}
		owned, start = fd, fd
		return nil
	}
	if filepath.IsAbs(clean) {
		if err := step(unix.AT_FDCWD, "/"); err != nil {
			return -1, err
		}
		rel = strings.TrimLeft(clean, "/")
	}
	for rel == ".." || strings.HasPrefix(rel, "../") {
		if err := step(start, ".."); err != nil {
			return -1, err
		}
		rel = strings.TrimPrefix(rel[2:], "/")
	}
	if rel == "" {
		rel = "."
	}
	fd, err := openBeneath(start, rel, flags)
	if err == nil {
		return fd, nil
	}
	if err == unix.ELOOP || err == unix.ENOTDIR || err == unix.EXDEV {
		if link, ok := symlinkOnPath(start, rel); ok {
			return -1, &SymlinkError{Path: p, Link: strings.TrimSuffix(clean, rel) + link}
		}
	}
	return -1, err
}

// symlinkOnPath finds the first component of rel (beneath dirfd) that is
// a symlink, if any, and returns rel up to it.
func symlinkOnPath(dirfd int, rel string) (string, bool) {
	cur, err := unix.Openat(dirfd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer func() { unix.Close(cur) }()
	comps := strings.Split(rel, "/")
	for i, c := range comps {
		var st unix.Stat_t
		if unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return "", false
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return strings.Join(comps[:i+1], "/"), true
		case unix.S_IFDIR:
		default:
			return "", false
		}
		next, err := openBeneath(cur, c, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return "", false
		}
		unix.Close(cur)
		cur = next
	}
	return "", false
}

// OpenRegular opens the entry name of the directory dirfd for reading, if
// it is a regular file: no symlink is followed, a FIFO does not block the
// open, and anything else (should the entry have changed since the
// caller looked at it) is refused with ErrNotRegular. It returns the
// file's stat.
func OpenRegular(dirfd int, name string) (*os.File, *unix.Stat_t, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, nil, ErrNotRegular
	}
	return os.NewFile(uintptr(fd), name), &st, nil
}
