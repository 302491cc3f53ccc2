package templates

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// clearOpaque removes overlayfs' opaque marker from directory rel of tree,
// resolved beneath tree without following symlinks.
func clearOpaque(tree, rel string) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, filepath.Join(tree, rel), &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", rel, err)
	}
	defer unix.Close(fd)
	if err := unix.Fremovexattr(fd, "user.overlay.opaque"); err != nil && !errors.Is(err, unix.ENODATA) {
		return fmt.Errorf("snapshot %s: %w", rel, err)
	}
	return nil
}
