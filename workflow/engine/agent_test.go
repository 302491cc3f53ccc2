package engine

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// agentBackend is the fake backend with agent runs: a run makes one fake
// sandbox (the agent's, with the request's input binds) and runs its
// task there as the fake's scripted commands separated by ";" ("read
// /in/x; write /work/r=v"); what they write to stdout is the answer. A
// command that fails fails the run, a context that ends cancels it.
// Without Keep the run deletes its sandbox, as a daemon does at a run's
// end.
type agentBackend struct {
	*fakeBackend

	mu   sync.Mutex
	n    int
	reqs []AgentRequest
}

func (b *agentBackend) Agent(ctx context.Context, o Owner, req AgentRequest) (*api.AgentRun, error) {
	b.mu.Lock()
	b.n++
	id := fmt.Sprintf("agent-run-%d", b.n)
	b.reqs = append(b.reqs, req)
	b.mu.Unlock()
	if req.Started != nil {
		req.Started(id)
	}
	labels := req.Run.Labels
	box, err := b.Create(ctx, o, CreateRequest{Inputs: req.Inputs, Labels: labels})
	if err != nil {
		return nil, err
	}
	b.fakeBackend.mu.Lock()
	fb := b.boxes[box]
	b.fakeBackend.mu.Unlock()
	attempt, _ := strconv.Atoi(labels[LabelAttempt])
	run := &api.AgentRun{ID: id, Agent: req.Run.Agent, Task: req.Run.Task, State: api.AgentSucceeded, Created: time.Now()}
	var stdout, stderr bytes.Buffer
	for _, cmd := range strings.Split(req.Run.Task, ";") {
		code, err := b.run(ctx, fb, labels[LabelStep], attempt, strings.TrimSpace(cmd), nil, &stdout, &stderr)
		if err != nil {
			run.State, run.Error = api.AgentCancelled, err.Error()
			break
		}
		if code != 0 {
			run.State, run.Error = api.AgentFailed, "the model gave up: "+stderr.String()
			break
		}
	}
	ended := time.Now()
	run.Ended, run.Answer = &ended, stdout.String()
	run.Agents = []api.AgentState{{Name: req.Run.Agent, Sandbox: box}}
	if !req.Keep {
		b.Delete(ctx, o, box)
		run.Agents[0].Sandbox = ""
	}
	return run, nil
}

// requests returns the Agent calls of step.
func (b *agentBackend) requests(step string) []AgentRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []AgentRequest
	for _, r := range b.reqs {
		if r.Run.Labels[LabelStep] == step {
			out = append(out, r)
		}
	}
	return out
}

// newAgentHarness is newHarness on an agentBackend.
func newAgentHarness(t *testing.T) (*harness, *agentBackend) {
	h := &harness{t: t, b: newFakeBackend(t), j: newMemJournal(t), dir: t.TempDir()}
	ab := &agentBackend{fakeBackend: h.b}
	h.e = agentEngine(h, ab)
	return h, ab
}

// agentEngine is a new engine of h on ab, closed at the test's end.
func agentEngine(h *harness, ab *agentBackend) *Engine {
	e := New(ab, h.j, Options{ArtifactDir: h.dir, Logger: discard()})
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			h.t.Errorf("close: %v", err)
		}
	})
	return e
}

const agentsSection = `
agents:
  - name: reviewer
    model: small
    tools: [shell_exec, read_file, write_file]
`

