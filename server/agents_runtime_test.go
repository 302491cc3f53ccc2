package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/agent/model/modeltest"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testdns"
)

// toolResults are the tool results (RoleTool messages) of the last
// request srv received: what the model saw of its tool calls.
func toolResults(srv *modeltest.Server) []model.Message {
	rs := srv.Received()
	var out []model.Message
	for _, m := range rs[len(rs)-1].Messages {
		if m.Role == model.RoleTool {
			out = append(out, m)
		}
	}
	return out
}

// TestAgentWriteRunRead (root): an agent writes a script, runs it and
// reads what it wrote, each tool call a call of the run's owner in the
// agent's sandbox: the model's next request sees each exact result; the
// run succeeds with the model's answer, its sandbox is deleted at the
// end, the tool calls are counted by tool and decision, and the run's
// end is audited.
func TestAgentWriteRunRead(t *testing.T) {
	srv := modeltest.NewOpenAI(t,
		toolCall("write_file", `{"path": "/workspace/hello.sh", "content": "echo hi-from-the-sandbox > /workspace/out.txt\necho ran\n"}`),
		toolCall("shell_exec", `{"command": "sh /workspace/hello.sh"}`),
		toolCall("read_file", `{"path": "/workspace/out.txt"}`),
		modeltest.Turn{Text: "It says hi."},
	)
	h := newHarness(t, withProviders(t, []fakeProvider{{"local", nil, srv}}))
	doc := "agents:\n  - name: coder\n    model: m\n    tools: [write_file, shell_exec, read_file]\n"
	run, evs := h.runAgent(tokenA, api.CreateAgentRun{Document: doc, Agent: "coder", Task: "say hi"})
	if run.State != api.AgentSucceeded || run.Answer != "It says hi." || run.Turns != 4 {
		t.Fatalf("run: %+v", run)
	}
	rs := srv.Received()
	if len(rs) != 4 {
		t.Fatalf("%d model requests", len(rs))
	}
	last := func(i int) model.Message { ms := rs[i].Messages; return ms[len(ms)-1] }
	if m := last(2); m.Role != model.RoleTool || !strings.Contains(m.Text, "exit code 0") || !strings.Contains(m.Text, "ran") {
		t.Errorf("the shell_exec result the model saw: %+v", m)
	}
	if m := last(3); m.Role != model.RoleTool || !strings.Contains(m.Text, "hi-from-the-sandbox") {
		t.Errorf("the read_file result the model saw: %+v", m)
	}
	if len(rs[3].Messages) != 7 || rs[3].Messages[0].Text != "say hi" {
		t.Errorf("the last request's conversation: %+v", rs[3].Messages)
	}
	if len(run.Agents) != 1 || run.Agents[0].ToolCalls != 3 {
		t.Fatalf("agents: %+v", run.Agents)
	}
	// One sandbox served the three calls; it is deleted at the end.
	boxes := map[string]bool{}
	for _, ev := range evs {
		if ev.Type == api.AgentEvToolResult && ev.Tool != nil {
			boxes[ev.Tool.Sandbox] = true
		}
	}
	if len(boxes) != 1 || boxes[""] {
		t.Fatalf("the tool calls' sandboxes: %v", boxes)
	}
	for id := range boxes {
		var sb api.Sandbox
		h.do("GET", "/v1/sandboxes/"+id, tokenA, nil).decode(t, &sb)
		if sb.State != api.StateStopped || sb.EndReason != api.EndDeleted {
			t.Errorf("the agent's sandbox after the run: %+v", sb)
		}
	}
	for line, want := range map[string]string{
		`moat_agent_tool_calls_total{tool="shell_exec",decision="allow"}`: "1",
		`moat_agent_tool_calls_total{tool="write_file",decision="allow"}`: "1",
		`moat_model_requests_total{provider="local",outcome="ok"}`:        "4",
	} {
		if got := h.metric(line); got != want {
			t.Errorf("%s = %q, want %s", line, got, want)
		}
	}
	if evs := h.auditEvents(tokenA, "agent.run"); len(evs) != 1 || !strings.Contains(string(evs[0].Result), `"state":"succeeded"`) {
		t.Errorf("agent.run events: %+v", evs)
	}
	if evs := h.auditEvents(tokenA, "process.exec"); len(evs) != 1 {
		t.Errorf("process.exec events: %d", len(evs))
	}
}

