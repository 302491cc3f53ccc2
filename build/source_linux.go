package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/fstree"
)

// Unpack checks the source package r (a tar stream, plain or gzip,
// detected by its magic number) and writes it, normalized, to <layer>/src,
// then makes <layer>/build/{home,tmp,cache}. layer must be an existing
// empty directory of the daemon's; on error it may hold a partial tree,
// which the caller removes with it.
//
// r is read once, as a stream, and every header is checked before
// anything of it is written: only relative, clean paths (a leading "./"
// and a directory's trailing "/" aside; absolute paths, "..", empty
// names, NUL bytes, a path listed twice or beneath a non-directory are
// refused, api.ReasonSourceBadPath), symlinks whose target, joined to
// their directory, stays in the tree (lexically; ReasonSourceBadPath),
// hardlinks only to a regular file listed earlier (ReasonSourceBadPath),
// no devices or fifos (ReasonSourceBadType), at most lim.MaxFiles entries
// counting the parent directories the tar does not list
// (ReasonSourceTooManyFiles), no regular file above lim.MaxFileBytes
// (ReasonSourceFileTooLarge), their sizes adding up to at most
// lim.MaxTotalBytes (ReasonSourceTooLarge), and a readable (gzip) tar
// with at most 1 MiB after its end (ReasonSourceUnreadable). setuid and
// setgid bits are stripped (Source.Stripped). Those refusals are
// *Refusal; other errors (of r, of the host's disk, ctx's) are wrapped.
// lim's zero fields are Defaults'.
//
// The normalized tar written to fstree.ExtractTar has a root entry "./"
// (0755) first, the parents the input did not list as 0755 directories,
// every owner 1000:1000 (SourceUID, SourceGID), every mtime the epoch,
// the modes of the input less setid, no PAX records or extended
// attributes, and the input's root entries dropped: Source.Digest depends
// only on the tree, not on how it was packed. ExtractTar's own limits and
// checks stay on behind Unpack's.
//
// If r's Read blocks, Unpack waits for it: a caller that must stop
// earlier makes r fail (closes the request's body).
func Unpack(ctx context.Context, r io.Reader, layer string, lim Limits, epoch int64) (*Source, error) {
	lim = lim.Or(Defaults)
	lfd, err := unix.Open(layer, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("build: open the layer %s: %w", layer, err)
	}
	defer unix.Close(lfd)
	if err := unix.Mkdirat(lfd, "src", 0o700); err != nil {
		return nil, fmt.Errorf("build: make %s: %w", filepath.Join(layer, "src"), err)
	}
	src, err := extract(ctx, r, filepath.Join(layer, "src"), lim, epoch)
	if err != nil {
		return nil, err
	}
	if err := makeBuildDirs(lfd, epoch); err != nil {
		return nil, fmt.Errorf("build: %s: %w", layer, err)
	}
	return src, nil
}

// extract normalizes r (in this goroutine) into fstree.ExtractTar (in
// another) writing dst, through a pipe. Whichever side fails first stops
// the other; both have ended when it returns.
func extract(ctx context.Context, r io.Reader, dst string, lim Limits, epoch int64) (*Source, error) {
	pr, pw := io.Pipe()
	type result struct {
		st  *fstree.Stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := fstree.ExtractTar(ctx, pr, dst, fstree.Options{
			Limits: fstree.Limits{
				MaxBytes: lim.MaxTotalBytes,
				// The root, and every entry of the tree; a directory
				// listed after its contents has two headers.
				MaxEntries: 2*lim.MaxFiles + 1,
			},
			MapID: func(uint32, uint32) (uint32, uint32, error) { return SourceUID, SourceGID, nil },
		})
		if err == nil {
			err = errExtracted
		}
		pr.CloseWithError(err) // the normalizer's writes fail from now on
		done <- result{st, err}
	}()
	n := newNormalizer(lim, epoch)
	out := &sink{w: pw}
	nerr := n.run(ctx, r, out)
	pw.CloseWithError(nerr) // nil: EOF, the extraction may finish
	res := <-done
	switch {
	case nerr != nil && out.err == nil:
		// The normalizer's own error: a refusal, the input's or ctx's.
		if _, ok := AsRefusal(nerr); ok {
			return nil, nerr
		}
		return nil, fmt.Errorf("build: unpack the source: %w", nerr)
	case res.err != errExtracted:
		return nil, extractErr(res.err)
	}
	st := res.st
	if st.SkippedCount > 0 {
		// Unreachable: the normalizer refuses what ExtractTar skips.
		return nil, refuse(api.ReasonSourceBadType, "entry %s: not a file, directory or link", quote(st.Skipped[0]))
	}
	n.src.Digest = st.Digest
	return n.src, nil
}

// errExtracted closes the pipe once ExtractTar has returned without error.
var errExtracted = errors.New("the source is extracted")

// extractErr maps an error of ExtractTar. What it refuses, the
// normalizer should have refused first: a refusal anyway (defence in
// depth).
func extractErr(err error) error {
	switch {
	case errors.Is(err, fstree.ErrHostile):
		return refuse(api.ReasonSourceBadPath, "refused by the extraction: %v", err)
	case errors.Is(err, fstree.ErrLimit):
		return refuse(api.ReasonSourceTooLarge, "refused by the extraction: %v", err)
	case errors.Is(err, fstree.ErrTruncated):
		return refuse(api.ReasonSourceUnreadable, "refused by the extraction: %v", err)
	}
	return fmt.Errorf("build: write the source: %w", err)
}

// sink is the normalizer's output, remembering that a write failed (the
// extraction stopped: its error is the one to report).
type sink struct {
	w   io.Writer
	err error
}

func (s *sink) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil && s.err == nil {
		s.err = err
	}
	return n, err
}

// buildDirs are made under <layer>/build, each the build's, 0755.
var buildDirs = []string{"home", "tmp", "cache"}

// makeBuildDirs makes build/ and its directories in the layer lfd, owned
// by the build's user, 0755, their mtime the epoch.
func makeBuildDirs(lfd int, epoch int64) error {
	if err := unix.Mkdirat(lfd, "build", 0o700); err != nil {
		return fmt.Errorf("mkdir build: %w", err)
	}
	bfd, err := unix.Openat(lfd, "build", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open build: %w", err)
	}
	defer unix.Close(bfd)
	for _, d := range buildDirs {
		if err := unix.Mkdirat(bfd, d, 0o700); err != nil {
			return fmt.Errorf("mkdir build/%s: %w", d, err)
		}
		if err := buildDirMeta(bfd, d, epoch); err != nil {
			return fmt.Errorf("build/%s: %w", d, err)
		}
	}
	if err := buildDirMeta(lfd, "build", epoch); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	return nil
}

// buildDirMeta gives the directory name in dirfd its owner, mode and
// mtime, following no symlink.
func buildDirMeta(dirfd int, name string, epoch int64) error {
	if err := unix.Fchownat(dirfd, name, SourceUID, SourceGID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	// fchmodat follows a symlink; name is a directory made just now, in a
	// directory only the daemon writes.
	if err := unix.Fchmodat(dirfd, name, 0o755, 0); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	ts := []unix.Timespec{{Sec: epoch}, {Sec: epoch}}
	if err := unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}
