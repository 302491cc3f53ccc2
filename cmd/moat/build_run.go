package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/build"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
)

// buildClient is what moat build asks of a daemon (*client.Client).
type buildClient interface {
	Build(ctx context.Context, req api.CreateBuild, source io.Reader) (*api.Build, error)
	GetBuild(ctx context.Context, id string, wait bool) (*api.Build, error)
	BuildLog(ctx context.Context, id string, offset int64, follow bool, w io.Writer) (*api.Build, error)
	BuildArtifact(ctx context.Context, id, digest string, w io.Writer) error
	DeleteBuild(ctx context.Context, id string) (*api.Build, error)
}

var _ buildClient = (*client.Client)(nil)

// runBuild runs one moat build: SOURCE is opened here (a usage error
// before any daemon starts), then sent to the daemon chooseLocal picks.
func runBuild(ctx context.Context, inv *buildInvocation, sio sandboxIO) error {
	src, err := openBuildSource(inv.source)
	if err != nil {
		return err
	}
	defer src.Close()
	return daemonHint(withDaemonTarget(ctx, inv.local, false, sio, func(c *client.Client, t target) error {
		ctx, intr := watchBuildInterrupt(ctx)
		defer intr.stop()
		return buildWith(ctx, c, t, inv, src, intr, sio)
	}))
}

