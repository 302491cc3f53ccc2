package sandbox

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"time"
)

// FileInfo describes one file inside a sandbox.
type FileInfo struct {
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other".
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits (and setuid/setgid/sticky)
	ModTime time.Time `json:"mtime"`
	// Target is a symlink's target, as stored (never followed on the host).
	Target string `json:"target,omitempty"`
}

// Files are file operations performed by the sandbox's agent INSIDE the
// sandbox, with the credentials of the sandbox user and under its
// Landlock domain and seccomp filter, so the kernel enforces the policy on
// every path. Paths are resolved against the sandbox's root as the sandbox
// sees it ("/workspace/x", or relative to /workspace); symlinks resolve
// inside that root, never on the host.
type Files interface {
	// ReadFile returns at most max bytes of a regular file; a larger file
	// is an error wrapping ErrTooBig.
	ReadFile(ctx context.Context, path string, max int64) ([]byte, error)
	// WriteFile replaces path atomically (temporary file, fsync, rename)
	// with at most max bytes read from r and returns the size written.
	WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode, max int64) (int64, error)
	// ReadDir lists a directory, sorted by name, at most MaxDirEntries.
	ReadDir(ctx context.Context, path string) ([]FileInfo, error)
	// Stat describes path without following a final symlink.
	Stat(ctx context.Context, path string) (*FileInfo, error)
	// Mkdir creates a directory (and its parents if parents is set).
	Mkdir(ctx context.Context, path string, mode fs.FileMode, parents bool) error
	// Remove deletes a file or an empty directory, or a whole tree if
	// recursive is set.
	Remove(ctx context.Context, path string, recursive bool) error
	// Rename moves from to to, replacing to if it is a file.
	Rename(ctx context.Context, from, to string) error
	// PutTar extracts a tar stream (at most max bytes unpacked) under dir.
	// Entries with absolute paths or "..", links leaving dir, device
	// nodes and FIFOs are refused; setuid, setgid and sticky bits are
	// dropped.
	PutTar(ctx context.Context, dir string, r io.Reader, max int64) error
	// GetTar writes path (a file or a tree) as a tar stream to w, at most
	// max bytes of file content.
	GetTar(ctx context.Context, path string, w io.Writer, max int64) error
}

// MaxDirEntries bounds one ReadDir.
const MaxDirEntries = 100_000

// FileError is a failed file operation inside a sandbox. Code is the
// errno name the kernel returned inside (ENOENT, EACCES, EEXIST, ENOTDIR,
// EISDIR, ENOTEMPTY, EROFS, ELOOP, EXDEV, ENOSPC…) or one of moat's own
// (ETOOBIG, EBADTAR, EINVAL).
type FileError struct {
	Op, Path, Code, Message string
}

func (e *FileError) Error() string { return e.Op + " " + e.Path + ": " + e.Message }

// Is maps the codes callers branch on to the standard errors.
func (e *FileError) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Code == "ENOENT"
	case fs.ErrExist:
		return e.Code == "EEXIST" || e.Code == "ENOTEMPTY"
	case fs.ErrPermission:
		return e.Code == "EACCES" || e.Code == "EPERM" || e.Code == "EROFS"
	case ErrTooBig:
		return e.Code == "ETOOBIG"
	}
	return false
}

// ErrTooBig: a file or archive is over the size cap of the operation.
var ErrTooBig = errors.New("over the size limit")
