// Package fstree writes and copies filesystem trees from untrusted input:
// into moat's layer store, tar streams (ExtractTar), the layers of OCI
// images (Layers; package fstree/oci reads the images) and overlayfs upper
// directories of sandboxes (CopyDir); on the host of an SDK user, the
// copies between a sandbox and host trees that sandbox may have written
// (ExtractInto, WriteTar, OpenPath: client.Sandbox.CopyOut and CopyIn).
// It links nothing but the standard library and golang.org/x/sys/unix,
// for the SDK's sake (internal/importrules).
//
// Everything the package writes goes through file descriptors. Parent
// directories are opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS) from a descriptor of the destination directory, new
// files are created with O_CREAT|O_EXCL|O_NOFOLLOW, and metadata is set on
// descriptors or with AT_SYMLINK_NOFOLLOW. A symlink written earlier by the
// same input therefore can never redirect a later write: an entry whose path
// crosses a symlink is refused. Nothing is ever written outside the
// destination directory, even on error (the destination may then hold a
// partial tree, which the caller removes).
//
// What is written:
//   - regular files, directories, symlinks (targets verbatim, never
//     followed) and hardlinks (only to regular files already beneath the
//     destination);
//   - in Overlay mode, overlayfs whiteouts (0/0 character devices, mode 0)
//     and the opaque marker of directories, as the xattr
//     user.overlay.opaque="y".
//
// What is not: device nodes, fifos and sockets are skipped and reported in
// Stats. setuid and setgid bits of regular files are stripped (the sticky bit
// is kept). No extended attribute is copied except the overlay opaque marker:
// file capabilities (security.capability), ACLs and security labels are
// dropped. Owners pass through Options.MapID.
//
// Directories are created 0700 and receive their final owner, mode and mtime
// after their contents, so a read-only directory in the input does not block
// its own extraction. Every tree written has a Digest (see TreeDigest) that
// depends only on the tree, not on how it was written.
//
// ExtractInto, a copy into a tree a user owns, differs where that user's
// cp -r would: it merges into what is there, writes as the caller (no
// owners, permission bits through the umask, no times) and leaves out
// hardlinks; see there.
package fstree

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Defaults of Limits' zero fields.
const (
	DefaultMaxBytes   int64 = 8 << 30
	DefaultMaxEntries       = 1_000_000
	DefaultMaxDepth         = 256
)

// Sentinel errors, for callers that branch on the cause of a failure. The
// errors returned wrap them with the entry and the details.
var (
	// ErrHostile: the input tried something that is refused (a path that
	// leaves the root, a write through a symlink, a bad hardlink, ...).
	ErrHostile = errors.New("hostile archive")
	// ErrLimit: the operation would exceed one of Limits.
	ErrLimit = errors.New("limit exceeded")
	// ErrDiskLimit: the copy would allocate more than Limits.MaxDiskBytes
	// (it wraps ErrLimit too).
	ErrDiskLimit = fmt.Errorf("%w: disk space", ErrLimit)
	// ErrTruncated: the tar or compressed stream ended early.
	ErrTruncated = errors.New("truncated archive")
	// ErrNotEmpty: the destination directory is not empty.
	ErrNotEmpty = errors.New("destination directory is not empty")
	// ErrUnsupported: the input or platform is not supported.
	ErrUnsupported = errors.New("not supported")
)

// Limits bound what one import or copy may write. Zero fields take defaults.
//
// MaxBytes counts the bytes actually written, so a decompression bomb or a
// sparse file claiming a huge size fails as soon as it passes the limit (a
// declared size past it fails before anything is written). MaxEntries
// counts every entry read from the source, left out or not, and every
// directory created for one that the source does not list, so that it
// bounds the work of an operation too. MaxDepth bounds the number of
// components of a path. Layers applies them to the image as a whole.
//
// CopyDir keeps the holes of sparse files (see CopyDir): MaxBytes counts
// their apparent size (holes included: it bounds the reading and hashing
// of the copy), and MaxDiskBytes, if set, what the copy really allocates
// (st_blocks × 512 of every file, directory and symlink written; a
// hardlinked file once). A copy that would pass MaxDiskBytes stops with
// ErrDiskLimit before the file that would pass it is written in full.
type Limits struct {
	MaxBytes     int64 // total bytes of regular files written (apparent size); default 8 GiB
	MaxEntries   int   // entries written; default 1,000,000
	MaxDepth     int   // path depth; default 256
	MaxDiskBytes int64 // CopyDir: bytes allocated in the destination; 0 (default): no limit
}

