package enforce

import (
	"errors"
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
