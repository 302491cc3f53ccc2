package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/agent/model/modeltest"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
)

// fakeProvider is one provider of a test's models file: a modeltest
// server of the OpenAI kind serving model "m".
type fakeProvider struct {
	name string
	tags []string
	srv  *modeltest.Server
}

// providersYAML is the providers section naming provs.
func providersYAML(provs ...fakeProvider) string {
	var b strings.Builder
	b.WriteString("providers:\n")
	for _, p := range provs {
		fmt.Fprintf(&b, "  - name: %s\n    kind: openai\n    base_url: %s\n    model: m\n", p.name, p.srv.URL)
		if len(p.tags) > 0 {
			fmt.Fprintf(&b, "    tags: [%s]\n", strings.Join(p.tags, ", "))
		}
	}
	return b.String()
}

// withProviders configures a service's model client with provs (a models
// file in a test directory) and quick retries; mods are applied after.
func withProviders(t *testing.T, provs []fakeProvider, mods ...func(*Config)) func(*Config) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "models.yaml")
	if err := os.WriteFile(path, []byte(providersYAML(provs...)), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *Config) {
		c.ModelsFile = path
		c.ModelOptions = []model.Option{model.WithRetry(3, 5*time.Millisecond, 20*time.Millisecond)}
		for _, m := range mods {
			m(c)
		}
	}
}

// toolCall is a scripted model turn asking for one tool call.
func toolCall(name, args string) modeltest.Turn {
	return modeltest.Turn{ToolCalls: []model.ToolCall{{Name: name, Arguments: json.RawMessage(args)}}}
}

// startAgent is POST /v1/agents/runs: the run as it starts.
func (h *harness) startAgent(token string, req api.CreateAgentRun) api.AgentRun {
	h.t.Helper()
	r := h.do("POST", "/v1/agents/runs", token, req)
	if r.status != http.StatusCreated {
		h.t.Fatalf("agent.create: %d %s", r.status, r.body)
	}
	var run api.AgentRun
	r.decode(h.t, &run)
	return run
}

// agentEvents is GET /v1/agents/runs/{run}/events (follow: until the
// run's end).
func (h *harness) agentEvents(token, run string, follow bool) []api.AgentEvent {
	h.t.Helper()
	r := h.do("GET", fmt.Sprintf("/v1/agents/runs/%s/events?follow=%t", run, follow), token, nil)
	if r.status != http.StatusOK {
		h.t.Fatalf("agent.events: %d %s", r.status, r.body)
	}
	var out []api.AgentEvent
	for _, line := range strings.Split(strings.TrimSpace(string(r.body)), "\n") {
		if line == "" {
			continue
		}
		var ev api.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			h.t.Fatalf("event %q: %v", line, err)
		}
		if ev.Type != api.EventAgent || ev.Agent == nil {
			h.t.Fatalf("event %q: not an agent event", line)
		}
		out = append(out, *ev.Agent)
	}
	return out
}

// waitAgent follows a run to its end and returns it.
func (h *harness) waitAgent(token, run string) (api.AgentRun, []api.AgentEvent) {
	h.t.Helper()
	evs := h.agentEvents(token, run, true)
	var got api.AgentRun
	r := h.do("GET", "/v1/agents/runs/"+run, token, nil)
	if r.status != http.StatusOK {
		h.t.Fatalf("agent.get: %d %s", r.status, r.body)
	}
	r.decode(h.t, &got)
	return got, evs
}

// runAgent starts a run and waits for its end.
func (h *harness) runAgent(token string, req api.CreateAgentRun) (api.AgentRun, []api.AgentEvent) {
	h.t.Helper()
	return h.waitAgent(token, h.startAgent(token, req).ID)
}

// modelCalls are the model.call audit events of tenant a.
func (h *harness) modelCalls() []audit.Event {
	h.t.Helper()
	page, err := h.tape.QueryPage(context.Background(), audit.Query{Tenant: "a", Kind: "model.call", Limit: audit.MaxLimit})
	if err != nil {
		h.t.Fatal(err)
	}
	return page.Events
}

// metric is the value of one metric line of /metrics ("" if absent).
func (h *harness) metric(line string) string {
	h.t.Helper()
	resp, err := http.Get(h.srv.URL + "/metrics")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, "")
	buf := make([]byte, 1<<20)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(l, line+" "); ok {
			return v
		}
	}
	return ""
}

