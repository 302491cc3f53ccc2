package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/build"
	"github.com/moat-sandbox/moat/fstree"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/store"
	"github.com/moat-sandbox/moat/templates"
)

// maxSkipped bounds Build.Skipped.
const maxSkipped = 100

// errOutputType: a declared output is neither a regular file nor a
// directory once copied (a symlink, never followed, or a special file).
var errOutputType = errors.New("not a regular file or a directory (a symlink is not followed)")

// buildEnd is how a build ended: its status, reason and message.
type buildEnd struct{ status, reason, message string }

// endedBy is the end of a build whose context was cancelled: by
// build.delete or the daemon's stop (failed/interrupted, the cause as the
// message).
func endedBy(ctx context.Context) buildEnd {
	msg := errDaemonStops.Error()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		msg = cause.Error()
	}
	return buildEnd{api.BuildFailed, api.ReasonInterrupted, msg}
}

// createBuild is build.create: the settings are checked (400 for a bad
// one, before anything is made), the build recorded (status running), its
// source unpacked from the request's body into its layer (a refusal ends
// it: status refused, answered as the build), and its runner started. It
// answers at the build's end, or, with detach, once the source is in
// place (the body is read whole either way).
func (s *Service) createBuild(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.CreateBuild](in)
	if err != nil {
		return nil, err
	}
	body := in.body
	if body == nil && len(req.Content) > 0 {
		body = bytes.NewReader(req.Content)
	}
	req.Content = nil
	in.rec.ev.Request = mustJSON(buildRequestAudit(req, build.EnvNames(req.Env)))
	if body == nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "the source package is required: a tar (plain or gzip) as the request's body")
	}
	if err := build.CheckSettings(req); err != nil {
		return nil, err
	}
	lim, err := s.cfg.Build.Narrow(req)
	if err != nil {
		return nil, err
	}
	if err := validLabels(req.Labels); err != nil {
		return nil, err
	}
	tmpl, _, _, err := s.resolveRoot(c, req.Template, "")
	if err != nil {
		return nil, err
	}
	epoch := build.Epoch(req)
	env := build.Env(tmpl.Env, req.Env, epoch)
	run, err := s.beginBuild(ctx, c, req, lim, tmpl, env, epoch)
	if err != nil {
		return nil, err
	}
	in.rec.ev.Result = mustJSON(map[string]string{"id": run.id})
	if ok, err := s.prepareBuild(ctx, run, body, lim, epoch); !ok {
		// Refused, or failed before its sandbox: it has ended. A body
		// the transport refused (too large, a bad multipart part, too
		// slow) is that transport's error too.
		final, _ := run.wait(context.Background())
		if err != nil {
			return nil, err
		}
		return &final, nil
	}
	go s.runBuild(run, req, lim, tmpl, env)
	if req.Detach {
		v := run.view()
		return &v, nil
	}
	final, err := run.wait(ctx)
	if err != nil {
		return nil, err
	}
	return &final, nil
}

// beginBuild records a new build of c (status running, one durable write)
// and registers it in flight. The settings kept are req's as the build
// runs them: the template resolved, the limits narrowed, without the
// environment's values (Build.Env has the names) or the source.
func (s *Service) beginBuild(ctx context.Context, c Caller, req *api.CreateBuild, lim build.Limits, tmpl *templates.Template,
	env []string, epoch int64) (*buildRun, error) {
	id, err := newBuildID()
	if err != nil {
		return nil, err
	}
	settings := *req
	settings.Env, settings.Labels, settings.Content = nil, nil, nil
	settings.Template = tmpl.Name
	settings.TimeoutMs = lim.Timeout.Milliseconds()
	settings.MaxFiles, settings.MaxFileBytes, settings.MaxTotalBytes = lim.MaxFiles, lim.MaxFileBytes, lim.MaxTotalBytes
	rctx, cancel := context.WithCancelCause(s.builds.ctx)
	run := &buildRun{id: id, caller: c, dir: s.builds.path(id), ctx: rctx, cancel: cancel, done: make(chan struct{}), gone: make(chan struct{}),
		rec: api.Build{ID: id, Status: api.BuildRunning, Toolchain: api.Toolchain{Template: tmpl.Name, Digest: tmpl.Layer},
			Settings: settings, Env: build.EnvNames(env), SourceDateEpoch: epoch, Artifacts: []api.BuildArtifact{},
			Labels: req.Labels, Created: time.Now().UTC()}}
	if err := s.builds.add(run); err != nil {
		cancel(nil)
		return nil, err
	}
	rec := run.view()
	if err := s.saveBuild(ctx, c.Tenant, &rec); err != nil {
		s.builds.forget(run)
		cancel(nil)
		// A build.get that found it meanwhile does not wait for ever.
		close(run.done)
		close(run.gone)
		return nil, err
	}
	return run, nil
}

