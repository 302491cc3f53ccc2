//go:build !linux

package fstree

import (
	"context"
	"fmt"
	"io"
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

// ImportOCI is only implemented on Linux.
func ImportOCI(ctx context.Context, src, ref, dst string, opt Options) (*Image, *Stats, error) {
	return nil, nil, errPlatform
}

// OpenBeneath is only implemented on Linux.
func OpenBeneath(dirfd int, rel string, flags int) (int, error) { return -1, errPlatform }

// Whiteout is only implemented on Linux.
func Whiteout(dst, rel string) error { return errPlatform }

// SetOpaque is only implemented on Linux.
func SetOpaque(dst, rel string) error { return errPlatform }

// TreeDigest is only implemented on Linux.
func TreeDigest(dst string) (string, error) { return "", errPlatform }