// buildWith sends the build to c and sees it to its end: the log to
// stderr as it comes (without --json), the artifacts under --out, the
// summary or the JSON on stdout; the error is the exit code (buildExit),
// or what kept moat from running the build. With a private daemon (t.local)
// the build is deleted at the end, ^C included.
func buildWith(ctx context.Context, c buildClient, t target, inv *buildInvocation, src *buildSource, intr *buildInterrupt, sio sandboxIO) error {
	req := inv.req
	req.Detach = true
	body, done := src.body(ctx, sourceCaps{files: req.MaxFiles, fileBytes: req.MaxFileBytes, totalBytes: req.MaxTotalBytes}, t.local)
	b, err := c.Build(ctx, req, body)
	serr := done()
	id := ""
	if b != nil && err == nil {
		id = b.ID
		fmt.Fprintf(sio.stderr, "moat: build %s\n", display.String(id))
		if t.local {
			defer deleteBuild(intr.hardCtx, c, id, sio.stderr)
		}
	}
	var refused *sourceRefusal
	switch {
	case errors.As(serr, &refused):
		lb := localRefusal(inv.req, refused)
		if err := printBuild(sio.stdout, inv, lb); err != nil {
			return err
		}
		return &exitError{code: buildExit(lb)}
	case intr.hit():
		return intr.end(t, id, sio.stderr)
	case err != nil && serr != nil:
		return fmt.Errorf("reading SOURCE %s: %w", inv.source, serr)
	case err != nil:
		return err
	}
	if b.Status == api.BuildRunning && !inv.json {
		_, err := c.BuildLog(ctx, id, 0, true, sio.stderr)
		if intr.hit() {
			return intr.end(t, id, sio.stderr)
		}
		if err != nil {
			return followError(t, id, fmt.Errorf("following the log of build %s: %w", id, err))
		}
	}
	final, err := c.GetBuild(ctx, id, true)
	if intr.hit() {
		return intr.end(t, id, sio.stderr)
	}
	if err != nil {
		return followError(t, id, fmt.Errorf("waiting for build %s: %w", id, err))
	}
	var werr error
	if final.Status == api.BuildSucceeded && len(final.Artifacts) > 0 {
		werr = writeArtifacts(ctx, c, final, inv.out)
		if intr.hit() {
			return intr.end(t, id, sio.stderr)
		}
	}
	if err := printBuild(sio.stdout, inv, final); err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	if code := buildExit(final); code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// followError adds to a failure to follow a daemon's build that the
// build may go on there.
func followError(t target, id string, err error) error {
	if t.local {
		return err
	}
	return fmt.Errorf("%w (the build may go on in the daemon: GET /v1/builds/%s)", err, id)
}

// localRefusal is the build a source refused here amounts to: nothing
// reached a daemon's store (no id). As in a daemon's record, the
// variables are named, their values (secrets, maybe) left out.
func localRefusal(req api.CreateBuild, r *sourceRefusal) *api.Build {
	names := build.EnvNames(req.Env)
	req.Content, req.Detach, req.Env = nil, false, nil
	return &api.Build{
		Status:    api.BuildRefused,
		Reason:    r.Reason,
		Message:   r.Message,
		Settings:  req,
		Env:       names,
		Artifacts: []api.BuildArtifact{},
	}
}

// printBuild prints the ended build b: as JSON with --json, else the
// summary.
func printBuild(w io.Writer, inv *buildInvocation, b *api.Build) error {
	if inv.json {
		return printJSONTo(w, b)
	}
	return printBuildSummary(w, b, inv.out)
}

// deleteBuild deletes build id from a private daemon's store once this
// command is done with it (nothing could ask for it after), stopping it
// if it still runs (^C); ctx ends at a second ^C.
func deleteBuild(ctx context.Context, c buildClient, id string, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	defer cancel()
	if _, err := c.DeleteBuild(ctx, id); err != nil && !client.IsNotFound(err) {
		fmt.Fprintf(stderr, "moat: deleting build %s: %s\n", display.String(id), display.String(err.Error()))
	}
}

// buildInterrupt watches for ^C (SIGINT, SIGTERM) during a build: the
// first cancels the context the build is followed with; a second, the
// deletion the first started (stop at once).
type buildInterrupt struct {
	sigc    chan os.Signal
	done    chan struct{}
	wg      sync.WaitGroup
	first   atomic.Bool
	mu      sync.Mutex
	hardCtx context.Context
	hard    context.CancelFunc
}

// watchBuildInterrupt starts watching; the context returned ends at the
// first signal. Call stop when done.
func watchBuildInterrupt(ctx context.Context) (context.Context, *buildInterrupt) {
	ctx, cancel := context.WithCancel(ctx)
	i := &buildInterrupt{sigc: make(chan os.Signal, 2), done: make(chan struct{})}
	i.hardCtx, i.hard = context.WithCancel(context.WithoutCancel(ctx))
	signal.Notify(i.sigc, os.Interrupt, syscall.SIGTERM)
	i.wg.Add(1)
	go func() {
		defer i.wg.Done()
		defer cancel()
		for n := 0; ; n++ {
			select {
			case <-i.sigc:
			case <-i.done:
				return
			}
			if n == 0 {
				i.first.Store(true)
				cancel()
				continue
			}
			i.hard()
			return
		}
	}()
	return ctx, i
}

// hit reports whether ^C came.
func (i *buildInterrupt) hit() bool { return i != nil && i.first.Load() }

// stop ends the watch.
func (i *buildInterrupt) stop() {
	signal.Stop(i.sigc)
	close(i.done)
	i.wg.Wait()
	i.hard()
}

// end says what becomes of a build ^C interrupted, and returns exit 130:
// a private daemon's build (t.local) is stopped and deleted on the way
// out (a second ^C stops waiting for that); a daemon's goes on, and
// stderr says how to end it.
func (i *buildInterrupt) end(t target, id string, stderr io.Writer) error {
	switch {
	case id == "":
		fmt.Fprintln(stderr, "moat: interrupted before the build started")
	case t.local:
		// buildWith's deferred deleteBuild stops and deletes it.
		fmt.Fprintf(stderr, "moat: stopping build %s (^C again to stop at once)\n", display.String(id))
	default:
		fmt.Fprintf(stderr, "moat: build %s goes on in the daemon (DELETE /v1/builds/%s stops and removes it)\n", display.String(id), display.String(id))
	}
	return &exitError{code: exitInterrupted}
}