// saveBuild writes b, tenant's, to the store.
func (s *Service) saveBuild(ctx context.Context, tenant string, b *api.Build) error {
	rec, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("the record of build %s: %w", b.ID, err)
	}
	return s.cfg.Store.SaveBuild(ctx, &store.Build{ID: b.ID, Tenant: tenant, Status: b.Status, Created: b.Created,
		Ended: b.Ended, Record: rec})
}

// prepareBuild makes the build's directory, layer and log and unpacks the
// source read from body into the layer (build.Unpack, while the request
// lasts: the body is the request's). It reports whether the build goes
// on; if not, it has ended it (refused for the source's fault, failed
// otherwise) and returns the API error of a body the transport refused.
func (s *Service) prepareBuild(ctx context.Context, run *buildRun, body io.Reader, lim build.Limits, epoch int64) (bool, error) {
	if err := s.makeBuildDir(run, lim); err != nil {
		s.endBuild(run, buildEnd{api.BuildFailed, api.ReasonSetupFailed, "making the build's directory: " + err.Error()}, nil)
		return false, nil
	}
	// Unpack waits for the body: a build stopped meanwhile (build.delete,
	// the daemon's stop) closes it.
	uctx, ucancel := context.WithCancel(ctx)
	stop := context.AfterFunc(run.ctx, func() {
		ucancel()
		if cl, ok := body.(io.Closer); ok {
			_ = cl.Close()
		}
	})
	src, err := build.Unpack(uctx, body, run.layer(), lim, epoch)
	stop()
	ucancel()
	if err != nil {
		var end buildEnd
		var bodyErr *api.Error
		rf, refused := build.AsRefusal(err)
		switch {
		case run.ctx.Err() != nil:
			end = endedBy(run.ctx)
		case errors.As(err, &bodyErr):
			end = buildEnd{api.BuildRefused, api.ReasonSourceUnreadable, bodyErr.Message}
		case refused:
			end = buildEnd{api.BuildRefused, rf.Reason, rf.Message}
		case ctx.Err() != nil:
			end = buildEnd{api.BuildRefused, api.ReasonSourceUnreadable, "the request ended before the source package did"}
		default:
			end = buildEnd{api.BuildFailed, api.ReasonSetupFailed, "unpacking the source: " + err.Error()}
		}
		stopped := run.ctx.Err() != nil // before endBuild, which cancels it
		s.endBuild(run, end, nil)
		if bodyErr != nil && !stopped {
			return false, bodyErr
		}
		return false, nil
	}
	run.update(func(b *api.Build) {
		b.SourceDigest = src.Digest
		b.Source = &api.BuildSource{Files: src.Files, Bytes: src.Bytes, Stripped: src.Stripped}
	})
	return true, nil
}

