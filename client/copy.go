package client

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
)

// CopyOptions are the options of [Sandbox.CopyIn] and [Sandbox.CopyOut].
// The zero value (or nil) is fine.
type CopyOptions struct {
	// Skipped, if set, is told of every entry a copied tree leaves out:
	// its host path and why (FIFOs, sockets and devices are never
	// copied, nor hardlinks out of a sandbox; an entry that vanished or
	// changed type while it was read is left out too).
	Skipped func(hostPath, reason string)
	// MaxBytes and MaxEntries bound what CopyOut writes on the host: the
	// bytes of regular files and the entries of a tree (0: no bound). A
	// copy that passes one stops with an error, leaving what it wrote.
	MaxBytes   int64
	MaxEntries int
}

// CopyResult says what a copy did.
type CopyResult struct {
	// Path is the path in the sandbox: written by CopyIn, read by
	// CopyOut.
	Path string
	// Host is the host path, absolute: read by CopyIn, written by
	// CopyOut.
	Host string
	// Archive says the copy went as a tar stream (trees and symlinks;
	// every CopyOut) rather than as one file's content.
	Archive bool
	// Bytes is the file's size, or the tar stream's.
	Bytes int64
}

// ErrCopyUnsupported is the error of CopyIn and CopyOut on a system
// other than Linux: they reach host paths only through openat2
// (RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH), so that no symlink a sandbox
// planted is followed, and have no unsafe fallback. It wraps
// errors.ErrUnsupported.
var ErrCopyUnsupported = fmt.Errorf("moat client: copies between the host and a sandbox need Linux (openat2, so that no host symlink is followed): %w", errors.ErrUnsupported)

// ErrHostSymlink is what a [HostPathError] wraps when a host path of a
// copy has a symlink on it, or a destination is one.
var ErrHostSymlink = errors.New("symlink")

// HostPathError is a host path a copy cannot use. Path is the path as
// given; when Err is ErrHostSymlink, Link is the part of Path (cleaned)
// that is a symlink.
type HostPathError struct {
	Path, Link string
	Err        error
}

func (e *HostPathError) Error() string {
	if errors.Is(e.Err, ErrHostSymlink) {
		if e.Link == filepath.Clean(e.Path) {
			return fmt.Sprintf("%s is a symlink: moat follows no symlink on the host in a copy (a sandbox can plant them)", e.Path)
		}
		return fmt.Sprintf("%s: %s is a symlink: moat follows no symlink on the host in a copy (a sandbox can plant them); name the real path", e.Path, e.Link)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

// Unwrap returns Err.
func (e *HostPathError) Unwrap() error { return e.Err }

// ErrCopyPath is what the error of a copy wraps when its destination
// names no entry a copy can write ("/", ".", ".." as the name of a
// copied directory, say).
var ErrCopyPath = errors.New("moat client: a copy cannot go there")

// copyPathError is an error that wraps ErrCopyPath without saying so.
type copyPathError struct{ msg string }

func (e *copyPathError) Error() string        { return e.msg }
func (e *copyPathError) Is(target error) bool { return target == ErrCopyPath }

// CopyIn copies the host path src (a file, a directory tree or a symlink)
// to dst in the sandbox (absolute, or relative to /workspace), as cp -r
// would: into dst under src's name when dst is an existing directory (or
// ends in /), else as dst. A regular file goes as one write
// ([Sandbox.WriteFile], its permission bits kept); a tree or a symlink as
// a tar stream ([Sandbox.Upload]).
//
// A sandbox can plant symlinks in the host directories it writes (its
// workspace, its binds), so no symlink is followed on the host: src with
// a symlink in any component is a [HostPathError] wrapping
// ErrHostSymlink (a relative src is checked from the working directory),
// except its last component, which is copied as a symlink (with a
// trailing /, src must be a real directory). Inside a tree, symlinks are
// copied as symlinks, FIFOs, sockets and devices are left out (told to
// opt.Skipped) and never opened. opt may be nil.
//
// It needs Linux: elsewhere it returns ErrCopyUnsupported.
func (s *Sandbox) CopyIn(ctx context.Context, src, dst string, opt *CopyOptions) (*CopyResult, error) {
	if opt == nil {
		opt = &CopyOptions{}
	}
	return s.copyIn(ctx, src, dst, opt)
}

// CopyOut copies src of the sandbox (a file, a tree or a symlink;
// absolute, or relative to /workspace) to the host path dst, as cp -r
// would: into dst under src's name when dst is an existing directory,
// else as dst. It goes as a tar stream ([Sandbox.Download]).
//
// No symlink is followed on the host, whether the sandbox planted it in
// a directory it writes or it arrives in the stream: dst with a symlink
// in any component, the last one included, is a [HostPathError]
// wrapping ErrHostSymlink, never written through. An existing regular
// file at the destination is overwritten in place (its mode kept), an
// existing directory merged into. Inside the tree, an entry replaces what
// is there (a symlink is removed, not followed), no name leaves the
// tree, no symlink is crossed; entries get the permission bits of the
// sandbox's (less the umask; directories stay u+rwx) and the caller's
// owner. Hardlinks, FIFOs, sockets and devices are left out (told to
// opt.Skipped), sparse entries refused. opt may be nil.
//
// It needs Linux: elsewhere it returns ErrCopyUnsupported.
func (s *Sandbox) CopyOut(ctx context.Context, src, dst string, opt *CopyOptions) (*CopyResult, error) {
	if opt == nil {
		opt = &CopyOptions{}
	}
	return s.copyOut(ctx, src, dst, opt)
}