// An agent step runs its agent on its task with the step's inputs bound
// read-only; its outputs are collected from the agent's kept sandbox,
// which is then deleted, and a later step reads them as inputs; the
// answer is the attempt's stdout and the run's id is in the attempt.
func TestAgentStep(t *testing.T) {
	h, ab := newAgentHarness(t)
	r := h.run(agentsSection+`
steps:
  - id: fetch
    run: ["write /out/src/a.c=int main"]
    outputs: [/out/src]
  - id: review
    agent:
      agent: reviewer
      task: "read /in/out/src/a.c; write /work/review.md=looks fine"
      max_turns: 7
    inputs: {fetch: /in}
    outputs: [/work/review.md]
  - id: after
    inputs: {review: /r}
    run: ["read /r/work/review.md"]
`, api.RunSucceeded)
	rv := step(t, r, "review")
	if rv.Kind != "agent" || rv.Attempt != 1 || rv.Snapshot != "" || rv.Attempts[0].Agent != "agent-run-1" || rv.Attempts[0].Sandbox != "" {
		t.Fatalf("review: %+v", rv)
	}
	if res := rv.Result; res == nil || res.ExitCode != 0 || res.Stdout != "int main" {
		t.Errorf("review's result %+v", res)
	}
	if len(rv.Outputs) != 1 || rv.Outputs[0].Path != "/work/review.md" || rv.Outputs[0].Bytes != int64(len("looks fine")) {
		t.Errorf("review's outputs %+v", rv.Outputs)
	}
	if got := step(t, r, "after").Result.Stdout; got != "looks fine" {
		t.Errorf("after read %q", got)
	}
	reqs := ab.requests("review")
	if len(reqs) != 1 {
		t.Fatalf("agent runs %+v", reqs)
	}
	q := reqs[0]
	if q.Run.Agent != "reviewer" || !strings.HasPrefix(q.Run.Task, "read /in/") || !q.Keep || q.Previous != "" ||
		!strings.Contains(q.Run.Document, "name: reviewer") || !strings.HasSuffix(q.Run.Document, "max_turns: 7\n") ||
		q.Run.Labels[LabelRun] != r.ID || q.Run.Labels[LabelStep] != "review" || q.Run.Labels[LabelAttempt] != "1" {
		t.Errorf("request %+v", q)
	}
	want := []sandbox.Bind{{Source: filepath.Join(h.dir, r.ID, "fetch", "out"), Target: "/in"}}
	if !slices.Equal(q.Inputs, want) {
		t.Errorf("inputs %+v, want %+v", q.Inputs, want)
	}
	// The kept sandbox was deleted by the engine once collected.
	h.b.mu.Lock()
	left := len(h.b.boxes)
	h.b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d sandboxes left", left)
	}
	evs := h.checkEvents(r.ID)
	got := types(evs, "review")
	if w := []string{api.WfStepStarted, api.WfStepAgent, api.WfStepArtifacts, api.WfStepSucceeded}; !slices.Equal(got, w) {
		t.Errorf("review's events %v, want %v", got, w)
	}
	for _, ev := range evs {
		if ev.Type == api.WfStepAgent && (ev.Agent != "agent-run-1" || ev.Step != "review" || ev.Attempt != 1) {
			t.Errorf("step.agent event %+v", ev)
		}
	}
}

// Without outputs, the sandbox is not kept (the backend deletes it with
// the run).
func TestAgentStepNoOutputs(t *testing.T) {
	h, ab := newAgentHarness(t)
	h.run(agentsSection+`
steps:
  - id: ask
    agent: {agent: reviewer, task: "echo hi"}
`, api.RunSucceeded)
	if q := ab.requests("ask"); len(q) != 1 || q[0].Keep || q[0].Inputs != nil || strings.Contains(q[0].Run.Document, "max_turns") {
		t.Errorf("requests %+v", q)
	}
}

// A run that fails fails the attempt, which is retried as a new run;
// one that fails every attempt fails the step.
func TestAgentStepRetry(t *testing.T) {
	h, ab := newAgentHarness(t)
	r := h.run(agentsSection+`
steps:
  - id: ask
    agent: {agent: reviewer, task: "fail-once; echo done"}
    retry: {attempts: 2}
`, api.RunSucceeded)
	a := step(t, r, "ask")
	if a.Attempt != 2 || a.Attempts[0].Agent != "agent-run-1" || a.Attempts[1].Agent != "agent-run-2" ||
		!strings.Contains(a.Attempts[0].Error, "agent run agent-run-1 failed: the model gave up") ||
		a.Attempts[0].Result == nil || a.Attempts[0].Result.ExitCode != 1 || a.Result.Stdout != "done" {
		t.Errorf("attempts %+v", a.Attempts)
	}
	if n := len(ab.requests("ask")); n != 2 {
		t.Errorf("%d runs", n)
	}
	r = h.run(agentsSection+`
steps:
  - id: ask
    agent: {agent: reviewer, task: fail}
  - id: after
    run: [ok]
`, api.RunFailed)
	if a := step(t, r, "ask"); a.State != api.StepFailed || !strings.Contains(a.Error, "failed: the model gave up") {
		t.Errorf("ask %+v", a)
	}
	if s := step(t, r, "after"); s.State != api.StepSkipped {
		t.Errorf("after: %s", s.State)
	}
}

