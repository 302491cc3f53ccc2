package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/workflow"
)

// A build step's attempt is one build of the daemon (build.create), run
// through the Backend's optional Builder: its source is the out
// directory of the step it names (or a directory below it), its artifacts
// land in the step's own out directory at src/PATH, where the steps that
// take its outputs as inputs find them, as they find a run step's
// outputs at their path in its sandbox.

// Builder is a Backend that runs sandboxed builds. The engine runs a build
// step's attempts through it; on a Backend without it those attempts
// fail.
type Builder interface {
	// Build runs one build of the owner's to its end, as a build.create
	// of the owner would: the source tree at req.Source is sent as the
	// build's source package, and when the build succeeds the regular
	// files of its artifacts are copied into req.OutDir, each at
	// src/PATH (PATH its path relative to /src). It returns the build's
	// record whatever the build's status; an error means the build did
	// not run to an end (a build refused for room returns an error
	// wrapping ErrCapacity and made nothing, and the engine tries
	// again).
	Build(ctx context.Context, o Owner, req BuildRequest) (*api.Build, error)
}

// BuildRequest is one build of a build step.
type BuildRequest struct {
	// Settings are the build's, as build.create takes them, with the
	// labels of the step's attempt (LabelRun, LabelStep, LabelAttempt).
	Settings api.CreateBuild
	// Source is a host directory under the engine's artifact directory:
	// the out directory of the source step, or a directory below it.
	Source string
	// OutDir is the step's out directory under the artifact directory,
	// empty and owned by the engine (made 0700).
	OutDir string
}

// buildOutDir is the directory of OutDir that holds a build's artifacts,
// as /src holds them in its sandbox.
const buildOutDir = "src"

// buildSpec prepares attempt sp of ps, a build step: its source and out
// directories and its settings, with labels.
func (r *run) buildSpec(sp *spec, ps *workflow.PlanStep, labels map[string]string) {
	set := ps.Build.Settings
	set.Command = slices.Clone(set.Command)
	set.Outputs = slices.Clone(set.Outputs)
	set.Env = slices.Clone(set.Env)
	set.AllowDomains = slices.Clone(set.AllowDomains)
	set.Labels = labels
	req := &BuildRequest{Settings: set}
	src, err := r.stepDir(ps.Build.Source)
	sp.err = cmp.Or(sp.err, err)
	// SourcePath is absolute and clean (workflow checked it).
	req.Source = outDir(src) + ps.Build.SourcePath
	dir, err := r.stepDir(ps.ID)
	sp.err = cmp.Or(sp.err, err)
	req.OutDir = outDir(dir)
	sp.outDir = req.OutDir
	sp.build = req
}

// buildFrom is what a build step's attempt starts from, for its
// step.started event.
func buildFrom(b *workflow.Build) string {
	s := "a build of the outputs of step " + b.Source
	if b.SourcePath != "" {
		s += " at " + b.SourcePath
	}
	return s
}

// executeBuild runs a build step's attempt: a fresh out directory, the
// build (waiting out ErrCapacity), its artifacts.
func (r *run) executeBuild(ctx context.Context, o Owner, sp *spec) (out outcome) {
	fail := func(err error) outcome {
		out.err = err
		return out
	}
	bl, ok := r.e.b.(Builder)
	if !ok {
		return fail(errors.New("build: this workflow backend cannot run builds"))
	}
	if err := freshDir(sp.build.OutDir); err != nil {
		return fail(fmt.Errorf("build: %w", err))
	}
	var b *api.Build
	_, _, err := r.e.waitRoom(ctx, func() (string, *sandbox.Result, error) {
		var err error
		b, err = bl.Build(ctx, o, *sp.build)
		return "", nil, err
	})
	if b != nil {
		// Its sandbox is gone: a create waiting for room may try again.
		r.e.capacity.freed()
		out.build = b.ID
		out.result = buildResult(b)
	}
	switch {
	case err != nil:
		return fail(fmt.Errorf("build: %w", err))
	case b == nil:
		return fail(errors.New("build: no record"))
	case b.Status != api.BuildSucceeded:
		return fail(buildError(b))
	}
	arts := buildArtifacts(b)
	out.artifacts = arts
	if len(sp.build.Settings.Outputs) > 0 {
		r.note(func() {
			r.emit(api.WorkflowEvent{Type: api.WfStepArtifacts, Step: sp.step, Group: sp.group, Attempt: sp.attempt,
				Artifacts: arts, Message: "build " + b.ID})
		})
	}
	out.ok = true
	return out
}

// freshDir makes dir an empty directory (0700), removing what a previous
// attempt left there.
func freshDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	return os.MkdirAll(dir, 0o700)
}

// buildError says why build b did not succeed.
func buildError(b *api.Build) error {
	msg := fmt.Sprintf("build %s %s", b.ID, b.Status)
	if b.Reason != "" {
		msg += ": " + b.Reason
	}
	if b.Message != "" {
		msg += ": " + b.Message
	}
	return errors.New(msg)
}

// buildArtifacts are the artifacts of build b as the step's outputs: at
// their paths in the build's sandbox (/src/PATH).
func buildArtifacts(b *api.Build) []api.WorkflowArtifact {
	out := make([]api.WorkflowArtifact, 0, len(b.Artifacts))
	for _, a := range b.Artifacts {
		out = append(out, api.WorkflowArtifact{Path: api.BuildSrc + "/" + a.Path, Bytes: a.Size, SHA256: a.SHA256})
	}
	return out
}

// buildResult is the result of a build step's attempt: the build's exit
// code, duration and peak memory, and its log (stdout and stderr
// interleaved, head and tail) as stderr, where a failed step's output is
// shown. nil when the command never started (a refused build).
func buildResult(b *api.Build) *sandbox.Result {
	if b.ExitCode == nil {
		return nil
	}
	res := &sandbox.Result{
		ExitCode: *b.ExitCode, ExitReason: sandbox.ReasonExited,
		DurationMs: b.DurationMs, PeakMemoryBytes: b.PeakMemoryBytes, Enforcement: b.Enforcement,
		Stderr: b.Log.Head, StderrBytes: b.Log.Bytes,
		Truncated: b.Log.Tail != "" || b.Log.Truncated,
	}
	if b.Log.Tail != "" {
		gap := b.Log.Bytes - int64(len(b.Log.Head)) - int64(len(b.Log.Tail))
		res.Stderr += "\n… (" + strconv.FormatInt(max(gap, 0), 10) + " bytes of the log left out: build.log has it)\n" + b.Log.Tail
	}
	switch b.Reason {
	case api.ReasonTimeout:
		res.ExitReason = sandbox.ReasonTimeout
	case api.ReasonOOM:
		res.ExitReason = sandbox.ReasonOOM
	}
	if b.Status != api.BuildSucceeded {
		res.Error = b.Message
	}
	return res
}

// checkBuildSource reports, for a resume, whether build step ps, which
// runs again, finds its source when the source step does not run again
// (again lists those that do).
func (r *run) checkBuildSource(ps *workflow.PlanStep, again map[string]bool) error {
	if ps.Build == nil || again[ps.Build.Source] {
		return nil
	}
	p := ps.Build.Source
	dir, err := r.stepDir(p)
	if err == nil {
		_, err = os.Stat(outDir(dir) + ps.Build.SourcePath)
	}
	if err != nil {
		return fmt.Errorf("build step %s takes its source from step %s, whose outputs are gone (%v): resume from %s: %w", ps.ID, p, err, p, ErrConflict)
	}
	return nil
}
