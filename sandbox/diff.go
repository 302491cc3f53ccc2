package sandbox

import (
	"context"
	"errors"
	"fmt"
)

// DiffExporter is a sandbox that can export what changed in its root
// filesystem as a layer: the runtime side of a snapshot. The runtime owns
// everything that depends on how it keeps the sandbox's files (an
// overlayfs upper directory and a host id range for runtime/linux, a disk
// inside the guest for a microVM) and what it needs to know to export only
// what changed; the caller (package templates) owns the rest: the staging
// directory, the digest of the snapshot, deduplication, quota accounting
// and the commit into its store.
//
// Implemented by runtime/linux's sandboxes. A caller holding a sandbox
// without it cannot snapshot it (the server answers 501 unimplemented).
//
// # The layer format
//
// A layer is a directory tree on the host, in the format of a lower layer
// of an overlayfs mounted with the userxattr option (the format the
// template store keeps and RootFS.Layers mounts):
//
//   - regular files, directories and symlinks (targets verbatim: a layer
//     is never resolved on the host), and hard links between regular files
//     of the same layer;
//   - owners are the ids the sandbox sees (0 is its root, 1000 its user),
//     0 to 65535; never host ids;
//   - modes are permission bits; setuid and setgid are removed from
//     regular files (the sticky bit is kept);
//   - an entry deleted from what lies below is a whiteout: a character
//     device 0/0 with mode 0, owned by 0:0, at its path;
//   - a directory whose contents below must not show through (it was
//     deleted and made again) is opaque: it carries the extended attribute
//     user.overlay.opaque="y";
//   - nothing else: no device node, fifo or socket (they are left out and
//     counted in DiffStats.Skipped), no extended attribute other than the
//     opaque marker (no file capabilities, ACLs or security labels), no
//     overlayfs metacopy or redirect;
//   - sparse files keep their holes: a layer costs about what the
//     sandbox's files allocate, not their apparent size.
//
// A diff is such a layer. Stacked over the layers the sandbox was created
// from and the diffs of the exports it is relative to (DiffOptions.Since),
// it shows the sandbox's root filesystem as it was at the export. It holds
// every entry added or changed since then (a changed file whole), the
// directories on their paths (unchanged directories may be written too), a
// whiteout for every entry gone since then (one for a directory gone with
// its contents) and an opaque marker on every directory re-created since
// then; an unchanged file is not in it. Paths the runtime mounts into the
// sandbox from the host (the workspace, binds) are not part of the root
// filesystem and are never exported.
type DiffExporter interface {
	// ExportDiff pauses every process of the sandbox, writes into dst
	// the diff of its root filesystem relative to opts.Since, and resumes
	// the processes, whether or not the export succeeded. The diff is one
	// consistent point in time; the runtime also holds its own file
	// operations into the sandbox (Files) off while it reads.
	//
	// dst is an existing empty directory on the host, which the caller
	// created and removes: on error it may hold part of a diff. Nothing
	// is written outside dst, whatever the sandbox put in its files.
	// The limits of opts.Limits are enforced while writing: an export
	// that would pass one stops there with an error wrapping
	// ErrDiffLimit (ErrDiffDiskLimit for MaxDiskBytes).
	//
	// Errors: ErrClosed once the sandbox is shut down; ErrNoFreezer if
	// the runtime cannot pause it on this host; ErrDiffBase if
	// opts.Since is not an export the sandbox still knows (see
	// DiffOptions). Exports of one sandbox are serialised.
	ExportDiff(ctx context.Context, dst string, opts DiffOptions) (*DiffStats, error)
}

// DiffOptions are the parameters of one ExportDiff.
type DiffOptions struct {
	// Since is the DiffStats.Mark of the export this one is relative to;
	// 0 makes it relative to the sandbox's creation (everything it wrote
	// in its root filesystem). A sandbox knows the mark of its latest
	// export and the Since that export was relative to, so a caller
	// passes either the mark of the last export it kept, or, if it
	// discarded the latest export (the snapshot was not stored), that
	// export's Since again.
	Since uint64
	// Limits bound what the export may write.
	Limits DiffLimits
}

// DiffLimits bound what one ExportDiff may write. Zero fields take the
// runtime's defaults (runtime/linux: 8 GiB, 1,000,000 entries, depth 256,
// no disk limit).
type DiffLimits struct {
	// MaxBytes bounds the apparent size of the regular files written,
	// holes included (it bounds the reading and hashing of the export).
	MaxBytes int64
	// MaxEntries bounds the entries read from the sandbox's filesystem,
	// exported or not.
	MaxEntries int
	// MaxDepth bounds the number of components of a path.
	MaxDepth int
	// MaxDiskBytes bounds what the diff allocates in dst (st_blocks ×
	// 512 of what is written, a hard-linked file once): a file that
	// would pass it is refused before it is written in full. 0: no limit.
	MaxDiskBytes int64
}

// DiffStats describe what an ExportDiff wrote.
type DiffStats struct {
	// Mark names this export for a later DiffOptions.Since.
	Mark uint64
	// Digest is "sha256:" and the hex SHA-256 of the diff as written:
	// equal diffs have equal digests, whatever the order they were
	// written in.
	Digest string
	// Bytes is the apparent size of the regular files written (holes
	// included); DiskBytes what the diff allocates in dst.
	Bytes     int64
	DiskBytes int64
	// Entries counts the entries written (the root excluded); Whiteouts
	// those of them that are whiteouts (deletions).
	Entries   int
	Whiteouts int
	// Skipped counts the entries left out (device nodes, fifos,
	// sockets); StrippedSetid the files whose setuid or setgid bit was
	// removed.
	Skipped       int
	StrippedSetid int
}

// Errors of ExportDiff.
var (
	// ErrNoFreezer: the runtime cannot pause a sandbox on this host (for
	// runtime/linux: no cgroup freezer), so it cannot export a
	// consistent diff.
	ErrNoFreezer = errors.New("no cgroup freezer on this host: a sandbox cannot be paused for a snapshot")
	// ErrDiffLimit: the export would pass one of its DiffLimits.
	ErrDiffLimit = errors.New("diff export limit exceeded")
	// ErrDiffDiskLimit: the export would allocate more than
	// DiffLimits.MaxDiskBytes (it wraps ErrDiffLimit too).
	ErrDiffDiskLimit = fmt.Errorf("%w: disk space", ErrDiffLimit)
	// ErrDiffBase: DiffOptions.Since is not an export the sandbox knows.
	ErrDiffBase = errors.New("unknown base export")
)
