package server

import (
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/fstree"
)

// A step's outputs are copied out of its sandbox as file.download calls
// of the run's owner, each extracted by fstree.ExtractInto into the
// engine's directory for them, at the path it has in the sandbox: output
// /out/report.json lands at <dir>/out/report.json, and a step that takes
// them as inputs at /in sees /in/out/report.json. Nothing of what the
// sandbox wrote is ever followed: its symlinks are kept as symlinks,
// the directories on the way are created without following one (an
// earlier output's symlink cannot lead a later one elsewhere), and each
// archive is capped at Config.MaxFileBytes. The regular files written are
// listed with their sizes and sha256 (hashArtifacts).
//
// A build's outputs take the same path (collectWith), into the build's
// own directory, with the build's output cap over all of them together
// (builds_run.go).

// outputRel checks an output path (absolute, clean, not the root) and
// returns it relative to the root.
func outputRel(p string) (string, error) {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" || strings.IndexByte(p, 0) >= 0 {
		return "", api.Errorf(api.CodeInvalidArgument, "output %q is not a clean absolute path below /", p)
	}
	return p[1:], nil
}

// underDir returns p relative to dir when p is dir or below it (both
// cleaned, absolute), else an error.
func underDir(dir, p string) (string, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", fmt.Errorf("%q is not a clean absolute path", p)
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s is not under the workflow artifact directory", p)
	}
	return rel, nil
}

// collect copies paths out of sandbox id of c into dir, a directory under
// the artifact directory, and lists the regular files written.
func (s *Service) collect(ctx context.Context, c Caller, id string, paths []string, dir string) ([]api.WorkflowArtifact, error) {
	outs := make([]collectItem, len(paths))
	for i, p := range paths {
		rel, err := outputRel(p)
		if err != nil {
			return nil, err
		}
		outs[i] = collectItem{from: p, to: rel}
	}
	// The directory is bound into the sandboxes of the steps that take
	// it as input, read by their users: readable by all (the artifact
	// directory above it, 0700, keeps it from the host's other users).
	root, err := s.collectWith(ctx, c, id, outs, collectOpts{root: s.wf.dir, dir: dir, mode: 0o755, each: s.cfg.MaxFileBytes})
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return hashArtifacts(root)
}

// artifactFile is a regular file collected: its path as listed, size,
// sha256 (hex) and permission bits.
type artifactFile struct {
	path   string
	size   int64
	sha256 string
	mode   uint32
}

// collectItem is one output to copy: from, its path in the sandbox, to
// to, slash-separated, relative to the directory collected into.
type collectItem struct{ from, to string }

// collectOpts say where collectWith copies and how much.
type collectOpts struct {
	// dir is the directory collected into, under root (a directory of
	// the daemon's), reached without a symlink; it gets mode.
	root, dir string
	mode      uint32
	// each caps one output's archive (file content); total, when not
	// zero, caps all of them together (each then takes what is left).
	each, total int64
	// skipped, if set, is told of what an output held that was not
	// copied: its path below the output, and why (fstree's
	// HostOptions.Skipped).
	skipped func(i int, rel, why string)
	// placed, if set, is called once output i has been copied, with the
	// type (unix.S_IFMT bits, st_mode's) of what now is at its place; an
	// error stops the collection.
	placed func(i int, typ uint32) error
}

// collectWith copies outs out of sandbox id of c, each a file.download of
// c extracted by fstree.ExtractInto at its place beneath opt.dir, and
// returns that directory, open, for the caller to hash and close. An
// error names the output it is about (errors.Is finds fstree.ErrLimit for
// a cap reached, and the download's API error).
func (s *Service) collectWith(ctx context.Context, c Caller, id string, outs []collectItem, opt collectOpts) (*artifactDir, error) {
	root, err := openArtifactDir(opt.root, opt.dir)
	if err != nil {
		return nil, err
	}
	if err := root.chmod(opt.mode); err != nil {
		root.Close()
		return nil, err
	}
	var used int64
	for i, o := range outs {
		limit := opt.each
		if opt.total > 0 {
			// At least a byte: zero would mean fstree's default cap.
			limit = max(opt.total-used, 1)
			if opt.each > 0 {
				limit = min(limit, opt.each)
			}
		}
		var skipped func(rel, why string)
		if opt.skipped != nil {
			skipped = func(rel, why string) { opt.skipped(i, rel, why) }
		}
		n, typ, err := s.collectOne(ctx, c, id, o.from, root, o.to, limit, skipped)
		if err == nil && opt.total > 0 && used+n > opt.total {
			err = fmt.Errorf("%w: the outputs add up to more than %d bytes", fstree.ErrLimit, opt.total)
		}
		if err == nil && opt.placed != nil {
			err = opt.placed(i, typ)
		}
		if err != nil {
			root.Close()
			return nil, fmt.Errorf("output %s: %w", o.from, err)
		}
		used += n
	}
	return root, nil
}

// collectOne downloads p from the sandbox, at most max bytes of file
// content, and extracts it at rel beneath root; it returns the bytes of
// the regular files written and the type of what is now at rel (zero if
// nothing is).
func (s *Service) collectOne(ctx context.Context, c Caller, id, p string, root *artifactDir, rel string, max int64, skipped func(rel, why string)) (int64, uint32, error) {
	parent, err := root.mkdirs(path.Dir(rel))
	if err != nil {
		return 0, 0, err
	}
	defer parent.Close()
	pr, pw := io.Pipe()
	// Which side failed first: the extraction (its error is the cause,
	// the download's only the broken pipe), or the download (ENOENT, say:
	// the extraction then only saw the stream end).
	var downloaded, extractFirst atomic.Bool
	var written int64
	extracted := make(chan error, 1)
	go func() {
		st, err := fstree.ExtractInto(ctx, pr, parent.fd(), path.Base(rel), fstree.HostOptions{
			Limits: fstree.Limits{MaxBytes: max}, Skipped: skipped})
		if st != nil {
			written = st.Bytes
		}
		if err == nil {
			// The archive's end-of-archive padding.
			_, err = io.Copy(io.Discard, pr)
		}
		if err != nil {
			extractFirst.Store(!downloaded.Load())
			pr.CloseWithError(err)
		}
		extracted <- err
	}()
	in := internalInput(api.FilePath{Sandbox: id, Path: p})
	in.out = pw
	_, derr := s.dispatch(ctx, c, api.OpFileDownload, s.downloadUpTo(max), in)
	downloaded.Store(true)
	pw.CloseWithError(derr)
	xerr := <-extracted
	if xerr != nil && extractFirst.Load() || derr == nil {
		if xerr != nil {
			return 0, 0, xerr
		}
		typ, err := parent.typeOf(path.Base(rel))
		return written, typ, err
	}
	return 0, 0, derr
}

// downloadUpTo is the handler of file.download with at most limit bytes of
// file content (a smaller max_bytes of the request lowers it) in place of
// Config.MaxFileBytes: the daemon's own copies of outputs, which have
// caps of their own.
func (s *Service) downloadUpTo(limit int64) handler {
	return func(ctx context.Context, c Caller, in *input) (any, error) {
		req, err := decodeFile(in, filePath)
		if err != nil {
			return nil, err
		}
		max := limit
		if req.MaxBytes < 0 {
			return nil, api.Errorf(api.CodeInvalidArgument, "max_bytes must not be negative")
		} else if req.MaxBytes > 0 && req.MaxBytes < limit {
			max = req.MaxBytes
		}
		return s.downloadTar(ctx, c, in, req, max)
	}
}
