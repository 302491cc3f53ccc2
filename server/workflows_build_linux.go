package server

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// createArtifact creates the regular file name in dir, which must not
// exist (O_EXCL; a symlink there is not followed), with the permission
// bits mode whatever the umask.
func createArtifact(dir *artifactDir, name string, mode uint32) (*os.File, error) {
	fd, err := unix.Openat(dir.fd(), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := unix.Fchmod(fd, mode); err != nil {
		f.Close()
		return nil, fmt.Errorf("chmod %s: %w", name, err)
	}
	return f, nil
}