// withDefaults returns l with zero (or negative) fields set to the defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxDiskBytes < 0 {
		l.MaxDiskBytes = 0
	}
	return l
}

// Options of CopyDir, ExtractTar and Layers.
type Options struct {
	Limits Limits
	// MapID translates a source owner into the owner written. nil: identity,
	// except that ids above 65535 become 65534 (they could not be mapped into
	// a sandbox). An error refuses the whole operation.
	MapID func(uid, gid uint32) (uint32, uint32, error)
	// Overlay: the source is an overlayfs upper directory. Whiteouts (0/0
	// character devices) are kept (written as 0/0 character devices, mode
	// 0, owned by 0:0 whatever the source says and without asking MapID:
	// overlayfs creates them with the mounter's credentials) and a
	// directory's opaque marker (xattr "trusted.overlay.opaque" or
	// "user.overlay.opaque" equal to "y"; in a tar, the PAX record
	// "SCHILY.xattr." followed by either name) is written as
	// "user.overlay.opaque"="y". Other overlay xattrs (origin, impure,
	// redirect, ...) are dropped; CopyDir refuses a metacopy file or a
	// redirected directory, whose data lives elsewhere.
	// Without Overlay, every device node, fifo and socket is skipped.
	Overlay bool
	// Filter, if set, is asked about every non-directory source entry (path
	// relative to the source root, slash-separated, no leading slash); false
	// leaves it out. Directories are always written. For tar entries st is
	// made from the header (a hardlink is described as a regular file).
	Filter func(rel string, st *unix.Stat_t) bool
	// Seen, if set, is called for every source entry with its relative path
	// and lstat (directories included, the root excluded).
	Seen func(rel string, st *unix.Stat_t)
}

// HostOptions are the options of ExtractInto and WriteTar, the copies
// between a tar stream and a tree a user owns on the host.
type HostOptions struct {
	// Limits bound what one copy writes (ExtractInto) or reads
	// (WriteTar): bytes of regular files, entries, and the depth of
	// paths below the top entry. Zero fields take the defaults of Limits
	// (8 GiB, a million entries, 256 levels); MaxDiskBytes is not used.
	Limits Limits
	// Skipped, if set, is told of every entry left out of the copy: its
	// path below the top entry (slash-separated) and why (a device, a
	// FIFO or a socket; a hardlink; an entry that vanished or changed
	// type while WriteTar read it).
	Skipped func(rel, why string)
}

// Stats describe what was written. Bytes is the total size of the regular
// files written (their apparent size: a sparse file's holes count);
// DiskBytes, counted by CopyDir only, is what the copy allocated on disk
// (st_blocks × 512 of every entry written, a hardlinked file once).
type Stats struct {
	Entries, Files, Dirs, Symlinks, Hardlinks int
	Bytes                                     int64
	DiskBytes                                 int64
	Skipped                                   []string // paths left out (devices, fifos, sockets), first 100
	SkippedCount                              int
	StrippedSetid                             int    // files whose setuid/setgid bits were removed
	Digest                                    string // "sha256:<hex>" of the tree written (see TreeDigest)
}

// maxSkipped is how many skipped paths Stats.Skipped lists.
const maxSkipped = 100

// skip counts an entry left out (and lists it, up to maxSkipped), and
// tells onSkip, when set, why.
func (s *Stats) skip(rel, why string, onSkip func(rel, why string)) {
	if onSkip != nil {
		onSkip(rel, why)
	}
	s.SkippedCount++
	if len(s.Skipped) < maxSkipped {
		s.Skipped = append(s.Skipped, rel)
	}
}

// defaultMapID is the MapID used when Options.MapID is nil: identity, with
// ids that could not be mapped into a sandbox squashed to 65534.
func defaultMapID(uid, gid uint32) (uint32, uint32, error) {
	const maxID, nobody = 65535, 65534
	if uid > maxID {
		uid = nobody
	}
	if gid > maxID {
		gid = nobody
	}
	return uid, gid, nil
}
