//go:build !linux

package fstree

import (
	"context"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// errPlatform is returned by every operation off Linux: the package relies
// on openat2 and other Linux-only calls.
var errPlatform = fmt.Errorf("fstree: %w on this platform (Linux only)", ErrUnsupported)

// CopyDir is only implemented on Linux.
func CopyDir(ctx context.Context, src, dst string, opt Options) (*Stats, error) {
	return nil, errPlatform
}

// ExtractTar is only implemented on Linux.
func ExtractTar(ctx context.Context, r io.Reader, dst string, opt Options) (*Stats, error) {
	return nil, errPlatform
}

// ExtractInto is only implemented on Linux.
func ExtractInto(ctx context.Context, r io.Reader, dirfd int, name string, opt HostOptions) (*Stats, error) {
	return nil, errPlatform
}

// WriteTar is only implemented on Linux.
func WriteTar(ctx context.Context, w io.Writer, dirfd int, name, entry string, opt HostOptions) (*Stats, error) {
	return nil, errPlatform
}

// OpenBeneath is only implemented on Linux.
func OpenBeneath(dirfd int, rel string, flags int) (int, error) { return -1, errPlatform }

// OpenPath is only implemented on Linux.
func OpenPath(dirfd int, p string, flags int) (int, error) { return -1, errPlatform }

// OpenRegular is only implemented on Linux.
func OpenRegular(dirfd int, name string) (*os.File, *unix.Stat_t, error) {
	return nil, nil, errPlatform
}

// Whiteout is only implemented on Linux.
func Whiteout(dst, rel string) error { return errPlatform }

// SetOpaque is only implemented on Linux.
func SetOpaque(dst, rel string) error { return errPlatform }

// TreeDigest is only implemented on Linux.
func TreeDigest(dst string) (string, error) { return "", errPlatform }
