package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

// Build is the fake's build: it reads the regular files under the
// source directory and runs its command, a scripted verb:
//
//	cc        succeeds; each output is a file holding the source's files
//	          ("PATH=CONTENT;" sorted by path)
//	fail      fails: compile_failed, exit code 2, "error: …" in its log
//	fail-once fails on the step's first attempt only, succeeds after
//	refuse    is refused (source_bad_path; the command never ran)
//
// and copies its artifacts into OutDir/src/PATH.
func (b *fakeBackend) Build(ctx context.Context, o Owner, req BuildRequest) (*api.Build, error) {
	b.mu.Lock()
	b.n++
	id := fmt.Sprintf("build-%d", b.n)
	b.builds = append(b.builds, req)
	b.signal()
	b.mu.Unlock()
	var src strings.Builder
	err := filepath.WalkDir(req.Source, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(req.Source, p)
		fmt.Fprintf(&src, "%s=%s;", rel, data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the source: %w", err)
	}
	bd := &api.Build{ID: id, Status: api.BuildSucceeded, Settings: req.Settings, Artifacts: []api.BuildArtifact{}}
	code := 0
	cmd := req.Settings.Command[0]
	switch {
	case cmd == "refuse":
		bd.Status, bd.Reason, bd.Message = api.BuildRefused, api.ReasonSourceBadPath, "a/../b escapes the source"
		return bd, nil
	case cmd == "fail", cmd == "fail-once" && req.Settings.Labels[LabelAttempt] == "1":
		code = 2
		bd.Status, bd.Reason, bd.Message = api.BuildFailed, api.ReasonCompileFailed, "exit code 2"
		bd.Log = api.BuildLog{Head: "error: no main\n", Bytes: 15, Kept: 15}
	case cmd == "cc", cmd == "fail-once":
		for _, out := range req.Settings.Outputs {
			data := []byte(src.String())
			dst := filepath.Join(req.OutDir, buildOutDir, out)
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				return nil, err
			}
			if err := os.WriteFile(dst, data, 0o600); err != nil {
				return nil, err
			}
			sum := sha256.Sum256(data)
			bd.Artifacts = append(bd.Artifacts, api.BuildArtifact{Path: out, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), Mode: 0o755})
		}
	default:
		b.t.Errorf("unknown fake build command %q", cmd)
		return nil, errors.New("unknown command")
	}
	bd.ExitCode = &code
	return bd, nil
}

// buildsOf returns the builds the fake ran for step.
func (b *fakeBackend) buildsOf(step string) []BuildRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []BuildRequest
	for _, r := range b.builds {
		if r.Settings.Labels[LabelStep] == step {
			out = append(out, r)
		}
	}
	return out
}

