package linux

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/fstree"
	"github.com/moat-sandbox/moat/sandbox"
)

// A sandbox's diff export (sandbox.DiffExporter) in this runtime: its
// changes are the entries of its overlay's upper layer, which the host
// reads through its own descriptor of the scratch tmpfs and copies with
// fstree (owners shifted from the sandbox's host id range back to the ids
// it sees, overlay whiteouts and opaque markers kept, holes kept, limits
// enforced while writing). To copy only what changed since an earlier
// export, the sandbox keeps the identity of every upper entry at its
// recent exports (diffState): an entry whose identity is unchanged is
// left out, one gone since gets a whiteout, a directory re-created since
// becomes opaque.

// fileID identifies an entry of an upper layer at an export: what any
// change to its content or metadata (which moves ctime) or its
// replacement would alter.
type fileID struct {
	ino, size  uint64
	ctime      int64
	mode, uid  uint32
	gid, nlink uint32
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{ino: st.Ino, size: uint64(st.Size), ctime: st.Ctim.Nano(), mode: uint32(st.Mode),
		uid: st.Uid, gid: st.Gid, nlink: uint32(st.Nlink)}
}

// manifest maps the path of every entry of an upper layer (relative,
// slash-separated) to its identity at one export.
type manifest map[string]fileID

// diffState is what a sandbox's exports are relative to: the manifests of
// its latest export and of the base that export was relative to (the
// marks a caller may pass as DiffOptions.Since). Guarded by
// linuxSandbox.capture, which ExportDiff holds exclusively.
type diffState struct {
	last  uint64              // the latest mark handed out; 0: none yet
	marks map[uint64]manifest // at most two, see above

	// onEntry, if set (tests), is called for every upper entry after it
	// was looked at and before it is opened.
	onEntry func(rel string)
}

// base returns the manifest of the export since (nil for 0: the upper
// layer was empty when the sandbox was made).
func (d *diffState) base(since uint64) (manifest, error) {
	if since == 0 {
		return nil, nil
	}
	m, ok := d.marks[since]
	if !ok {
		return nil, fmt.Errorf("export diff since %d: %w (the sandbox knows %s)", since, sandbox.ErrDiffBase, d.known())
	}
	return m, nil
}

// known lists the marks d keeps, for an error message.
func (d *diffState) known() string {
	var ms []string
	for m := range d.marks {
		ms = append(ms, fmt.Sprint(m))
	}
	sort.Strings(ms)
	return "0 " + strings.Join(ms, " ")
}

// keep records m, the manifest of a new export relative to since, and
// returns its mark. Only it and since's manifest are kept: a caller moves
// on from the new export, or discards it and exports since again.
func (d *diffState) keep(since uint64, m manifest) uint64 {
	d.last++
	kept := map[uint64]manifest{d.last: m}
	if since != 0 {
		kept[since] = d.marks[since]
	}
	d.marks = kept
	return d.last
}

// diffCopy is the result of copying an upper layer.
type diffCopy struct {
	stats     *fstree.Stats
	seen      manifest // every entry of the upper layer
	whiteouts int      // overlay whiteouts copied
}

// copyUpper copies the upper layer upper (the host's descriptor of it)
// into dst, an empty directory: the entries that are not in prev as they
// are now (everything, if prev is nil), owners shifted down from idBase.
// The sandbox is paused (the caller's part).
func (d *diffState) copyUpper(ctx context.Context, upper *os.File, idBase uint32, dst string, prev manifest, lim sandbox.DiffLimits) (*diffCopy, error) {
	c := &diffCopy{seen: manifest{}}
	opt := fstree.Options{
		Limits:  fstree.Limits{MaxBytes: lim.MaxBytes, MaxEntries: lim.MaxEntries, MaxDepth: lim.MaxDepth, MaxDiskBytes: lim.MaxDiskBytes},
		Overlay: true,
		MapID:   shiftIDs(idBase),
		Seen: func(rel string, st *unix.Stat_t) {
			c.seen[rel] = idOf(st)
			if d.onEntry != nil {
				d.onEntry(rel)
			}
		},
		Filter: func(rel string, st *unix.Stat_t) bool {
			if prev != nil {
				if old, ok := prev[rel]; ok && old == idOf(st) {
					return false
				}
			}
			if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
				c.whiteouts++ // copied as a whiteout (Overlay)
			}
			return true
		},
	}
	st, err := fstree.CopyDir(ctx, fmt.Sprintf("/proc/self/fd/%d/.", upper.Fd()), dst, opt)
	if err != nil {
		return nil, limitError(err)
	}
	c.stats = st
	return c, nil
}

