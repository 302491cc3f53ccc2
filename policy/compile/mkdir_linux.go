package compile

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// mkdirOwned creates dir/name (0755) unless it exists, owned by dir's
// owner, opening dir without following a symlink in its last component.
// created is false when name already existed.
func mkdirOwned(dir, name string) (created bool, err error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	if err := unix.Mkdirat(fd, name, 0o755); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return false, nil
		}
		return false, err
	}
	if err := unix.Fchownat(fd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		_ = unix.Unlinkat(fd, name, unix.AT_REMOVEDIR)
		return false, err
	}
	return true, nil
}

// openDir opens a directory to list it; anything else (a FIFO, whose open
// would block, a device, a symlink) fails without being opened.
func openDir(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

// errNotExist: the file is not there.
var errNotExist = os.ErrNotExist

// openRegular opens p for reading without following a symlink in its last
// component and without blocking (a FIFO is refused, never waited on); it
// must be a regular file of at most max bytes.
func openRegular(p string, max int64) (*os.File, int64, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, 0, errNotExist
		}
		if errors.Is(err, unix.ELOOP) {
			return nil, 0, errors.New("a symlink")
		}
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fd), p)
	st, err := f.Stat()
	switch {
	case err != nil:
	case !st.Mode().IsRegular():
		err = fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	case st.Size() > max:
		err = fmt.Errorf("larger than %d bytes", max)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// readSmallRegular reads a regular file of at most max bytes (openRegular).
func readSmallRegular(p string, max int64) ([]byte, error) {
	f, size, err := openRegular(p, max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, size))
}
