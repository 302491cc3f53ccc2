package workflow

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestCompileAgent(t *testing.T) {
	data := doc(
		"defaults:",
		"  template: alpine",
		"  timeout: 1s",
		"  env: {A: b}",
		"  sh: echo default",
		"  retry: {attempts: 3}",
		"  priority: critical",
		"agents:",
		"  - name: reviewer",
		"    model: small",
		"    tools: [shell_exec, read_file]",
		"    # a comment",
		"    sandbox: {template: host, limits: {memory: 256m}}",
		"  - {name: helper, model: small, sandbox: {per_call: true}}",
		"steps:",
		"  - id: fetch",
		"    outputs: [/out/src]",
		"  - id: review",
		"    needs: [fetch]",
		"    agent:",
		"      agent: reviewer",
		"      task: Read /in/out/src and write /work/review.md.",
		"      max_turns: 30",
		"    inputs: {fetch: /in}",
		"    outputs: [/work/review.md]",
		"    timeout: 30m",
		"    retry: {attempts: 2}",
		"  - id: help",
		"    agent: {agent: helper, task: say hello}",
		"  - id: after",
		"    inputs: {review: /r}",
		"    run: [cat, /r/work/review.md]",
	)
	p := mustCompile(t, data)
	r := p.Step("review")
	switch {
	case r.Kind != KindAgent || r.Agent == nil:
		t.Fatalf("review: kind %q, agent %+v", r.Kind, r.Agent)
	case r.Agent.Name != "reviewer" || r.Agent.Task != "Read /in/out/src and write /work/review.md." || r.Agent.MaxTurns != 30:
		t.Errorf("agent %+v", r.Agent)
	}
	// The step's own timeout, inputs and outputs; from the defaults only
	// retry and priority.
	if r.Snapshot != SnapshotNone || r.Timeout != 30*time.Minute || r.Template != "" || r.Env != nil ||
		r.Args != nil || r.Retry.Attempts != 2 || r.Priority != Critical ||
		!reflect.DeepEqual(r.Inputs, map[string]string{"fetch": "/in"}) ||
		!reflect.DeepEqual(r.Outputs, []string{"/work/review.md"}) || !reflect.DeepEqual(r.Waits, []string{"fetch"}) {
		t.Errorf("review: %+v", r.Step)
	}
	h := p.Step("help")
	if h.Timeout != 0 || h.Retry.Attempts != 3 || h.Agent.MaxTurns != 0 {
		t.Errorf("help: %+v", h.Step)
	}
	// The run's document is the agents section, as an agents document,
	// with the step's max_turns.
	var got struct {
		Agents []map[string]any `yaml:"agents"`
		Max    int              `yaml:"max_turns"`
	}
	if err := yaml.Unmarshal([]byte(r.Agent.Document), &got); err != nil {
		t.Fatalf("document %q: %v", r.Agent.Document, err)
	}
	if len(got.Agents) != 2 || got.Agents[0]["name"] != "reviewer" || got.Agents[1]["name"] != "helper" || got.Max != 30 {
		t.Errorf("document %q: %+v", r.Agent.Document, got)
	}
	if strings.Contains(h.Agent.Document, "max_turns") || !strings.HasPrefix(r.Agent.Document, h.Agent.Document) {
		t.Errorf("documents %q and %q", h.Agent.Document, r.Agent.Document)
	}
}

// JSON is YAML too: a document's agents section written in JSON gives
// the same agents.
func TestCompileAgentJSON(t *testing.T) {
	p := mustCompile(t, []byte(`{"agents": [{"name": "a", "model": "m", "tools": ["shell_exec"]}],
"steps": [{"id": "s", "agent": {"agent": "a", "task": "t"}}]}`))
	var got struct {
		Agents []struct {
			Name  string   `yaml:"name"`
			Model string   `yaml:"model"`
			Tools []string `yaml:"tools"`
		} `yaml:"agents"`
	}
	s := p.Step("s")
	if err := yaml.Unmarshal([]byte(s.Agent.Document), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Agents) != 1 || got.Agents[0].Name != "a" || got.Agents[0].Model != "m" || !reflect.DeepEqual(got.Agents[0].Tools, []string{"shell_exec"}) {
		t.Errorf("document %q", s.Agent.Document)
	}
}

