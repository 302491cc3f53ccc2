package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/agent/model/modeltest"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/workflow/engine"
)

// withModels points the daemon's model client at srv (a fake OpenAI
// provider of model "m").
func withModels(t *testing.T, srv *modeltest.Server) func(*Config) {
	path := filepath.Join(t.TempDir(), "models.yaml")
	doc := fmt.Sprintf("providers:\n  - {name: fake, kind: openai, base_url: %q, model: m}\n", srv.URL)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *Config) { c.ModelsFile = path }
}

// shellCall is a model turn asking for shell_exec of command.
func shellCall(command string) modeltest.Turn {
	args, _ := json.Marshal(map[string]string{"command": command})
	return modeltest.Turn{ToolCalls: []model.ToolCall{{Name: "shell_exec", Arguments: args}}}
}

// TestWorkflowAgentStep runs an agent step on the real runtime (root)
// with a fake model: a run step writes a file, the agent step's agent
// reads it from its inputs (the model's second request sees it in the
// tool's result) and writes its report, which the step's outputs collect
// from the agent's kept sandbox and a third step reads as its input. The
// attempt names the agent run, which agent.get shows as the tenant's,
// and no sandbox is left.
func TestWorkflowAgentStep(t *testing.T) {
	srv := modeltest.NewOpenAI(t,
		shellCall("cat /in/workspace/notes.txt && printf 'reviewed: ' > /workspace/review.md && cat /in/workspace/notes.txt >> /workspace/review.md"),
		modeltest.Turn{Text: "The notes say hello; the review is written."},
	)
	h := newHarness(t, withModels(t, srv))
	run := h.createRun(tokenA, wfDoc(
		"defaults: {snapshot: none}",
		"agents:",
		"  - name: reviewer",
		"    model: m",
		"    tools: [shell_exec]",
		"steps:",
		"  - id: fetch",
		"    sh: echo hello notes > /workspace/notes.txt",
		"    outputs: [/workspace/notes.txt]",
		"  - id: review",
		"    agent: {agent: reviewer, task: Review /in/workspace/notes.txt into /workspace/review.md.}",
		"    inputs: {fetch: /in}",
		"    outputs: [/workspace/review.md]",
		"  - id: use",
		"    inputs: {review: /r}",
		"    sh: cat /r/workspace/review.md",
	))
	got := h.waitRun(tokenA, run.ID)
	wantSucceeded(t, got)
	rv := stepOf(t, got, "review")
	if rv.Kind != "agent" || len(rv.Attempts) != 1 || rv.Attempts[0].Agent == "" || rv.Result == nil ||
		rv.Result.Stdout != "The notes say hello; the review is written." {
		t.Fatalf("review: %+v, result %+v", rv, rv.Result)
	}
	if len(rv.Outputs) != 1 || rv.Outputs[0].Path != "/workspace/review.md" {
		t.Errorf("review's outputs %+v", rv.Outputs)
	}
	if u := stepOf(t, got, "use"); u.Result == nil || u.Result.Stdout != "reviewed: hello notes\n" {
		t.Errorf("use: %+v", u.Result)
	}
	// The model saw the input's content in the tool's result.
	rec := srv.Received()
	if len(rec) != 2 {
		t.Fatalf("%d model requests", len(rec))
	}
	last := rec[1].Messages[len(rec[1].Messages)-1]
	if last.Role != model.RoleTool || !strings.Contains(last.Text, "hello notes") {
		t.Errorf("the tool's result: %+v", last)
	}
	// The agent run is the tenant's, labelled with the step.
	ar, err := h.svc.call(context.Background(), Caller{Tenant: "a"}, api.OpAgentGet, internalInput(api.AgentRunRef{Run: rv.Attempts[0].Agent}))
	if err != nil {
		t.Fatalf("agent.get: %v", err)
	}
	if r := ar.(*api.AgentRun); r.State != api.AgentSucceeded || r.Labels[engine.LabelStep] != "review" || r.Labels[engine.LabelRun] != run.ID {
		t.Errorf("agent run %+v", r)
	}
	if _, err := h.svc.call(context.Background(), Caller{Tenant: "b"}, api.OpAgentGet, internalInput(api.AgentRunRef{Run: rv.Attempts[0].Agent})); !isCode(err, api.CodeNotFound) {
		t.Errorf("agent.get by tenant b: %v", err)
	}
	// Nothing is left: the kept sandbox was deleted after the outputs.
	for _, sb := range h.sandboxes(tokenA) {
		if sb.EndedAt == nil {
			t.Errorf("sandbox left: %+v", sb)
		}
	}
	if n := h.svc.wf.agentSteps.size(); n != 0 {
		t.Errorf("%d agent steps still registered", n)
	}
}

// sandboxes lists the sandboxes of token's tenant, ended ones too.
func (h *harness) sandboxes(token string) []api.Sandbox {
	h.t.Helper()
	r := h.do("GET", "/v1/sandboxes", token, nil)
	var list api.SandboxList
	r.decode(h.t, &list)
	return list.Sandboxes
}

// size is the number of registered steps.
func (a *agentSteps) size() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}