// TestAgentGreenTea: an agent tagged green-tea, with one local provider
// tagged green-tea and one remote one configured, is served by the local
// one alone, even while it fails once (429): the remote receives nothing
// and the model.call audit events name only the local provider. Control:
// an untagged agent's call fails over from the failing local provider to
// the remote one. Usage, metrics and tenancy are as documented.
func TestAgentGreenTea(t *testing.T) {
	local := modeltest.NewOpenAI(t, modeltest.Turn{Status: http.StatusTooManyRequests}, modeltest.Turn{Text: "kept local"})
	// After its script the local provider fails every request.
	local.Respond(modeltest.Always(modeltest.Turn{Status: http.StatusInternalServerError}))
	remote := modeltest.NewOpenAI(t)
	remote.Respond(modeltest.Always(modeltest.Turn{Text: "from afar"}))
	provs := []fakeProvider{{"local", []string{"local", "green-tea"}, local}, {"remote", nil, remote}}
	h := newFakeHarness(t, withProviders(t, provs))
	doc := "agents:\n  - name: secret\n    model: m\n    tags: [green-tea]\n    system: keep it local\n" +
		"  - name: open\n    model: m\n"

	run, evs := h.runAgent(tokenA, api.CreateAgentRun{Document: doc, Agent: "secret", Task: "the data"})
	if run.State != api.AgentSucceeded || run.Answer != "kept local" {
		t.Fatalf("green-tea run: %+v", run)
	}
	if n := remote.Requests(); n != 0 {
		t.Fatalf("the remote provider received %d requests of a green-tea agent", n)
	}
	if local.Requests() != 2 {
		t.Errorf("local requests %d, want 2 (a 429, then the answer)", local.Requests())
	}
	if run.Usage.InputTokens != modeltest.DefaultInputTokens || run.Usage.OutputTokens != modeltest.DefaultOutputTokens || run.Turns != 1 {
		t.Errorf("usage %+v, turns %d", run.Usage, run.Turns)
	}
	if evs[len(evs)-1].Type != api.AgentEvRunSucceeded {
		t.Errorf("last event %+v", evs[len(evs)-1])
	}
	// One model.call per attempt: the local 429, then its answer.
	calls := h.modelCalls()
	if len(calls) != 2 || calls[0].Error == "" || !strings.Contains(string(calls[0].Result), `"provider":"local"`) {
		t.Fatalf("model.call events: %+v", calls)
	}
	var req, res map[string]any
	json.Unmarshal(calls[1].Request, &req)
	json.Unmarshal(calls[1].Result, &res)
	if res["provider"] != "local" || req["alias"] != "m" || fmt.Sprint(req["tags"]) != "[green-tea]" || req["run"] != run.ID ||
		req["agent"] != "secret" || calls[1].Actor == "" || res["input_tokens"] != float64(modeltest.DefaultInputTokens) {
		t.Errorf("model.call: %s %s", calls[1].Request, calls[1].Result)
	}
	for _, e := range calls {
		if strings.Contains(string(e.Request)+string(e.Result)+e.Error, "the data") || strings.Contains(string(e.Result), "kept local") {
			t.Errorf("a model.call event holds the prompt or the answer: %+v", e)
		}
	}
	// Another tenant sees none of it.
	if r := h.do("GET", "/v1/agents/runs/"+run.ID, tokenB, nil); r.status != http.StatusNotFound {
		t.Errorf("tenant b's get: %d %s", r.status, r.body)
	}
	if r := h.do("GET", "/v1/agents/runs/"+run.ID+"/events", tokenB, nil); r.status != http.StatusNotFound {
		t.Errorf("tenant b's events: %d %s", r.status, r.body)
	}
	var list api.AgentRunList
	h.do("GET", "/v1/agents/runs", tokenB, nil).decode(t, &list)
	if len(list.Runs) != 0 {
		t.Errorf("tenant b lists %+v", list.Runs)
	}

	// Control: an untagged agent reaches the remote provider (the local
	// one fails now).
	run, _ = h.runAgent(tokenA, api.CreateAgentRun{Document: doc, Agent: "open", Task: "anything"})
	if run.State != api.AgentSucceeded || run.Answer != "from afar" || remote.Requests() != 1 {
		t.Fatalf("untagged run: %+v, remote requests %d", run, remote.Requests())
	}
	h.do("GET", "/v1/agents/runs", tokenA, nil).decode(t, &list)
	if len(list.Runs) != 2 {
		t.Errorf("tenant a lists %d runs", len(list.Runs))
	}
	for line, want := range map[string]string{
		`moat_model_requests_total{provider="local",outcome="rate_limited"}`: "1",
		`moat_model_requests_total{provider="local",outcome="ok"}`:           "1",
		`moat_model_requests_total{provider="remote",outcome="ok"}`:          "1",
		`moat_model_tokens_total{provider="local",direction="input"}`:        fmt.Sprint(modeltest.DefaultInputTokens),
		`moat_model_tokens_total{provider="remote",direction="output"}`:      fmt.Sprint(modeltest.DefaultOutputTokens),
		`moat_model_latency_seconds_count{provider="remote"}`:                "1",
		`moat_calls_total{op="agent.create",code="ok"}`:                      "2",
	} {
		if got := h.metric(line); got != want {
			t.Errorf("%s = %q, want %s", line, got, want)
		}
	}
}