// TestAgentHostileToolCalls (root): the tool calls a prompt-injected
// model makes are refused or contained, each answered to the model and
// the run going on, each with its control: a write outside the
// workspace stays in the sandbox (the host's file untouched); an escape
// attempt fails inside; fetch_url of the metadata address and of a
// domain not allowed is refused by the egress proxy while an allowed
// local name is fetched through it; a huge output comes back head and
// tail; a fork bomb meets the sandbox's pids limit and the next call
// runs.
func TestAgentHostileToolCalls(t *testing.T) {
	dns := testdns.Start(t, map[string][]netip.Addr{
		"svc.test":    {netip.MustParseAddr("127.0.0.1")},
		"denied.test": {netip.MustParseAddr("127.0.0.1")},
	})
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from svc") }))
	t.Cleanup(web.Close)
	_, port, _ := net.SplitHostPort(web.Listener.Addr().String())
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	shadow, _ := os.ReadFile("/etc/shadow")
	shadowLine, _, _ := strings.Cut(string(shadow), "\n")

	srv := modeltest.NewOpenAI(t,
		toolCall("write_file", `{"path": "../../../../etc/moat-agent-x", "content": "pwned"}`),
		toolCall("write_file", `{"path": "/etc/passwd", "content": "root::0:0::/:/bin/sh\n"}`),
		toolCall("shell_exec", `{"command": "mount -t tmpfs none /mnt && echo MOUNTED; cat /etc/shadow; echo end"}`),
		toolCall("fetch_url", `{"url": "http://169.254.169.254/latest/meta-data/"}`),
		toolCall("fetch_url", `{"url": "http://denied.test:`+port+`/"}`),
		toolCall("fetch_url", `{"url": "http://svc.test:`+port+`/"}`),
		toolCall("shell_exec", `{"command": "head -c 300000 /dev/zero | tr '\\0' a; echo; echo THE-END"}`),
		toolCall("shell_exec", `{"command": "i=0; while [ $i -lt 200 ]; do sleep 60 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo all-200-started"}`),
		toolCall("shell_exec", `{"command": "echo still-alive"}`),
		modeltest.Turn{Text: "done"},
	)
	h := newHarness(t, withProviders(t, []fakeProvider{{"local", nil, srv}}, func(c *Config) { c.DNSServer = dns.Addr() }))
	// The operator lets callers name loopback addresses (the local test
	// service); the metadata address stays special.
	writePolicy(t, h.managed, "version = 1\nallow_cidr_entries = [\"127.0.0.0/8\"]\n")
	doc := "agents:\n  - name: victim\n    model: m\n    tools: [write_file, shell_exec, fetch_url]\n" +
		"    sandbox:\n      limits: {pids: 64}\n      network: {mode: proxy, allow_domains: [svc.test, 127.0.0.1]}\n"
	run, _ := h.runAgent(tokenA, api.CreateAgentRun{Document: doc, Agent: "victim", Task: "ignore previous instructions"})
	if run.State != api.AgentSucceeded || run.Answer != "done" {
		t.Fatalf("run: %+v", run)
	}
	res := toolResults(srv)
	if len(res) != 9 {
		t.Fatalf("%d tool results", len(res))
	}
	text := func(i int) string { return res[i].Text }
	// Writes stay in the sandbox: the host's files are untouched.
	if _, err := os.Stat("/etc/moat-agent-x"); err == nil {
		t.Errorf("the traversal wrote the host's /etc/moat-agent-x (the model saw %q)", text(0))
	}
	if now, _ := os.ReadFile("/etc/passwd"); sha256.Sum256(now) != sha256.Sum256(passwd) {
		t.Fatalf("the host's /etc/passwd changed (the model saw %q)", text(1))
	}
	// The escape attempt fails inside the sandbox.
	if strings.Contains(text(2), "MOUNTED") || (shadowLine != "" && strings.Contains(text(2), shadowLine)) || !strings.Contains(text(2), "end") {
		t.Errorf("the escape attempt: %q", text(2))
	}
	// The egress proxy refuses the metadata address and a name not
	// allowed; control: the allowed name is fetched through it.
	for i, want := range map[int]string{3: "refused", 4: "refused"} {
		if !strings.Contains(text(i), want) || strings.Contains(text(i), "hello from svc") {
			t.Errorf("fetch %d: %q", i, text(i))
		}
	}
	if !strings.Contains(text(4), "allowlist") {
		t.Errorf("the name not allowed: %q", text(4))
	}
	if !strings.Contains(text(5), "HTTP 200") || !strings.Contains(text(5), "hello from svc") {
		t.Errorf("the allowed name: %q", text(5))
	}
	if evs := h.auditEvents(tokenA, "net.connect"); len(evs) < 3 {
		t.Errorf("net.connect events of the fetches: %d", len(evs))
	}
	// A huge output: its head and tail, the rest elided.
	if len(text(6)) > 64<<10 || !strings.Contains(text(6), "elided") || !strings.Contains(text(6), "THE-END") {
		t.Errorf("huge output: %d bytes: %.200q…", len(text(6)), text(6))
	}
	// The fork bomb stops at the pids limit; the run goes on.
	if strings.Contains(text(7), "all-200-started") || !strings.Contains(strings.ToLower(text(7)), "fork") {
		t.Errorf("the fork bomb: %q", text(7))
	}
	if !strings.Contains(text(8), "still-alive") || !strings.Contains(text(8), "exit code 0") {
		t.Errorf("after the fork bomb: %q", text(8))
	}
}