// An agent step whose run fails (the model answers 400) fails its step
// with the run's error; a step cancelled while its model call is held
// cancels the run.
func TestWorkflowAgentStepFails(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	srv := modeltest.NewOpenAI(t, modeltest.Turn{Status: 400}, modeltest.Turn{Hold: hold})
	h := newFakeHarness(t, withModels(t, srv))
	doc := wfDoc(
		"agents:",
		"  - {name: a, model: m}",
		"steps:",
		"  - id: ask",
		"    agent: {agent: a, task: say hi}",
	)
	got := h.waitRun(tokenA, h.createRun(tokenA, doc).ID)
	ask := stepOf(t, got, "ask")
	if got.State != api.RunFailed || !strings.Contains(ask.Error, "failed") || ask.Attempts[0].Agent == "" {
		t.Fatalf("run %s, ask %+v", got.State, ask)
	}

	run := h.createRun(tokenA, doc)
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.WaitInFlight(wctx, 1); err != nil {
		t.Fatal(err)
	}
	h.do("POST", "/v1/workflows/"+run.ID+"/cancel", tokenA, struct{}{})
	got = h.waitRun(tokenA, run.ID)
	ask = stepOf(t, got, "ask")
	if got.State != api.RunCancelled || ask.Attempts[0].Agent == "" {
		t.Fatalf("run %s, ask %+v", got.State, ask)
	}
	ar, err := h.svc.call(context.Background(), Caller{Tenant: "a"}, api.OpAgentGet, internalInput(api.AgentRunRef{Run: ask.Attempts[0].Agent}))
	if err != nil || ar.(*api.AgentRun).State != api.AgentCancelled {
		t.Errorf("agent run %+v, %v", ar, err)
	}
}

// agentSandboxCall handles only the sandbox.create of a registered step
// of the caller's own tenant (a label naming another tenant's step gets
// nothing), and keeps only the step's agent's sandbox from its delete.
func TestAgentSandboxCall(t *testing.T) {
	h := newFakeHarness(t, nil)
	s := h.svc
	dir := filepath.Join(s.wf.dir, "wf-000000000001", "fetch", "out")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{engine.LabelRun: "wf-000000000001", engine.LabelStep: "s", engine.LabelAttempt: "1", agentLabelName: "a"}
	key, _ := agentStepKeyOf("a", labels)
	step := &agentStep{key: key, agent: "a", inputs: []sandbox.Bind{{Source: dir, Target: "/in"}}, keep: true}
	s.wf.agentSteps.add(step)
	ctx := context.Background()
	ca, cb := Caller{Tenant: "a"}, Caller{Tenant: "b"}

	if _, handled, _ := s.agentSandboxCall(ctx, cb, api.OpSandboxCreate, api.CreateSandbox{Labels: labels}); handled {
		t.Errorf("tenant b's create with tenant a's labels was handled")
	}
	if _, handled, _ := s.agentSandboxCall(ctx, ca, api.OpExec, api.Exec{}); handled {
		t.Errorf("an exec was handled")
	}
	resp, handled, err := s.agentSandboxCall(ctx, ca, api.OpSandboxCreate, &api.CreateSandbox{Labels: labels})
	if !handled || err != nil {
		t.Fatalf("create: handled %v, %v", handled, err)
	}
	kept := resp.(*api.Sandbox).ID
	other := map[string]string{engine.LabelRun: "wf-000000000001", engine.LabelStep: "s", engine.LabelAttempt: "1", agentLabelName: "helper"}
	resp, handled, err = s.agentSandboxCall(ctx, ca, api.OpSandboxCreate, api.CreateSandbox{Labels: other})
	if !handled || err != nil {
		t.Fatalf("create of the helper: handled %v, %v", handled, err)
	}
	helper := resp.(*api.Sandbox).ID
	// Each create's record names the input it bound.
	page, err := h.tape.QueryPage(ctx, audit.Query{Tenant: "a", Kind: "sandbox.create", Limit: audit.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	bound := map[string]bool{}
	for _, ev := range page.Events {
		bound[ev.Sandbox] = strings.Contains(string(ev.Result), `"inputs":[{"source":"wf-000000000001/fetch/out","target":"/in"}]`)
	}
	if !bound[kept] || !bound[helper] {
		t.Errorf("inputs bound: %v (kept %s, helper %s)", bound, kept, helper)
	}
	// The kept one survives the run's delete; the helper's does not, nor
	// does a delete by another tenant reach the kept one.
	if _, handled, _ := s.agentSandboxCall(ctx, cb, api.OpSandboxDelete, api.SandboxRef{Sandbox: kept}); handled {
		t.Errorf("tenant b's delete was handled")
	}
	if _, handled, err := s.agentSandboxCall(ctx, ca, api.OpSandboxDelete, api.SandboxRef{Sandbox: kept}); !handled || err != nil {
		t.Errorf("delete of the kept sandbox: handled %v, %v", handled, err)
	}
	if _, handled, _ := s.agentSandboxCall(ctx, ca, api.OpSandboxDelete, api.SandboxRef{Sandbox: helper}); handled {
		t.Errorf("the helper's delete was handled")
	}
	if _, err := s.call(ctx, ca, api.OpSandboxGet, internalInput(api.SandboxRef{Sandbox: kept})); err != nil {
		t.Errorf("the kept sandbox: %v", err)
	}
	if got := s.endAgentStep(ctx, ca, step); got != kept {
		t.Errorf("kept %q, want %q", got, kept)
	}
	if _, handled, _ := s.agentSandboxCall(ctx, ca, api.OpSandboxCreate, api.CreateSandbox{Labels: labels}); handled {
		t.Errorf("a create after the step's end was handled")
	}
}