// TestAgentCreateRefusals: what agent.create refuses before a run
// starts, with the line or the cap it broke; a document whose providers
// are the daemon's own is taken.
func TestAgentCreateRefusals(t *testing.T) {
	// A daemon without providers.
	h0 := newFakeHarness(t, nil)
	if r := h0.do("POST", "/v1/agents/runs", tokenA, api.CreateAgentRun{Document: "agents:\n  - {name: a, model: m}\n", Agent: "a", Task: "t"}); r.status != http.StatusNotImplemented ||
		!strings.Contains(string(r.body), "no model providers configured (models_file)") {
		t.Errorf("without providers: %d %s", r.status, r.body)
	}

	srv := modeltest.NewOpenAI(t)
	srv.Respond(modeltest.Always(modeltest.Turn{Text: "ok", Delay: 0}))
	provs := []fakeProvider{{"p1", nil, srv}}
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	h := newFakeHarness(t, withProviders(t, provs, func(c *Config) { c.AgentMaxRuns, c.AgentMaxTurns = 2, 30 }))
	agents := "agents:\n  - {name: a, model: m}\n"
	for name, tc := range map[string]struct {
		req    api.CreateAgentRun
		status int
		want   string
	}{
		"no document":     {api.CreateAgentRun{Agent: "a", Task: "t"}, 400, "document is required"},
		"no agent":        {api.CreateAgentRun{Document: agents, Task: "t"}, 400, "agent is required"},
		"no task":         {api.CreateAgentRun{Document: agents, Agent: "a"}, 400, "task is required"},
		"bad document":    {api.CreateAgentRun{Document: "agents:\n  - {name: a, model: m, toolz: []}\n", Agent: "a", Task: "t"}, 400, "line 2"},
		"unknown agent":   {api.CreateAgentRun{Document: agents, Agent: "b", Task: "t"}, 400, `no agent`},
		"other providers": {api.CreateAgentRun{Document: "max_turns: 3\nproviders:\n  - {name: x, kind: openai, base_url: \"http://127.0.0.1:1/v1\", model: m}\n" + agents, Agent: "a", Task: "t"}, 400, "line 2: providers"},
		"above max_turns": {api.CreateAgentRun{Document: "max_turns: 31\n" + agents, Agent: "a", Task: "t"}, 400, "cap of 30"},
	} {
		r := h.do("POST", "/v1/agents/runs", tokenA, tc.req)
		if r.status != tc.status || !strings.Contains(string(r.body), tc.want) {
			t.Errorf("%s: %d %s, want %d %q", name, r.status, r.body, tc.status, tc.want)
		}
	}
	// The daemon's own providers, sent back whole, are taken.
	run, _ := h.runAgent(tokenA, api.CreateAgentRun{Document: providersYAML(provs...) + agents, Agent: "a", Task: "t"})
	if run.State != api.AgentSucceeded {
		t.Fatalf("with the daemon's providers: %+v", run)
	}
	// max_runs: two runs held unfinished, the third is refused.
	srv.Respond(modeltest.Always(modeltest.Turn{Hold: hold}))
	for i := range 2 {
		h.startAgent(tokenA, api.CreateAgentRun{Document: agents, Agent: "a", Task: fmt.Sprint("held ", i)})
	}
	if r := h.do("POST", "/v1/agents/runs", tokenA, api.CreateAgentRun{Document: agents, Agent: "a", Task: "third"}); r.status != http.StatusTooManyRequests {
		t.Errorf("a third unfinished run: %d %s", r.status, r.body)
	}
	// Another tenant has its own count.
	h.startAgent(tokenB, api.CreateAgentRun{Document: agents, Agent: "a", Task: "b's"})
	// A list filter that is no state.
	if r := h.do("GET", "/v1/agents/runs?state=bogus", tokenA, nil); r.status != http.StatusBadRequest {
		t.Errorf("state=bogus: %d %s", r.status, r.body)
	}
	var list api.AgentRunList
	h.do("GET", "/v1/agents/runs?state=running", tokenA, nil).decode(t, &list)
	h.do("GET", "/v1/agents/runs?state=pending", tokenA, nil)
	if n := len(list.Runs); n > 2 {
		t.Errorf("running: %d runs", n)
	}
	if !slices.ContainsFunc(h.modelCalls(), func(e audit.Event) bool { return strings.Contains(string(e.Result), `"provider":"p1"`) }) {
		t.Error("no model.call event of p1")
	}
}

