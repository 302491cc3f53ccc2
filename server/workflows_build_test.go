package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/workflow/engine"
)

// TestWorkflowBuildStep runs build steps on the real runtime (root) with
// the host's gcc: a run step writes a C program to /workspace/src, a build
// step compiles it from that output, and a third step runs the binary
// from its inputs. The build is the tenant's own: build.get has its
// record, labelled with the step, and build.artifact the bytes the
// consumer ran. A build that fails to compile fails its step, on each
// attempt a new build, with the build's reason and the compiler's
// errors.
func TestWorkflowBuildStep(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		testutil.SkipOrFail(t, "the build step compiles with the host's gcc")
	}
	h := newHarness(t, nil)
	run := h.createRun(tokenA, wfDoc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - id: fetch",
		"    sh: |",
		"      mkdir -p /workspace/src",
		`      printf '#include <stdio.h>\nint main(void) { printf("built %%d\\n", 6 * 7); return 0; }\n' > /workspace/src/hello.c`,
		"    outputs: [/workspace/src]",
		"  - id: compile",
		"    build:",
		"      source: fetch:/workspace/src",
		"      sh: mkdir -p bin && gcc -O2 -o bin/hello hello.c && echo compiled",
		"      outputs: [bin]",
		"      timeout: 2m",
		"  - id: use",
		"    inputs: {compile: /in}",
		"    sh: /in/src/bin/hello && sha256sum /in/src/bin/hello",
	))
	got := h.waitRun(tokenA, run.ID)
	wantSucceeded(t, got)
	c := stepOf(t, got, "compile")
	if c.Kind != "build" || len(c.Attempts) != 1 || c.Attempts[0].Build == "" || c.Attempts[0].Sandbox != "" {
		t.Fatalf("compile: %+v", c)
	}
	if len(c.Outputs) != 1 || c.Outputs[0].Path != "/src/bin/hello" || c.Result == nil || c.Result.ExitCode != 0 ||
		!strings.Contains(c.Result.Stderr, "compiled") {
		t.Fatalf("compile's outputs %+v, result %+v", c.Outputs, c.Result)
	}
	sum := c.Outputs[0].SHA256
	if u := stepOf(t, got, "use"); u.Result == nil || u.Result.Stdout != "built 42\n"+sum+"  /in/src/bin/hello\n" {
		t.Fatalf("use: %+v", u.Result)
	}

	caller := Caller{Tenant: "a"}
	id := c.Attempts[0].Build
	b, err := h.getBuild(caller, id, false)
	if err != nil {
		t.Fatalf("build.get %s: %v", id, err)
	}
	if b.Status != api.BuildSucceeded || len(b.Artifacts) != 1 || b.Artifacts[0].Path != "bin/hello" || b.Artifacts[0].SHA256 != sum ||
		b.Labels[engine.LabelRun] != run.ID || b.Labels[engine.LabelStep] != "compile" || b.Source == nil || b.Source.Files != 1 {
		t.Fatalf("build %+v", b)
	}
	r := h.callBuild(context.Background(), caller, api.OpBuildArtifact, api.BuildArtifactRef{ID: id, Digest: sum}, nil)
	if h := sha256.Sum256(r.out); r.err != nil || hex.EncodeToString(h[:]) != sum {
		t.Fatalf("build.artifact: %v, %d bytes", r.err, len(r.out))
	}
	// Another tenant does not see it.
	if _, err := h.getBuild(Caller{Tenant: "b"}, id, false); !isCode(err, api.CodeNotFound) {
		t.Errorf("build.get by tenant b: %v", err)
	}
	// The audit has the build (kind "build"), and the step's end names it.
	found := false
	for _, ev := range h.buildEvents("a") {
		found = found || strings.Contains(string(ev.Result), id)
	}
	page, err := h.tape.QueryPage(context.Background(), audit.Query{Tenant: "a", Kind: "workflow.step", Limit: audit.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	named := false
	for _, ev := range page.Events {
		named = named || ev.Kind == "workflow.step" && strings.Contains(string(ev.Result), `"build":"`+id+`"`)
	}
	if !found || !named {
		t.Errorf("audit: build event %v, workflow.step naming it %v", found, named)
	}

	run = h.createRun(tokenA, wfDoc(
		"steps:",
		"  - id: fetch",
		"    sh: mkdir -p /workspace/out && echo 'int main(void) { return missing; }' > /workspace/out/bad.c",
		"    outputs: [/workspace/out]",
		"    snapshot: none",
		"  - id: compile",
		"    build: {source: fetch:/workspace/out, command: [gcc, -o, bad, bad.c], outputs: [bad]}",
		"    retry: {attempts: 2}",
	))
	got = h.waitRun(tokenA, run.ID)
	c = stepOf(t, got, "compile")
	if got.State != api.RunFailed || c.State != api.StepFailed || len(c.Attempts) != 2 ||
		c.Attempts[0].Build == "" || c.Attempts[0].Build == c.Attempts[1].Build {
		t.Fatalf("run %s, compile %+v", got.State, c)
	}
	if !strings.Contains(c.Error, "failed: compile_failed") || c.Result == nil || c.Result.ExitCode == 0 ||
		!strings.Contains(c.Result.Stderr, "missing") {
		t.Errorf("compile's error %q, result %+v", c.Error, c.Result)
	}
}

// TestWorkflowBuildStepCancel: cancelling a run stops its running build
// (its sandbox deleted, its end recorded as interrupted, saying why).
func TestWorkflowBuildStepCancel(t *testing.T) {
	h := newHarness(t, nil)
	run := h.createRun(tokenA, wfDoc(
		"steps:",
		"  - id: fetch",
		"    sh: mkdir -p /workspace/src && echo x > /workspace/src/a",
		"    outputs: [/workspace/src]",
		"    snapshot: none",
		"  - id: compile",
		"    build: {source: fetch, sh: 'echo started; exec sleep 600'}",
	))
	caller := Caller{Tenant: "a"}
	// Poll build.list until the build's command has written: the daemon
	// tells of no build's progress but through its log.
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var id string
	for ; id == ""; <-tick.C {
		r := h.callBuild(context.Background(), caller, api.OpBuildList, api.ListBuilds{Status: api.BuildRunning}, nil)
		if r.err != nil {
			t.Fatal(r.err)
		}
		for _, b := range r.resp.(*api.BuildList).Builds {
			if b.Log.Bytes > 0 {
				id = b.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the build did not start")
		}
	}
	if r := h.do("POST", "/v1/workflows/"+run.ID+"/cancel", tokenA, struct{}{}); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	got := h.waitRun(tokenA, run.ID)
	b, err := h.getBuild(caller, id, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.RunCancelled || b.Status != api.BuildFailed || b.Reason != api.ReasonInterrupted ||
		!strings.Contains(b.Message, "workflow step was stopped") {
		t.Errorf("run %s, build %s/%s: %s", got.State, b.Status, b.Reason, b.Message)
	}
}