// agentRejectCases are invalid documents with agents and agent steps.
var agentRejectCases = []struct {
	name string
	doc  []byte
	cpus int
	want []wantErr
}{
	{"no agents section", doc(
		"steps:",
		"  - id: a",
		"    agent: {agent: x, task: t}",
	), 0, []wantErr{{3, "agent.agent", "the document has no agents section"}}},
	{"agents shapes", doc(
		"agents: {name: x}",
		"steps:",
		"  - id: a",
		"    sh: x",
	), 0, []wantErr{{1, "agents", "want a list of agents"}}},
	{"agents empty", doc(
		"agents: []",
		"steps:",
		"  - id: a",
		"    sh: x",
	), 0, []wantErr{{1, "agents", "empty"}}},
	{"agent entries", doc(
		"agents:",
		"  - model: m",
		"  - name: 'a b'",
		"  - name: ok",
		"  - name: ok",
		"  - just-a-string",
		"  - name: [x]",
		"steps:",
		"  - id: a",
		"    sh: x",
	), 0, []wantErr{
		{2, "agents[0].name", "missing"},
		{3, "agents[1].name", "not a valid agent name"},
		{5, "agents[3].name", `"ok" is the name of an agent before`},
		{6, "agents[4]", "want a mapping"},
		{7, "agents[5].name", "want a string"},
	}},
	{"aliases", doc(
		"agents:",
		"  - &base {name: a, model: m}",
		"  - *base",
		"steps:",
		"  - id: a",
		"    sh: x",
	), 0, []wantErr{{3, "agents", "aliases are not supported"}}},
	{"merge keys", doc(
		"agents:",
		"  - &base {name: a, model: m}",
		"  - <<: *base",
		"    name: b",
		"steps:",
		"  - id: a",
		"    sh: x",
	), 0, []wantErr{{3, "agents", "merge keys (<<) are not supported"}}},
	{"step fields", doc(
		"agents:",
		"  - {name: a, model: m}",
		"steps:",
		"  - id: s",
		"    agent:",
		"      agent: nobody",
		"      task: ' '",
		"      max_turns: 500",
		"      colour: red",
		"  - id: t",
		"    agent: {}",
		"  - id: u",
		"    agent: [a]",
		"  - id: v",
		"    agent: {agent: a, task: t, max_turns: 0}",
	), 0, []wantErr{
		{6, "agent.agent", `no agent "nobody"`},
		{7, "agent.task", "empty"},
		{8, "agent.max_turns", "must be between 1 and 200"},
		{9, "agent.colour", "unknown field"},
		{11, "agent.agent", "missing"},
		{11, "agent.task", "missing"},
		{13, "agent", "want a mapping"},
		{15, "agent.max_turns", "must be between 1 and 200"},
	}},
	{"fields an agent step does not take", doc(
		"agents:",
		"  - {name: a, model: m}",
		"steps:",
		"  - id: s",
		"    outputs: [/o]",
		"    sh: x",
		"  - id: b",
		"    agent: {agent: a, task: t}",
		"    run: [x]",
		"    template: alpine",
		"    limits: {memory: 1g}",
		"    env: {A: b}",
		"    policy: {deny: ['Exec(rm*)']}",
		"    network: {mode: none}",
		"    snapshot: full",
		"    from: s",
		"    stdin_from: s",
		"    build: {source: s, command: [make]}",
	), 0, []wantErr{
		{9, "run", "runs its agent on agent.task"},
		{10, "template", "its agent's sandbox"},
		{11, "limits", "its agent's sandbox"},
		{12, "env", "its agent's sandbox"},
		{13, "policy", "its agent's sandbox"},
		{14, "network", "its agent's sandbox"},
		{15, "snapshot", "keeps no snapshot"},
		{16, "from", "not a snapshot"},
		{17, "stdin_from", "no standard input"},
		{18, "build", "a build or an agent, not both"},
	}},
	{"defaults", doc(
		"defaults:",
		"  agent: {agent: a, task: t}",
		"agents:",
		"  - {name: a, model: m}",
		"steps:",
		"  - id: a",
		"    sh: x",
	), 0, []wantErr{{2, "defaults.agent", "cannot have a default"}}},
	{"links", doc(
		"agents:",
		"  - {name: a, model: m}",
		"  - {name: p, model: m, sandbox: {per_call: true}}",
		"    # per_call",
		"steps:",
		"  - id: ag",
		"    agent: {agent: a, task: t}",
		"    outputs: [/o]",
		"  - id: b",
		"    from: ag",
		"    sh: x",
		"  - id: c",
		"    agent: {agent: p, task: t}",
		"    outputs: [/o]",
		"  - group: g",
		"    mode: parallel",
		"    steps:",
		"      - id: p1",
		"        agent: {agent: a, task: t}",
		"      - id: p2",
		"        stdin_from: p1",
		"        sh: cat",
		"  - group: bud",
		"    mode: parallel",
		"    budget: {cpus: 1}",
		"    steps:",
		"      - id: q",
		"        agent: {agent: a, task: t}",
	), 4, []wantErr{
		{10, "from", `step "ag" is an agent step: it keeps no snapshot`},
		{13, "agent.agent", "sandbox.per_call"},
		{21, "stdin_from", `step "p1" is an agent step: it has no stdout`},
		{28, "agent", `cannot run inside the budget of group "bud"`},
	}},
}