// shiftIDs maps host ids of a sandbox (base .. base+65535) to the ids the
// sandbox sees; anything else cannot come from the sandbox and is refused.
func shiftIDs(base uint32) func(uid, gid uint32) (uint32, uint32, error) {
	return func(uid, gid uint32) (uint32, uint32, error) {
		if uid < base || uid-base > 65535 || gid < base || gid-base > 65535 {
			return 0, 0, fmt.Errorf("owner %d:%d is outside the sandbox's id range", uid, gid)
		}
		return uid - base, gid - base, nil
	}
}

// diffMarkers completes a diff written from an upper layer whose state at
// the base export was prev (nil: it was empty): an entry gone since then
// gets a whiteout (unless a parent directory went too or was re-created),
// a directory re-created since then becomes opaque, and a directory that
// is the same one as then loses an opaque marker it carried (the lower
// layers hold its earlier children). It returns the markers as sorted
// lines for the digest, and the whiteout count. It reads dst only, not
// the sandbox: the sandbox may run meanwhile.
func diffMarkers(dst string, prev, seen manifest) ([]string, int, error) {
	if prev == nil {
		return nil, 0, nil
	}
	var lines []string
	recreated := map[string]bool{}
	for rel, id := range seen {
		if id.mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		old, ok := prev[rel]
		switch {
		case ok && old.ino == id.ino && old.mode&unix.S_IFMT == unix.S_IFDIR:
			if err := clearOpaque(dst, rel); err != nil {
				return nil, 0, err
			}
		case ok:
			recreated[rel] = true
			if err := fstree.SetOpaque(dst, rel); err != nil {
				return nil, 0, err
			}
			lines = append(lines, "opaque "+rel)
		}
	}
	n := 0
	for rel := range prev {
		if _, ok := seen[rel]; ok {
			continue
		}
		dir := path.Dir(rel)
		if dir != "." {
			if _, ok := seen[dir]; !ok || recreated[dir] {
				continue // covered by the parent's whiteout or opacity
			}
		}
		if err := fstree.Whiteout(dst, rel); err != nil {
			return nil, 0, err
		}
		lines = append(lines, "whiteout "+rel)
		n++
	}
	sort.Strings(lines)
	return lines, n, nil
}

// clearOpaque removes overlayfs' opaque marker from directory rel of dst,
// resolved beneath dst without following symlinks.
func clearOpaque(dst, rel string) error {
	root, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("diff: open %s: %w", dst, err)
	}
	defer unix.Close(root)
	fd, err := fstree.OpenBeneath(root, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("diff %s: %w", rel, err)
	}
	defer unix.Close(fd)
	if err := unix.Fremovexattr(fd, "user.overlay.opaque"); err != nil && !errors.Is(err, unix.ENODATA) {
		return fmt.Errorf("diff %s: %w", rel, err)
	}
	return nil
}

// diffDigest is the digest of a diff: that of the tree copied and of the
// markers written after.
func diffDigest(copied string, markers []string) string {
	sum := sha256.Sum256([]byte("moat-diff-1\n" + copied + "\n" + strings.Join(markers, "\n")))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// diffLimitError is an fstree limit error that also wraps the
// sandbox package's sentinel of the same cause.
type diffLimitError struct{ kind, err error }

func (e *diffLimitError) Error() string   { return e.err.Error() }
func (e *diffLimitError) Unwrap() []error { return []error{e.kind, e.err} }

// limitError makes fstree's limit errors the contract's
// (sandbox.ErrDiffLimit, ErrDiffDiskLimit), keeping their message and
// fstree's sentinels; other errors are returned as they are.
func limitError(err error) error {
	switch {
	case errors.Is(err, fstree.ErrDiskLimit):
		return &diffLimitError{kind: sandbox.ErrDiffDiskLimit, err: err}
	case errors.Is(err, fstree.ErrLimit):
		return &diffLimitError{kind: sandbox.ErrDiffLimit, err: err}
	}
	return err
}
