package server

import (
	"fmt"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/fstree"
)

// openLogFile opens a build's log for reading: a regular file, not
// through a symlink.
func openLogFile(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", p)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openArtifact opens the artifact rel (slash-separated, relative) of the
// out directory dir: no symlink followed on the way or at its end, a
// regular file checked.
func openArtifact(dir, rel string) (*os.File, error) {
	parent, err := openBelow(dir, path.Dir(rel))
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", rel, err)
	}
	defer parent.Close()
	f, _, err := fstree.OpenRegular(int(parent.Fd()), path.Base(rel))
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", rel, err)
	}
	return f, nil
}