// A build step builds the outputs of the step it names (one output path
// of it), its artifacts are the step's outputs at /src/PATH, and a later
// step reads them as inputs.
func TestBuildStep(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: fetch
    run: ["write /out/src/main.c=int main", "write /out/other=x"]
    outputs: [/out/src, /out/other]
  - id: compile
    needs: [fetch]
    build:
      source: fetch:/out/src
      command: [cc]
      outputs: [hello]
      env: {CFLAGS: -O2}
  - id: test
    inputs: {compile: /in}
    run: ["read /in/src/hello"]
`, api.RunSucceeded)
	c := step(t, r, "compile")
	if c.Kind != "build" || c.Attempt != 1 || c.Attempts[0].Build == "" || c.Attempts[0].Sandbox != "" || c.Snapshot != "" {
		t.Fatalf("compile: %+v", c)
	}
	want := "main.c=int main;"
	sum := sha256.Sum256([]byte(want))
	if len(c.Outputs) != 1 || c.Outputs[0] != (api.WorkflowArtifact{Path: "/src/hello", Bytes: int64(len(want)), SHA256: hex.EncodeToString(sum[:])}) {
		t.Errorf("compile's outputs %+v", c.Outputs)
	}
	if res := c.Result; res == nil || res.ExitCode != 0 {
		t.Errorf("compile's result %+v", res)
	}
	if got := step(t, r, "test").Result.Stdout; got != want {
		t.Errorf("test read %q, want %q", got, want)
	}
	bs := h.b.buildsOf("compile")
	if len(bs) != 1 {
		t.Fatalf("builds %+v", bs)
	}
	b := bs[0]
	if b.Source != filepath.Join(h.dir, r.ID, "fetch", "out", "out", "src") || b.OutDir != filepath.Join(h.dir, r.ID, "compile", "out") {
		t.Errorf("source %s, out %s", b.Source, b.OutDir)
	}
	// The build's environment is the document's, without the engine's
	// variables; its labels name the run, step and attempt.
	if !slices.Equal(b.Settings.Env, []string{"CFLAGS=-O2"}) || b.Settings.Labels[LabelRun] != r.ID || b.Settings.Labels[LabelAttempt] != "1" {
		t.Errorf("settings %+v", b.Settings)
	}
	// No sandbox of the engine's for the build step.
	h.b.mu.Lock()
	for _, cr := range h.b.creates {
		if cr.Labels[LabelStep] == "compile" {
			t.Errorf("a sandbox was created for the build step: %+v", cr)
		}
	}
	h.b.mu.Unlock()
	got := types(h.checkEvents(r.ID), "compile")
	if w := []string{api.WfStepStarted, api.WfStepArtifacts, api.WfStepSucceeded}; !slices.Equal(got, w) {
		t.Errorf("compile's events %v, want %v", got, w)
	}
}

// A build that fails (compile_failed) is retried as a new build; its
// attempts keep their builds' ids, and a build that fails every attempt
// fails the step and skips what needs it.
func TestBuildStepRetry(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: fetch
    run: ["write /src/a.c=x"]
    outputs: [/src]
  - id: compile
    build: {source: fetch, command: [fail-once], outputs: [bin/app]}
    retry: {attempts: 2}
`, api.RunSucceeded)
	c := step(t, r, "compile")
	if c.Attempt != 2 || c.Attempts[0].State != api.StepFailed || c.Attempts[1].State != api.StepSucceeded {
		t.Fatalf("attempts %+v", c.Attempts)
	}
	a1 := c.Attempts[0]
	if a1.Build == "" || a1.Build == c.Attempts[1].Build || !strings.Contains(a1.Error, "compile_failed") ||
		a1.Result == nil || a1.Result.ExitCode != 2 || !strings.Contains(a1.Result.Stderr, "error: no main") {
		t.Errorf("failed attempt %+v", a1)
	}
	if len(c.Outputs) != 1 || c.Outputs[0].Path != "/src/bin/app" {
		t.Errorf("outputs %+v", c.Outputs)
	}
	if n := len(h.b.buildsOf("compile")); n != 2 {
		t.Errorf("%d builds", n)
	}

	r = h.run(`
steps:
  - id: fetch
    run: ["write /src/a.c=x"]
    outputs: [/src]
  - id: compile
    build: {source: fetch, command: [fail]}
    retry: {attempts: 2}
  - id: after
    run: [ok]
`, api.RunFailed)
	c = step(t, r, "compile")
	if c.State != api.StepFailed || c.Attempt != 2 || !strings.Contains(c.Error, "build-") || !strings.Contains(c.Error, "failed: compile_failed: exit code 2") {
		t.Errorf("compile %+v", c)
	}
	if s := step(t, r, "after"); s.State != api.StepSkipped {
		t.Errorf("after: %s", s.State)
	}
}

// A refused build fails its attempt without a result: the command never
// ran.
func TestBuildStepRefused(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: fetch
    run: ["write /src/a.c=x"]
    outputs: [/src]
  - id: compile
    build: {source: fetch, command: [refuse]}
`, api.RunFailed)
	c := step(t, r, "compile")
	if c.Result != nil || !strings.Contains(c.Error, "refused: source_bad_path") || c.Attempts[0].Build == "" {
		t.Errorf("compile %+v", c)
	}
}

// noBuilder is a Backend without Builder.
type noBuilder struct{ Backend }

// On a backend that cannot build, a build step fails with a clear error.
func TestBuildStepWithoutBuilder(t *testing.T) {
	b, j := newFakeBackend(t), newMemJournal(t)
	e := New(noBuilder{b}, j, Options{ArtifactDir: t.TempDir(), Logger: discard()})
	t.Cleanup(func() { e.Close(context.Background()) })
	run, err := e.Submit(testCtx(t), owner, api.CreateWorkflow{Document: `
steps:
  - id: fetch
    run: ["write /src/a.c=x"]
    outputs: [/src]
  - id: compile
    build: {source: fetch, command: [cc]}
`})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Wait(testCtx(t), tenant, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := step(t, r, "compile"); r.State != api.RunFailed || !strings.Contains(c.Error, "cannot run builds") {
		t.Errorf("run %s, compile %+v", r.State, c)
	}
}

// A resume from the build step runs it again from its source's kept
// outputs, without running the source step; once those are gone, the
// resume is refused.
func TestBuildStepResume(t *testing.T) {
	h := newHarness(t)
	r := h.run(`
steps:
  - id: fetch
    run: ["write /src/a.c=x"]
    outputs: [/src]
  - id: compile
    build: {source: fetch, command: [cc], outputs: [app]}
  - id: check
    run: [fail]
`, api.RunFailed)
	ctx := testCtx(t)
	if _, err := h.e.Resume(ctx, tenant, r.ID, "compile"); err != nil {
		t.Fatal(err)
	}
	r = h.wait(r.ID)
	if n, f := len(h.b.buildsOf("compile")), len(h.b.execsOf("fetch")); n != 2 || f != 1 {
		t.Errorf("%d builds, fetch ran %d times", n, f)
	}
	if err := os.RemoveAll(filepath.Join(h.dir, r.ID, "fetch", "out")); err != nil {
		t.Fatal(err)
	}
	_, err := h.e.Resume(ctx, tenant, r.ID, "compile")
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "takes its source from step fetch") {
		t.Errorf("resume without the source: %v", err)
	}
}
