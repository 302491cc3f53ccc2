package policy

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// readFlags open a policy file for reading without blocking (a FIFO opens
// at once and is then refused by its type) and without becoming a
// controlling terminal.
const readFlags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// openProject opens a project policy file p: beneath the workspace ws
// with no symlink in any component (openat2 RESOLVE_NO_SYMLINKS; a walk
// of O_NOFOLLOW opens on kernels without openat2), or, for a file given
// outside the workspace, with no symlink as its last component.
func openProject(ws, p string) (*os.File, error) {
	if ws == "" || !path.IsAbs(ws) {
		return openFile(unix.AT_FDCWD, p, readFlags|unix.O_NOFOLLOW)
	}
	ws = path.Clean(ws)
	if p == ws || !under(p, ws) {
		return openFile(unix.AT_FDCWD, p, readFlags|unix.O_NOFOLLOW)
	}
	rel := strings.TrimPrefix(p[len(ws):], "/")
	dir, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, mapOpenErr(err)
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{
		Flags:   uint64(readFlags | unix.O_NOFOLLOW),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		return openWalk(dir, rel)
	}
	if err != nil {
		return nil, mapOpenErr(err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// openWalk opens rel beneath dir one component at a time, refusing a
// symlink anywhere.
func openWalk(dir int, rel string) (*os.File, error) {
	comps := strings.Split(rel, "/")
	cur := dir
	for i, c := range comps {
		if c == "" || c == "." || c == ".." {
			return nil, errSymlink
		}
		if i == len(comps)-1 {
			return openFile(cur, c, readFlags|unix.O_NOFOLLOW)
		}
		next, err := unix.Openat(cur, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if cur != dir {
			unix.Close(cur)
		}
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) {
				// A symlink opened O_PATH|O_NOFOLLOW is not a directory.
				var st unix.Stat_t
				if unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					return nil, errSymlink
				}
			}
			return nil, mapOpenErr(err)
		}
		cur = next
	}
	return nil, errSymlink
}

// openOperator opens the operator's policy file p (managed, user),
// following symlinks.
func openOperator(p string) (*os.File, error) {
	return openFile(unix.AT_FDCWD, p, readFlags)
}

func openFile(dir int, name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(dir, name, flags, 0)
	if err != nil {
		return nil, mapOpenErr(err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// mapOpenErr turns the errno of an open into what readPolicy reports.
func mapOpenErr(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return fs.ErrNotExist
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return errSymlink
	case errors.Is(err, unix.ENXIO), errors.Is(err, unix.EOPNOTSUPP):
		return errSpecial // a socket
	}
	return &fs.PathError{Op: "open", Err: err}
}
