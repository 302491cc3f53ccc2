package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/build"
	"github.com/moat-sandbox/moat/store"
)

// Builds. build.create checks a source package (the request's body, a
// tar) with package build and copies it, normalized, into a layer of the
// build's own; a runner (builds_run.go) then makes a sandbox with that
// layer on top of the toolchain template's root, runs the build command
// in it as a process.exec of the caller, collects the declared outputs as
// artifacts and deletes the sandbox. Each call it makes is a call of the
// build's owner through the dispatcher, judged, counted, recorded and
// audited as the same call made through the API.
//
// Where things live: the builds directory, "builds" beside the store
// (mode 0700), holds one directory per build, <id>/ (0700), with
//
//   - layer/ (root-owned 0755): the source at layer/src and the build's
//     home, tmp and cache at layer/build, the sandbox's top lower layer;
//     removed once the build ends;
//   - log: the command's output (stdout and stderr, interleaved), up to
//     the build's log cap (build.Log);
//   - out/: the collected outputs at their paths relative to /src.
//
// The record (api.Build) is kept in the store's builds table, written
// once when the build is accepted and once at its end; the log and the
// outputs stay until build.delete, or until the pruner removes the build
// BuildRetention after its end. A build is audited once, at its end
// (kind "build"). Another tenant's build is not_found.

// buildsDir is the name of the builds directory beside the store.
const buildsDir = "builds"

// Bounds of the builds' calls.
const (
	// buildSandboxMargin is how much longer than the build's timeout its
	// sandbox may live: the exec's own timeout (which kills the tree and
	// says "timeout") comes first.
	buildSandboxMargin = time.Minute
	// buildOutputLimit is what the exec's result keeps of each stream:
	// the build's log has all of it.
	buildOutputLimit = 1 << 10
	// logChunk is the most of a log one build.log event carries.
	logChunk = 64 << 10
	// buildLabel is the label of a build's sandbox that names the build.
	buildLabel = "moat.build"
	// buildIDPrefix starts every build id, followed by 20 hex digits.
	buildIDPrefix = "bld-"
)

// Why a running build was stopped (the cause of its context).
var (
	errBuildDeleted = errors.New("the build was deleted while it ran")
	errDaemonStops  = errors.New("the daemon stopped while the build ran")
)

// builds are the Service's builds in flight and their directory.
type builds struct {
	// dir is the builds directory (absolute, clean).
	dir string
	// ctx is the builds' lifetime, cancelled by close (with
	// errDaemonStops): not a request's, so that a client that goes away
	// does not stop its build.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// wg counts the builds accepted and not yet ended.
	wg sync.WaitGroup

	mu     sync.Mutex
	closed bool
	live   map[string]*buildRun
}

// buildRun is one build in flight.
type buildRun struct {
	id     string
	caller Caller
	dir    string // <builds>/<id>
	// ctx is the build's: cancelled (with a cause) by build.delete or by
	// the daemon's stop.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// done is closed once the build's end is recorded (rec is final);
	// gone once its sandbox and layer are removed too, just before it
	// leaves the builds in flight.
	done, gone chan struct{}
	log        *build.Log
	// spill is the log's file, closed at the end.
	spill *os.File

	mu  sync.Mutex
	rec api.Build
}