// TestAgentToolMetricNames: a tool name the model made up is counted in
// moat_agent_tool_calls_total as "unknown", never as a label value of its
// own (a model, or a page it fetched, must not grow the daemon's metrics
// without bound). A tool the agent is offered keeps its name.
func TestAgentToolMetricNames(t *testing.T) {
	srv := modeltest.NewOpenAI(t,
		toolCall("made_up_tool_1", `{}`),
		toolCall("shell_exec", `{"command": 1}`),
		modeltest.Turn{Text: "done"})
	h := newFakeHarness(t, withProviders(t, []fakeProvider{{"p1", nil, srv}}))
	doc := "agents:\n  - name: a\n    model: m\n    tools: [shell_exec]\n"
	run, _ := h.runAgent(tokenA, api.CreateAgentRun{Document: doc, Agent: "a", Task: "t"})
	if run.State != api.AgentSucceeded {
		t.Fatalf("run: %+v", run)
	}
	for line, want := range map[string]string{
		`moat_agent_tool_calls_total{tool="made_up_tool_1",decision=""}`: "",
		`moat_agent_tool_calls_total{tool="unknown",decision=""}`:        "1",
		`moat_agent_tool_calls_total{tool="shell_exec",decision=""}`:     "1",
	} {
		if got := h.metric(line); got != want {
			t.Errorf("%s = %q, want %q", line, got, want)
		}
	}
}

// TestAgentResumeRunningConflict: agent.resume of a run still running is
// 409 conflict, as API.md says, even when the tenant is at its max_runs
// (resuming an unfinished run adds no unfinished run).
func TestAgentResumeRunningConflict(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	srv := modeltest.NewOpenAI(t)
	srv.Respond(modeltest.Always(modeltest.Turn{Hold: hold}))
	h := newFakeHarness(t, withProviders(t, []fakeProvider{{"p1", nil, srv}}, func(c *Config) { c.AgentMaxRuns = 1 }))
	run := h.startAgent(tokenA, api.CreateAgentRun{Document: "agents:\n  - {name: a, model: m}\n", Agent: "a", Task: "t"})
	r := h.do("POST", "/v1/agents/runs/"+run.ID+"/resume", tokenA, api.ResumeAgentRun{Task: "more"})
	if r.status != http.StatusConflict {
		t.Errorf("resume of a running run at max_runs: %d %s, want 409", r.status, r.body)
	}
}

// TestLoadModelsFIFO: a FIFO where the models file should be is refused
// at once (it used to block the daemon's start on open); control: the
// same content in a regular file loads.
func TestLoadModelsFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "models.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := loadModels(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a FIFO: %v", err)
	}
	reg := filepath.Join(dir, "ok.yaml")
	doc := "providers:\n  - name: p\n    kind: openai\n    base_url: http://127.0.0.1:1/v1\n    model: m\n"
	if err := os.WriteFile(reg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err := loadModels(reg); err != nil || len(cfg.Providers) != 1 {
		t.Fatalf("control: %+v %v", cfg, err)
	}
}
