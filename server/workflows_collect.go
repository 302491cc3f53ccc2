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
	rels := make([]string, len(paths))
	for i, p := range paths {
		rel, err := outputRel(p)
		if err != nil {
			return nil, err
		}
		rels[i] = rel
	}
	root, err := openArtifactDir(s.wf.dir, dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	// The directory is bound into the sandboxes of the steps that take
	// it as input, read by their users: readable by all (the artifact
	// directory above it, 0700, keeps it from the host's other users).
	if err := root.chmod(0o755); err != nil {
		return nil, err
	}
	for i, p := range paths {
		if err := s.collectOne(ctx, c, id, p, root, rels[i]); err != nil {
			return nil, fmt.Errorf("output %s: %w", p, err)
		}
	}
	return hashArtifacts(root)
}

// collectOne downloads p from the sandbox and extracts it at rel beneath
// root.
func (s *Service) collectOne(ctx context.Context, c Caller, id, p string, root *artifactDir, rel string) error {
	parent, err := root.mkdirs(path.Dir(rel))
	if err != nil {
		return err
	}
	defer parent.Close()
	pr, pw := io.Pipe()
	// Which side failed first: the extraction (its error is the cause,
	// the download's only the broken pipe), or the download (ENOENT, say:
	// the extraction then only saw the stream end).
	var downloaded, extractFirst atomic.Bool
	extracted := make(chan error, 1)
	go func() {
		_, err := fstree.ExtractInto(ctx, pr, parent.fd(), path.Base(rel), fstree.HostOptions{
			Limits: fstree.Limits{MaxBytes: s.cfg.MaxFileBytes}})
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
	_, derr := s.call(ctx, c, api.OpFileDownload, in)
	downloaded.Store(true)
	pw.CloseWithError(derr)
	xerr := <-extracted
	if xerr != nil && extractFirst.Load() || derr == nil {
		return xerr
	}
	return derr
}