// The agents document is checked as an agents file is, its errors at
// their lines of the workflow document; in JSON, at the agents key's.
func TestCompileAgentsDocumentErrors(t *testing.T) {
	checkReject(t, doc(
		"name: x",
		"agents:",
		"  - name: a",
		"    model: m",
		"    tools: [shell_exec, teleport]",
		"  - name: b",
		"steps:",
		"  - id: s",
		"    agent: {agent: a, task: t}",
	), 0, []wantErr{
		{5, "agents.a.tools", "teleport"},
		{6, "agents.b.model", "missing"},
	})
	checkReject(t, []byte(`{"name": "x",
"agents": [{"name": "a", "model": "m", "tools": ["teleport"]}],
"steps": [{"id": "s", "agent": {"agent": "a", "task": "t"}}]}`), 0, []wantErr{{2, "agents.a.tools", "teleport"}})
}

func TestCompileRejectsAgent(t *testing.T) {
	for _, tc := range agentRejectCases {
		t.Run(tc.name, func(t *testing.T) { checkReject(t, tc.doc, tc.cpus, tc.want) })
	}
}

func TestAddStepAgent(t *testing.T) {
	p := mustCompile(t, doc(
		"agents:",
		"  - {name: a, model: m}",
		"steps:",
		"  - id: fetch",
		"    outputs: [/out]",
		"    sh: x",
		"  - group: work",
		"    mode: concurrent",
		"    needs: [fetch]",
		"    steps:",
		"      - id: first",
		"        sh: x",
	))
	s, err := p.AddStep("work", []byte(`{"id": "more", "agent": {"agent": "a", "task": "look at /in", "max_turns": 3}, "inputs": {"fetch": "/in"}}`))
	if err != nil {
		t.Fatalf("AddStep: %v", err)
	}
	if s.Kind != KindAgent || s.Agent.Name != "a" || !strings.HasSuffix(s.Agent.Document, "max_turns: 3\n") || s.Inputs["fetch"] != "/in" {
		t.Errorf("added %+v %+v", s.Step, s.Agent)
	}
	_, err = p.AddStep("work", []byte(`{"id": "bad", "agent": {"agent": "b", "task": "t"}}`))
	if got := errorsOf(t, err); len(got) != 1 || got[0].Field != "agent.agent" {
		t.Errorf("an agent the document does not have: %v", err)
	}
}
