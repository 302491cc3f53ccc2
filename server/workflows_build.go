package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/build"
	"github.com/moat-sandbox/moat/fstree"
	"github.com/moat-sandbox/moat/workflow/engine"
)

// A workflow's build step (engine.Builder) is a build.create of the run's
// owner through the dispatcher, as a build made through the API: its
// settings checked and narrowed, its source unpacked and checked, its
// sandbox made, its command judged, its end recorded and audited (kind
// "build"), its record and files kept until build.delete or the builds'
// retention. The source is the tree of the source step's collected
// outputs, under the engine's artifact directory, sent as a tar that
// fstree.WriteTar makes (no symlink followed; the build's Unpack checks
// it as any source). The build's artifacts are then copied from its out
// directory into the step's, at src/PATH, each read without following a
// symlink, written with O_EXCL|O_NOFOLLOW and checked against the size
// and sha256 of the build's record.

var _ engine.Builder = wfBackend{}

// buildWaitAfterCancel bounds the wait for a build stopped because its
// step's context ended (the run cancelled, the engine closing): its
// sandbox deleted and its end recorded.
const buildWaitAfterCancel = time.Minute

// errSourceSent ends the writing of a source nobody reads any more (the
// build.create call returned).
var errSourceSent = errors.New("the build no longer reads its source")

// errStepStopped is why a build step's build was stopped (the cause of
// its context; its message): the step's context ended.
var errStepStopped = errors.New("its workflow step was stopped (the run was cancelled, or the daemon stops)")

// Build runs one build of a build step: see the comment above.
func (b wfBackend) Build(ctx context.Context, o engine.Owner, req engine.BuildRequest) (*api.Build, error) {
	s, c := b.s, ownerCaller(o)
	src, err := openArtifactDir(s.wf.dir, req.Source)
	if err != nil {
		return nil, fmt.Errorf("the source %s: %w", req.Source, err)
	}
	defer src.Close()
	out, err := openArtifactDir(s.wf.dir, req.OutDir)
	if err != nil {
		return nil, err
	}
	defer out.Close()

	set := req.Settings
	set.Content = nil
	// Answered once the source is in place: the wait is the step's (its
	// context stops the build).
	set.Detach = true
	in := internalInput(set)
	pr, pw := io.Pipe()
	in.body = pr
	var wg sync.WaitGroup
	var sendErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sendErr = sendSource(ctx, pw, src)
		pw.CloseWithError(sendErr)
	}()
	resp, err := s.call(ctx, c, api.OpBuildCreate, in)
	pr.CloseWithError(errSourceSent)
	wg.Wait()
	if errors.Is(sendErr, errSourceSent) || errors.Is(sendErr, io.ErrClosedPipe) {
		sendErr = nil
	}
	if err != nil {
		return nil, capacityError(errors.Join(err, sendErr))
	}
	bd := resp.(*api.Build)
	if bd.Status == api.BuildRunning {
		if bd, err = s.awaitBuild(ctx, c, bd.ID); err != nil {
			return bd, err
		}
	}
	if sendErr != nil {
		// The build saw a source cut short: say why.
		return bd, fmt.Errorf("sending the source %s: %w", req.Source, sendErr)
	}
	if bd.Status != api.BuildSucceeded {
		return bd, nil
	}
	if err := s.placeArtifacts(bd, out); err != nil {
		return bd, fmt.Errorf("the artifacts of build %s: %w", bd.ID, err)
	}
	return bd, nil
}

// awaitBuild waits for the end of c's build id and returns its record.
// When ctx ends first, the build is stopped (its sandbox deleted, its end
// recorded as interrupted), and its record returned with ctx's error.
func (s *Service) awaitBuild(ctx context.Context, c Caller, id string) (*api.Build, error) {
	run := s.builds.running(c.Tenant, id)
	if run == nil {
		// Ended already.
		return s.storedBuild(context.WithoutCancel(ctx), c.Tenant, id)
	}
	final, err := run.wait(ctx)
	if err == nil {
		return &final, nil
	}
	run.cancel(errStepStopped)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), buildWaitAfterCancel)
	defer cancel()
	final, werr := run.wait(wctx)
	if werr != nil {
		return nil, err
	}
	return &final, err
}

// sendSource writes the tree of src to w as a build's source package: a
// tar of its entries relative to the tree (WriteTar's top entry taken
// off). A special file, which WriteTar leaves out, is an error: the
// build would see a different tree than the step's outputs.
func sendSource(ctx context.Context, w io.Writer, src *artifactDir) error {
	const top = "src"
	tr, tw := io.Pipe()
	var mu sync.Mutex
	var skipped error
	done := make(chan error, 1)
	go func() {
		_, err := fstree.WriteTar(ctx, tw, src.fd(), "", top, fstree.HostOptions{
			Skipped: func(rel, why string) {
				mu.Lock()
				defer mu.Unlock()
				if skipped == nil {
					skipped = fmt.Errorf("%q: %s: a source holds files, directories and symlinks only", rel, why)
				}
			}})
		tw.CloseWithError(err)
		done <- err
	}()
	err := build.Retar(tr, w, top, nil, func() error {
		mu.Lock()
		defer mu.Unlock()
		return skipped
	})
	tr.CloseWithError(cmpErr(err, errSourceSent))
	werr := <-done
	if err == nil && werr != nil {
		err = werr
	}
	return err
}

// cmpErr is err, or def when err is nil.
func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// placeArtifacts copies the artifacts of build bd from its out directory
// into out (a step's out directory, made readable by the sandboxes of the
// steps that take it as input) at src/PATH.
func (s *Service) placeArtifacts(bd *api.Build, out *artifactDir) error {
	if err := out.chmod(0o755); err != nil {
		return err
	}
	from := outDir(s.builds.path(bd.ID))
	for _, a := range bd.Artifacts {
		if err := s.placeArtifact(from, a, out); err != nil {
			return fmt.Errorf("%s: %w", a.Path, err)
		}
	}
	return nil
}

// placeArtifact copies artifact a of the build's out directory from into
// out at src/PATH, checking its size and sha256 against the record.
func (s *Service) placeArtifact(from string, a api.BuildArtifact, out *artifactDir) error {
	if a.Path == "" || path.IsAbs(a.Path) || path.Clean(a.Path) != a.Path || a.Path == ".." || strings.HasPrefix(a.Path, "../") {
		return errors.New("not a clean relative path")
	}
	r, err := openArtifact(from, a.Path)
	if err != nil {
		return err
	}
	defer r.Close()
	dir, err := out.mkdirs(path.Join(engineBuildOut, path.Dir(a.Path)))
	if err != nil {
		return err
	}
	defer dir.Close()
	// The permission bits of the build's file, without setid bits and
	// without write for group and others.
	w, err := createArtifact(dir, path.Base(a.Path), a.Mode&0o755)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(r, a.Size+1))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	switch sum := hex.EncodeToString(h.Sum(nil)); {
	case err != nil:
		return err
	case n != a.Size || sum != a.SHA256:
		return fmt.Errorf("%d bytes of sha256 %s, where the build's record has %d bytes of sha256 %s", n, sum, a.Size, a.SHA256)
	}
	return nil
}

// engineBuildOut is the directory of a build step's out directory that
// holds its artifacts, as /src holds them in the build's sandbox (see
// engine.Builder).
const engineBuildOut = "src"