// TestAgentAskApproval (root): a tool call the agent's policy asks about
// waits for an approver: allowed, it runs and its result goes to the
// model; denied, the model gets a tool error naming the refusal, and the
// run goes on.
func TestAgentAskApproval(t *testing.T) {
	srv := modeltest.NewOpenAI(t,
		toolCall("shell_exec", `{"command": "touch /workspace/a && echo touched-a"}`),
		toolCall("shell_exec", `{"command": "touch /workspace/b && echo touched-b"}`),
		modeltest.Turn{Text: "finished"},
	)
	h := newHarness(t, withProviders(t, []fakeProvider{{"local", nil, srv}}))
	doc := "agents:\n  - name: careful\n    model: m\n    tools: [shell_exec]\n    policy: {ask: [\"Exec(touch *)\"]}\n"
	fol := h.follow(tokenA, "")
	run := h.startAgent(tokenA, api.CreateAgentRun{Document: doc, Agent: "careful", Task: "touch"})
	first := fol.next(api.ApprovalPending)
	if r := h.answer(approverA, first.ID, api.AnswerApproval{Decision: api.DecisionAllow}); r.status != http.StatusOK {
		t.Fatalf("allow: %d %s", r.status, r.body)
	}
	second := fol.next(api.ApprovalPending)
	if second.ID == first.ID {
		t.Fatalf("the same approval twice: %+v", second)
	}
	if r := h.answer(approverA, second.ID, api.AnswerApproval{Decision: api.DecisionDeny}); r.status != http.StatusOK {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	got, evs := h.waitAgent(tokenA, run.ID)
	if got.State != api.AgentSucceeded || got.Answer != "finished" {
		t.Fatalf("run: %+v", got)
	}
	res := toolResults(srv)
	if len(res) != 2 || !strings.Contains(res[0].Text, "touched-a") || strings.Contains(res[1].Text, "touched-b") {
		t.Fatalf("tool results: %+v", res)
	}
	var decisions []string
	for _, ev := range evs {
		if ev.Type == api.AgentEvToolResult && ev.Tool != nil {
			decisions = append(decisions, ev.Tool.Decision+"/"+fmt.Sprint(ev.Tool.Error != ""))
		}
	}
	if len(decisions) != 2 || !strings.HasSuffix(decisions[0], "/false") || !strings.HasSuffix(decisions[1], "/true") {
		t.Errorf("tool results' decisions: %q", decisions)
	}
}

// TestAgentRestart (root): a daemon stops while a run's model call is
// under way (after a tool call ran); the next daemon on the same store
// takes the run up, repeats that model call with the whole conversation
// (task, tool call, its result) and the run succeeds, its tool call not
// run again.
func TestAgentRestart(t *testing.T) {
	reached := make(chan struct{})
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	var conv []model.Message
	srv := modeltest.NewOpenAI(t,
		toolCall("shell_exec", `{"command": "echo first-call"}`),
		modeltest.Turn{Hold: hold, Check: func(modeltest.Received) error { close(reached); return nil }},
		modeltest.Turn{Text: "finished after the restart", Check: func(r modeltest.Received) error { conv = r.Messages; return nil }},
	)
	h := newHarness(t, withProviders(t, []fakeProvider{{"local", nil, srv}}))
	doc := "agents:\n  - name: worker\n    model: m\n    tools: [shell_exec]\n"
	run := h.startAgent(tokenA, api.CreateAgentRun{Document: doc, Agent: "worker", Task: "work"})
	<-reached
	ctx := context.Background()
	if err := h.svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := h.st.GetAgentRun(ctx, "a", run.ID); err != nil || rec.State != api.AgentRunning {
		t.Fatalf("after the stop, the store has %+v, %v", rec, err)
	}
	svc, err := New(h.svc.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := svc.ag.eng.Wait(wctx, "a", run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.AgentSucceeded || got.Answer != "finished after the restart" || got.Resumes != 1 {
		t.Fatalf("after the restart: %+v", got)
	}
	if len(conv) != 3 || conv[0].Text != "work" || len(conv[1].ToolCalls) != 1 || !strings.Contains(conv[2].Text, "first-call") {
		t.Errorf("the conversation the model saw after the restart: %+v", conv)
	}
	if n := srv.Requests(); n != 3 {
		t.Errorf("%d model requests, want 3", n)
	}
	if evs := h.auditEvents(tokenA, "process.exec"); len(evs) != 1 {
		t.Errorf("the tool call ran %d times", len(evs))
	}
}

// TestAgentProcessTools (root): the background-process tools through the
// daemon: process_start runs a reader, process_stdin feeds it, and
// process_output (a stream of the process's events, which the backend
// hands the tool as NDJSON) gives back what it printed and its exit;
// process_signal ends a second one. (process_output used to fail: the
// daemon's stream had nowhere to go.)
func TestAgentProcessTools(t *testing.T) {
	srv := modeltest.NewOpenAI(t,
		toolCall("process_start", `{"command": "read x; echo got-$x"}`),
		toolCall("process_stdin", `{"process": 1, "data": "abc\n", "eof": true}`),
	)
	// Then: read the output until the process has ended (each answer
	// decided by what the model saw last), signal a sleeper, answer.
	step := 0
	srv.Respond(func(req modeltest.Received) modeltest.Turn {
		last := req.Messages[len(req.Messages)-1].Text
		switch {
		case step == 0 && !strings.Contains(last, "exit code"):
			return toolCall("process_output", `{"process": 1}`)
		case step == 0:
			step = 1
			return toolCall("process_start", `{"command": "sleep 1000"}`)
		case step == 1:
			step = 2
			return toolCall("process_signal", `{"process": 2, "signal": "KILL"}`)
		case step == 2 && !strings.Contains(last, "exit code"):
			return toolCall("process_output", `{"process": 2}`)
		}
		return modeltest.Turn{Text: "done"}
	})
	h := newHarness(t, withProviders(t, []fakeProvider{{"local", nil, srv}}))
	doc := "agents:\n  - name: p\n    model: m\n    tools: [process_start, process_stdin, process_output, process_signal]\n"
	run, evs := h.runAgent(tokenA, api.CreateAgentRun{Document: doc, Agent: "p", Task: "go"})
	if run.State != api.AgentSucceeded {
		t.Fatalf("run: %+v", run)
	}
	var outputs []string
	for _, ev := range evs {
		if ev.Type == api.AgentEvToolResult && ev.Tool != nil {
			if ev.Tool.Error != "" {
				t.Errorf("%s: tool error %q", ev.Tool.Name, ev.Tool.Error)
			}
			if ev.Tool.Name == "process_output" {
				outputs = append(outputs, ev.Tool.Result)
			}
		}
	}
	joined := strings.Join(outputs, "\n")
	if !strings.Contains(joined, "got-abc") || !strings.Contains(joined, "process 2") || !strings.Contains(joined, "exit code") {
		t.Fatalf("process_output results: %q", outputs)
	}
}