// newBuilds makes the builds directory of s.
func newBuilds(s *Service) (*builds, error) {
	dir := filepath.Join(s.cfg.Store.Dir(), buildsDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("server: builds directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("server: builds directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("server: builds directory %s is not a directory", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("server: builds directory: %w", err)
		}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	return &builds{dir: dir, ctx: ctx, cancel: cancel, live: map[string]*buildRun{}}, nil
}

// close stops the builds in flight and waits until each has recorded its
// end (failed/interrupted), or until ctx ends. New builds are refused. It
// may be called more than once.
func (b *builds) close(ctx context.Context) {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel(errDaemonStops)
	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// newBuildID returns a fresh build id.
func newBuildID() (string, error) {
	var r [10]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("a build id: %w", err)
	}
	return buildIDPrefix + hex.EncodeToString(r[:]), nil
}

// validBuildID reports whether id is one newBuildID could have made: only
// such ids become paths under the builds directory.
func validBuildID(id string) bool {
	if len(id) != len(buildIDPrefix)+20 || id[:len(buildIDPrefix)] != buildIDPrefix {
		return false
	}
	for _, c := range id[len(buildIDPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// path is the directory of build id.
func (b *builds) path(id string) string { return filepath.Join(b.dir, id) }

// add registers run as in flight; it fails once the builds are closed.
func (b *builds) add(run *buildRun) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return api.Errorf(api.CodeUnavailable, "the server is shutting down")
	}
	b.live[run.id] = run
	b.wg.Add(1)
	return nil
}

// forget removes run from the builds in flight, once its end is recorded.
func (b *builds) forget(run *buildRun) {
	b.mu.Lock()
	delete(b.live, run.id)
	b.mu.Unlock()
	b.wg.Done()
}

// running returns tenant's build id if it is in flight, else nil.
func (b *builds) running(tenant, id string) *buildRun {
	b.mu.Lock()
	defer b.mu.Unlock()
	run := b.live[id]
	if run == nil || run.caller.Tenant != tenant {
		return nil
	}
	return run
}

// view is the build as it stands: its record, with the log so far.
func (r *buildRun) view() api.Build {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.rec
	if rec.Status == api.BuildRunning && r.log != nil {
		rec.Log = r.log.Summary()
	}
	return rec
}

// update changes the record under the run's lock.
func (r *buildRun) update(f func(*api.Build)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.rec)
}

// wait waits for the build's end, or for ctx's, and returns its final
// record.
func (r *buildRun) wait(ctx context.Context) (api.Build, error) {
	select {
	case <-r.done:
		return r.view(), nil
	case <-ctx.Done():
		return api.Build{}, ctx.Err()
	}
}

// layer is the build's layer directory; logPath its log; outDir the
// directory of its outputs.
func (r *buildRun) layer() string { return filepath.Join(r.dir, "layer") }

func logPath(dir string) string { return filepath.Join(dir, "log") }

func outDir(dir string) string { return filepath.Join(dir, "out") }

// storedBuild returns tenant's build id from the store; another tenant's
// (or a malformed id) is not_found.
func (s *Service) storedBuild(ctx context.Context, tenant, id string) (*api.Build, error) {
	if !validBuildID(id) {
		return nil, api.Errorf(api.CodeNotFound, "no build %q", id)
	}
	row, err := s.cfg.Store.GetBuild(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	var b api.Build
	if err := json.Unmarshal(row.Record, &b); err != nil {
		return nil, fmt.Errorf("the record of build %s: %w", id, err)
	}
	return &b, nil
}

// findBuild returns tenant's build id: in flight (run set, rec its view)
// or ended (run nil).
func (s *Service) findBuild(ctx context.Context, tenant, id string) (*buildRun, *api.Build, error) {
	if id == "" {
		return nil, nil, api.Errorf(api.CodeInvalidArgument, "id is required")
	}
	if run := s.builds.running(tenant, id); run != nil {
		v := run.view()
		return run, &v, nil
	}
	b, err := s.storedBuild(ctx, tenant, id)
	return nil, b, err
}

// buildStatuses are the statuses a list may filter by.
var buildStatuses = []string{api.BuildRunning, api.BuildSucceeded, api.BuildRefused, api.BuildFailed, api.BuildTimeout}

func (s *Service) listBuilds(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.ListBuilds](in)
	if err != nil {
		return nil, err
	}
	if err := checkListFilter("status", req.Status, buildStatuses, req.Limit); err != nil {
		return nil, err
	}
	rows, err := s.cfg.Store.ListBuilds(ctx, c.Tenant, req.Status, req.Limit)
	if err != nil {
		return nil, err
	}
	out := &api.BuildList{Builds: make([]api.Build, 0, len(rows))}
	for _, row := range rows {
		if run := s.builds.running(c.Tenant, row.ID); run != nil {
			out.Builds = append(out.Builds, run.view())
			continue
		}
		var b api.Build
		if err := json.Unmarshal(row.Record, &b); err != nil {
			return nil, fmt.Errorf("the record of build %s: %w", row.ID, err)
		}
		out.Builds = append(out.Builds, b)
	}
	return out, nil
}

func (s *Service) getBuild(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.BuildRef](in)
	if err != nil {
		return nil, err
	}
	run, b, err := s.findBuild(ctx, c.Tenant, req.ID)
	if err != nil {
		return nil, err
	}
	if run != nil && req.Wait {
		final, err := run.wait(ctx)
		if err != nil {
			return nil, err
		}
		return &final, nil
	}
	return b, nil
}

func (s *Service) deleteBuild(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.BuildRef](in)
	if err != nil {
		return nil, err
	}
	run, b, err := s.findBuild(ctx, c.Tenant, req.ID)
	if err != nil {
		return nil, err
	}
	if run != nil {
		// Stopped, its sandbox deleted and its end recorded, before it
		// is removed.
		run.cancel(errBuildDeleted)
		final, err := run.wait(ctx)
		if err != nil {
			return nil, err
		}
		select {
		case <-run.gone:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		b = &final
	}
	if err := removeTree(s.builds.path(b.ID)); err != nil {
		return nil, fmt.Errorf("removing the files of build %s: %w", b.ID, err)
	}
	if err := s.cfg.Store.DeleteBuild(ctx, c.Tenant, b.ID); err != nil {
		return nil, err
	}
	in.rec.ev.Result = mustJSON(map[string]string{"id": b.ID, "status": b.Status})
	return b, nil
}

// pruneBuilds removes the builds that ended more than BuildRetention
// before now, with their files, at most PruneBatch of them.
func (s *Service) pruneBuilds(now time.Time) {
	ctx := context.Background()
	rows, err := s.cfg.Store.ExpiredBuilds(ctx, now.Add(-s.cfg.BuildRetention), s.cfg.PruneBatch)
	if err != nil {
		s.log.Error("listing the builds past their retention", "err", err)
		return
	}
	for _, row := range rows {
		if validBuildID(row.ID) {
			if err := removeTree(s.builds.path(row.ID)); err != nil {
				s.log.Error("removing the files of a build past its retention", "build", row.ID, "err", err)
				continue
			}
		}
		if err := s.cfg.Store.DeleteBuild(ctx, row.Tenant, row.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Error("removing a build past its retention", "build", row.ID, "err", err)
		}
	}
}

// removeTree removes the tree at p (the daemon's own: a build's
// directory), as os.RemoveAll, and, if that fails, again after making
// its directories writable: a source may hold read-only directories. A
// tree that is not there is no error.
func removeTree(p string) error {
	err := os.RemoveAll(p)
	if err == nil {
		return nil
	}
	// WalkDir follows no symlink: only the tree's own directories change.
	_ = filepath.WalkDir(p, func(q string, d os.DirEntry, werr error) error {
		if werr == nil && d.IsDir() {
			_ = os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}