// makeBuildDir makes <builds>/<id> (0700), its layer directory (0755:
// the sandbox's lower layer, owned by the daemon) and its log.
func (s *Service) makeBuildDir(run *buildRun, lim build.Limits) error {
	if err := os.Mkdir(run.dir, 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(run.layer(), 0o755); err != nil {
		return err
	}
	if err := os.Chmod(run.layer(), 0o755); err != nil { // whatever the umask
		return err
	}
	f, err := os.OpenFile(logPath(run.dir), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	run.mu.Lock()
	run.spill, run.log = f, build.NewLog(f, lim.MaxLogBytes)
	run.mu.Unlock()
	return nil
}

// runBuild is a build's runner, from its sandbox to its end, on the
// builds' lifetime (not the request's).
func (s *Service) runBuild(run *buildRun, req *api.CreateBuild, lim build.Limits, tmpl *templates.Template, env []string) {
	var sb string
	end := s.buildIn(run, req, lim, tmpl, env, &sb)
	s.endBuild(run, end, func() {
		if sb != "" {
			s.deleteBuildSandbox(run.caller, sb)
		}
	})
}

// buildIn makes the build's sandbox and runs its command in it (a
// sandbox.create carrying a process.exec of the build's owner: see
// Service.createExec) and collects its outputs if it succeeded. The
// sandbox, when one was made, is left in *made for the caller to delete
// once the end is answered (a build answers at its end, not after its
// teardown, as moat run does). A create refused for room (the tenant's
// quota, the daemon's sandboxes) waits for it, within the build's
// timeout: builds queue rather than fail.
func (s *Service) buildIn(run *buildRun, req *api.CreateBuild, lim build.Limits, tmpl *templates.Template, env []string, made *string) buildEnd {
	ctx := run.ctx
	labels := maps.Clone(req.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[buildLabel] = run.id
	var network *api.Network
	if req.Net == string(sandbox.NetProxy) {
		network = &api.Network{Mode: req.Net, AllowDomains: req.AllowDomains}
	}
	run.mu.Lock()
	log := run.log
	run.mu.Unlock()
	x := ownExec{
		create: api.CreateSandbox{Template: tmpl.Name, TimeoutMs: millisCeil(min(lim.Timeout+buildSandboxMargin, s.cfg.MaxTimeout)),
			Labels: labels, Network: network,
			Limits: sandbox.Limits{MemoryBytes: req.MemoryBytes, CPUs: req.CPUs, Pids: req.Pids, DiskBytes: req.DiskBytes}},
		step:   &stepSandbox{env: env, layers: []string{run.layer()}, workdir: api.BuildSrc},
		exec:   api.Exec{Args: req.Command, Cwd: api.BuildSrc, TimeoutMs: millisCeil(lim.Timeout), OutputLimit: buildOutputLimit},
		stdout: log, stderr: log,
	}
	sb, res, err := s.buildSandbox(ctx, run, x, lim.Timeout)
	log.Close()
	if sb != nil {
		*made = sb.ID
	}
	if ctx.Err() != nil {
		return endedBy(ctx)
	}
	if err != nil {
		what := "the build's sandbox could not be made"
		if sb != nil {
			what = "the build command could not run"
		}
		if isCode(err, api.CodePolicyDenied) {
			return buildEnd{api.BuildRefused, api.ReasonPolicyDenied, err.Error()}
		}
		return buildEnd{api.BuildFailed, api.ReasonSetupFailed, what + ": " + err.Error()}
	}
	run.update(func(b *api.Build) {
		code := res.ExitCode
		b.ExitCode, b.PeakMemoryBytes = &code, res.PeakMemoryBytes
		if b.Enforcement == nil {
			b.Enforcement = res.Enforcement
		}
	})
	if end, ok := resultEnd(res, lim); !ok {
		return end
	}
	if len(req.Outputs) == 0 {
		return buildEnd{status: api.BuildSucceeded}
	}
	return s.collectBuild(ctx, run, sb.ID, req.Outputs, lim)
}

// Bounds of the wait between two creates of a build's sandbox refused for
// room.
const (
	buildRoomFirst = 50 * time.Millisecond
	buildRoomMax   = 2 * time.Second
)

// buildSandbox makes the build's sandbox and runs its command in it
// (Service.createExec), trying again while the create is refused for room
// (resource_exhausted), with a backoff, for at most wait.
func (s *Service) buildSandbox(ctx context.Context, run *buildRun, x ownExec, wait time.Duration) (*api.Sandbox, *sandbox.Result, error) {
	deadline := time.Now().Add(wait)
	delay := buildRoomFirst
	for {
		sb, res, err := s.createExec(ctx, run.caller, x, func(sb *api.Sandbox) {
			run.update(func(b *api.Build) { b.Sandbox, b.Enforcement = sb.ID, sb.Enforcement })
		})
		if sb != nil || !isCode(err, api.CodeTooMany) || time.Now().Add(delay).After(deadline) {
			return sb, res, err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, nil, err
		}
		delay = min(2*delay, buildRoomMax)
	}
}

// resultEnd maps the command's result: ok when it exited 0, else how the
// build ended.
func resultEnd(res *sandbox.Result, lim build.Limits) (buildEnd, bool) {
	switch {
	case res.ExitReason == sandbox.ReasonTimeout || res.ExitReason == sandbox.ReasonSandboxTimeout:
		return buildEnd{api.BuildTimeout, api.ReasonTimeout,
			fmt.Sprintf("the command ran past its timeout (%s); its whole process tree was killed", lim.Timeout)}, false
	case res.ExitReason == sandbox.ReasonOOM || res.ExitCode != 0 && res.OOMKills > 0:
		return buildEnd{api.BuildFailed, api.ReasonOOM,
			fmt.Sprintf("the kernel's OOM killer ended %d process(es) of the build (exit code %d)", max(res.OOMKills, 1), res.ExitCode)}, false
	case res.ExitReason == sandbox.ReasonDenied:
		return buildEnd{api.BuildRefused, api.ReasonPolicyDenied, res.Error}, false
	case res.ExitReason == sandbox.ReasonSetupError:
		return buildEnd{api.BuildFailed, api.ReasonSetupFailed, "the build command could not run: " + res.Error}, false
	case res.Signal != 0:
		return buildEnd{api.BuildFailed, api.ReasonCompileFailed, fmt.Sprintf("the command was killed by signal %d", res.Signal)}, false
	case res.ExitCode != 0:
		msg := fmt.Sprintf("the command exited with %d", res.ExitCode)
		if res.Error != "" {
			msg += ": " + res.Error
		}
		return buildEnd{api.BuildFailed, api.ReasonCompileFailed, msg}, false
	}
	return buildEnd{}, true
}

// collectBuild copies the declared outputs out of sandbox sb into the
// build's out directory (collectWith: file.download calls of the build's
// owner, extracted by fstree.ExtractInto, nothing followed, the output
// cap over all of them) and lists the regular files as its artifacts. A
// declared output that is absent, a symlink or a special file is
// output_missing; more than the cap, output_too_large. A failed
// collection leaves no outputs.
func (s *Service) collectBuild(ctx context.Context, run *buildRun, sb string, outputs []string, lim build.Limits) buildEnd {
	outs := make([]collectItem, len(outputs))
	for i, o := range outputs {
		rel, err := build.OutputPath(o)
		if err != nil { // checked by CheckSettings
			return buildEnd{api.BuildFailed, api.ReasonOutputMissing, err.Error()}
		}
		outs[i] = collectItem{from: path.Join(api.BuildSrc, rel), to: rel}
	}
	out := outDir(run.dir)
	if err := os.Mkdir(out, 0o700); err != nil {
		return buildEnd{api.BuildFailed, api.ReasonSetupFailed, "collecting the outputs: " + err.Error()}
	}
	var skipped []string
	skip := func(p string) {
		if len(skipped) < maxSkipped {
			skipped = append(skipped, p)
		}
	}
	root, err := s.collectWith(ctx, run.caller, sb, outs, collectOpts{root: s.builds.dir, dir: out, mode: 0o700, total: lim.MaxOutputBytes,
		skipped: func(i int, rel, why string) { skip(path.Join(outs[i].to, rel)) },
		placed: func(i int, typ uint32) error {
			if typ != syscall.S_IFREG && typ != syscall.S_IFDIR {
				return errOutputType
			}
			return nil
		}})
	var files []artifactFile
	if err == nil {
		files, err = walkArtifacts(root, ".", skip)
		root.Close()
	}
	if err != nil {
		if rerr := removeTree(out); rerr != nil {
			s.log.Error("removing the outputs of a failed build", "build", run.id, "err", rerr)
		}
		return collectEnd(ctx, err, lim)
	}
	arts := make([]api.BuildArtifact, len(files))
	for i, f := range files {
		arts[i] = api.BuildArtifact{Path: f.path, Size: f.size, SHA256: f.sha256, Mode: f.mode}
	}
	run.update(func(b *api.Build) { b.Artifacts, b.Skipped = arts, skipped })
	return buildEnd{status: api.BuildSucceeded}
}

// collectEnd is how a build whose collection failed with err ended.
func collectEnd(ctx context.Context, err error, lim build.Limits) buildEnd {
	var ae *api.Error
	isAPI := errors.As(err, &ae)
	switch {
	case ctx.Err() != nil:
		return endedBy(ctx)
	case errors.Is(err, fstree.ErrLimit) || isAPI && ae.Errno == "ETOOBIG":
		return buildEnd{api.BuildFailed, api.ReasonOutputTooLarge,
			fmt.Sprintf("the outputs add up to more than the cap of %d bytes: %v", lim.MaxOutputBytes, err)}
	case errors.Is(err, errOutputType) || errors.Is(err, fstree.ErrHostile) || isAPI && ae.Code == api.CodeFile:
		return buildEnd{api.BuildFailed, api.ReasonOutputMissing, err.Error()}
	}
	return buildEnd{api.BuildFailed, api.ReasonSetupFailed, "collecting the outputs: " + err.Error()}
}

// deleteBuildSandbox deletes a build's sandbox, as a sandbox.delete of
// the build's owner; one already gone is no error.
func (s *Service) deleteBuildSandbox(c Caller, id string) {
	_, err := s.call(context.Background(), c, api.OpSandboxDelete, internalInput(api.SandboxRef{Sandbox: id}))
	if err != nil && !isCode(err, api.CodeNotFound) {
		s.log.Error("deleting a build's sandbox", "sandbox", id, "err", err)
	}
}

// endBuild records the end of run: its log closed, its record final (one
// durable write; kept in the backlog if the disk refuses it) and its
// "build" audit event written; then waiters are released (the answer goes
// out), teardown (nil: none) runs, its layer is removed, and it leaves the
// builds in flight. It is called once per build.
func (s *Service) endBuild(run *buildRun, e buildEnd, teardown func()) {
	run.mu.Lock()
	log, spill := run.log, run.spill
	run.mu.Unlock()
	var summary api.BuildLog
	if log != nil {
		log.Close()
		summary = log.Summary()
		if err := log.Err(); err != nil {
			s.log.Error("writing a build's log", "build", run.id, "err", err)
		}
	}
	if spill != nil {
		if err := spill.Close(); err != nil {
			s.log.Error("closing a build's log", "build", run.id, "err", err)
		}
	}
	now := time.Now().UTC()
	run.mu.Lock()
	b := &run.rec
	b.Status, b.Reason, b.Message = e.status, e.reason, e.message
	b.Log, b.Ended, b.DurationMs = summary, &now, now.Sub(b.Created).Milliseconds()
	final := *b
	run.mu.Unlock()
	tenant := run.caller.Tenant
	if err := s.saveBuild(context.Background(), tenant, &final); err != nil {
		s.keep(pendingWrite{store: func(ctx context.Context) error { return s.saveBuild(ctx, tenant, &final) },
			call: true, what: "the end of build " + run.id}, err)
	}
	s.record(buildEvent(run.caller, &final))
	close(run.done)
	if teardown != nil {
		teardown()
	}
	// After the sandbox that had it as a layer is gone.
	if err := removeTree(run.layer()); err != nil {
		s.log.Error("removing a build's layer", "build", run.id, "err", err)
	}
	run.cancel(nil)
	close(run.gone)
	s.builds.forget(run)
}

// buildRequestAudit is what the audit keeps of a build's request: the
// template, command, outputs, the names of its environment (never the
// values) and its limits.
func buildRequestAudit(req *api.CreateBuild, envNames []string) map[string]any {
	args, cut := auditStrings(req.Command, maxAuditArgs)
	out := map[string]any{"template": req.Template, "command": args, "outputs": req.Outputs, "env": envNames,
		"limits": map[string]any{"timeout_ms": req.TimeoutMs, "memory_bytes": req.MemoryBytes, "cpus": req.CPUs,
			"pids": req.Pids, "disk_bytes": req.DiskBytes, "max_files": req.MaxFiles, "max_file_bytes": req.MaxFileBytes,
			"max_total_bytes": req.MaxTotalBytes, "net": req.Net, "allow_domains": req.AllowDomains}}
	if cut {
		out["command_truncated"] = true
	}
	if req.Detach {
		out["detach"] = true
	}
	return out
}

// buildEvent is the "build" audit event of build b of c, at its end: who,
// what (the request as buildRequestAudit keeps it), and the outcome (its
// status, reason, source digest, toolchain, artifacts' digests, exit
// code).
func buildEvent(c Caller, b *api.Build) audit.Event {
	digests := make([]string, len(b.Artifacts))
	for i, a := range b.Artifacts {
		digests[i] = a.SHA256
	}
	res := map[string]any{"id": b.ID, "status": b.Status, "source_digest": b.SourceDigest, "toolchain": b.Toolchain,
		"artifacts": digests, "duration_ms": b.DurationMs}
	if b.Reason != "" {
		res["reason"], res["message"] = b.Reason, b.Message
	}
	if b.ExitCode != nil {
		res["exit_code"] = *b.ExitCode
	}
	ev := audit.Event{Kind: "build", Tenant: c.Tenant, Actor: c.Actor, Sandbox: b.Sandbox,
		Request: mustJSON(buildRequestAudit(&b.Settings, b.Env)), Result: mustJSON(res), DurationMs: b.DurationMs}
	if b.Status == api.BuildRefused && b.Reason == api.ReasonPolicyDenied {
		ev.Decision = audit.DecisionDeny
	}
	return ev
}

// recoverBuilds ends the builds a previous daemon left running: each
// becomes failed/interrupted (its log as far as it was kept; its partial
// outputs and its layer removed; its sandbox was reconciled as lost with
// the others) and is audited.
func (s *Service) recoverBuilds(ctx context.Context) error {
	rows, err := s.cfg.Store.RunningBuilds(ctx)
	if err != nil {
		return err
	}
	for _, row := range rows {
		var b api.Build
		if err := json.Unmarshal(row.Record, &b); err != nil || b.ID != row.ID {
			b = api.Build{ID: row.ID, Created: row.Created, Artifacts: []api.BuildArtifact{}}
		}
		now := time.Now().UTC()
		b.Status, b.Reason, b.Message = api.BuildFailed, api.ReasonInterrupted, errDaemonStops.Error()
		b.Ended, b.DurationMs = &now, now.Sub(b.Created).Milliseconds()
		if validBuildID(row.ID) {
			dir := s.builds.path(row.ID)
			for _, p := range []string{filepath.Join(dir, "layer"), outDir(dir)} {
				if err := removeTree(p); err != nil {
					s.log.Error("removing what an interrupted build left", "build", row.ID, "path", p, "err", err)
				}
			}
			if fi, err := os.Lstat(logPath(dir)); err == nil && fi.Mode().IsRegular() {
				b.Log.Kept = fi.Size()
				b.Log.Bytes = max(b.Log.Bytes, fi.Size())
			}
		}
		if err := s.saveBuild(ctx, row.Tenant, &b); err != nil {
			return err
		}
		s.record(buildEvent(Caller{Tenant: row.Tenant, Actor: "system"}, &b))
	}
	if len(rows) > 0 {
		s.log.Info("builds interrupted by the previous daemon's stop", "count", len(rows))
	}
	return nil
}