// The step's timeout bounds its run: past it the run is cancelled and
// the attempt fails saying so.
func TestAgentStepTimeout(t *testing.T) {
	h, _ := newAgentHarness(t)
	r := h.run(agentsSection+`
steps:
  - id: ask
    agent: {agent: reviewer, task: "block never"}
    timeout: 50ms
`, api.RunFailed)
	a := step(t, r, "ask")
	if !strings.Contains(a.Error, "the step's timeout (50ms) ran out") || a.Result == nil || a.Result.ExitReason != sandbox.ReasonTimeout {
		t.Errorf("ask %+v result %+v", a, a.Result)
	}
}

// A run with outputs whose agent made no sandbox fails: there is nothing
// to collect.
func TestAgentStepNoSandbox(t *testing.T) {
	h := &harness{t: t, b: newFakeBackend(t), j: newMemJournal(t), dir: t.TempDir()}
	h.e = New(noSandboxAgent{h.b}, h.j, Options{ArtifactDir: h.dir, Logger: discard()})
	t.Cleanup(func() { h.e.Close(context.Background()) })
	r := h.run(agentsSection+`
steps:
  - id: ask
    agent: {agent: reviewer, task: "say hi"}
    outputs: [/work/x]
`, api.RunFailed)
	if a := step(t, r, "ask"); !strings.Contains(a.Error, "made no sandbox") || a.Attempts[0].Agent != "r1" {
		t.Errorf("ask %+v", a)
	}
}

// noSandboxAgent answers every run at once, without a sandbox.
type noSandboxAgent struct{ *fakeBackend }

func (noSandboxAgent) Agent(ctx context.Context, o Owner, req AgentRequest) (*api.AgentRun, error) {
	now := time.Now()
	return &api.AgentRun{ID: "r1", Agent: req.Run.Agent, State: api.AgentSucceeded, Answer: "hi", Created: now, Ended: &now,
		Agents: []api.AgentState{{Name: req.Run.Agent}}}, nil
}

// On a backend that cannot run agents, an agent step fails with a clear
// error.
func TestAgentStepWithoutAgenter(t *testing.T) {
	h := newHarness(t)
	r := h.run(agentsSection+`
steps:
  - id: ask
    agent: {agent: reviewer, task: hi}
`, api.RunFailed)
	if a := step(t, r, "ask"); !strings.Contains(a.Error, "cannot run agents") {
		t.Errorf("ask %+v", a)
	}
}

// After a stop of the daemon during an agent step, the step's next
// attempt names the interrupted attempt's run (journalled as soon as it
// started) for the backend to cancel.
func TestAgentStepRecover(t *testing.T) {
	h, ab := newAgentHarness(t)
	id := h.submit(agentsSection + `
steps:
  - id: ask
    agent: {agent: reviewer, task: "block-once gate; echo again"}
`)
	h.b.waitFor("the run blocks", func() bool { return len(h.b.boxes) == 1 })
	if err := h.e.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.e = agentEngine(h, ab)
	if err := h.e.Recover(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	r := h.wait(id)
	a := step(t, r, "ask")
	if r.State != api.RunSucceeded || a.Attempt != 2 || a.Attempts[0].State != AttemptInterrupted || a.Attempts[0].Agent != "agent-run-1" {
		t.Fatalf("run %s, ask %+v", r.State, a.Attempts)
	}
	reqs := ab.requests("ask")
	if len(reqs) != 2 || reqs[0].Previous != "" || reqs[1].Previous != "agent-run-1" {
		t.Errorf("requests %+v", reqs)
	}
}
