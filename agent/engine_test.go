package agent

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

const coderDoc = `
max_turns: 10
agents:
  - name: coder
    model: small
    tags: [green-tea]
    system: You write and run code.
    tools: [write_file, shell_exec, read_file]
    sandbox:
      limits: {memory: 256m, pids: 64}
      timeout: 30s
`

// TestWriteRunRead: a task that writes a file, runs it and reads its
// output: the right Backend calls in order, each result fed back to the
// model, one journal write per transition.
func TestWriteRunRead(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	b.exec = func(ctx context.Context, x api.Exec) (*sandbox.Result, error) {
		if !slices.Equal(x.Args, []string{"/bin/sh", "-c", "sh /workspace/hello.sh"}) {
			t.Errorf("exec args %q", x.Args)
		}
		if x.TimeoutMs != 30_000 {
			t.Errorf("exec timeout %d ms, want the agent's 30s", x.TimeoutMs)
		}
		b.mu.Lock()
		b.files["/workspace/out.txt"] = "hello from the sandbox\n"
		b.mu.Unlock()
		return &sandbox.Result{ExitCode: 0, ExitReason: sandbox.ReasonExited, Stdout: "ran\n", StdoutBytes: 4}, nil
	}
	m.add("small",
		check(t, func(req model.Request) {
			if req.System != "You write and run code." || !slices.Equal(req.Tags, []string{"green-tea"}) || len(req.Tools) != 3 {
				t.Errorf("request: system %q tags %v tools %d", req.System, req.Tags, len(req.Tools))
			}
		}, ask(ToolWriteFile, `{"path": "/workspace/hello.sh", "content": "echo hello from the sandbox > out.txt\n", "mode": "755"}`)),
		check(t, func(req model.Request) {
			if m := lastTool(t, req); m.IsError || !strings.Contains(m.Text, "wrote 38 bytes") {
				t.Errorf("write result %+v", m)
			}
		}, ask(ToolShellExec, `{"command": "sh /workspace/hello.sh"}`)),
		check(t, func(req model.Request) {
			if m := lastTool(t, req); !strings.Contains(m.Text, "exit code 0 (exited)") || !strings.Contains(m.Text, "ran") {
				t.Errorf("exec result %q", m.Text)
			}
		}, ask(ToolReadFile, `{"path": "/workspace/out.txt"}`)),
		check(t, func(req model.Request) {
			if m := lastTool(t, req); m.Text != "hello from the sandbox\n" {
				t.Errorf("read result %q", m.Text)
			}
		}, say("It printed: hello from the sandbox")),
	)
	e := New(m, b, j)
	defer e.Close()
	v, err := e.Start(context.Background(), owner, coderDoc, "coder", "write a script and run it", map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if v.State != api.AgentPending {
		t.Errorf("started %s", v.State)
	}
	run := wait(t, e, v.ID)
	if run.State != api.AgentSucceeded || run.Answer != "It printed: hello from the sandbox" {
		t.Fatalf("run %s %q %q", run.State, run.Answer, run.Error)
	}
	want := []string{api.OpSandboxCreate, api.OpFileWrite, api.OpExec, api.OpFileRead, api.OpSandboxDelete}
	if got := b.ops(); !slices.Equal(got, want) {
		t.Errorf("backend calls %v, want %v", got, want)
	}
	cr := b.reqs(api.OpSandboxCreate)[0].(api.CreateSandbox)
	if cr.Template != "host" || cr.Labels[LabelRun] != v.ID || cr.Labels[LabelAgent] != "coder" || cr.Labels["k"] != "v" ||
		cr.Limits.MemoryBytes != 256<<20 || cr.Limits.Pids != 64 || cr.Network.Mode != "none" || cr.TimeoutMs != 0 {
		t.Errorf("create %+v", cr)
	}
	if w := b.reqs(api.OpFileWrite)[0].(api.WriteFile); w.Mode != "0755" {
		t.Errorf("write mode %q", w.Mode)
	}
	if len(b.live()) != 0 {
		t.Errorf("sandboxes left: %v", b.live())
	}
	// One write per transition: the start; the first model call's
	// request; per model call its answer; per tool call its start and its
	// result, which carries the next model call's request; the last
	// answer with the run's end.
	if want := 1 + 1 + 3*(1+2) + 1; j.saves != want || j.empty != 0 {
		t.Errorf("%d saves (%d without events), want %d", j.saves, j.empty, want)
	}
	types := j.types(v.ID)
	wantTypes := []string{api.AgentEvRunStarted, api.AgentEvMessage}
	for range 3 {
		wantTypes = append(wantTypes, api.AgentEvModelRequest, api.AgentEvModelResponse, api.AgentEvToolCall, api.AgentEvToolResult)
	}
	wantTypes = append(wantTypes, api.AgentEvModelRequest, api.AgentEvModelResponse, api.AgentEvRunSucceeded)
	if !slices.Equal(types, wantTypes) {
		t.Errorf("events %v\nwant %v", types, wantTypes)
	}
	if run.Turns != 4 || run.Usage.InputTokens != 40 || run.Usage.OutputTokens != 8 || run.Agents[0].ToolCalls != 3 ||
		run.Agents[0].Messages != 8 || run.Agents[0].Sandbox != "" {
		t.Errorf("run %+v", run)
	}
	// Events: the whole log, in order, also after the end.
	var seqs []uint64
	if _, err := e.Events(context.Background(), owner.Tenant, v.ID, 0, true, func(ev api.AgentEvent) error {
		seqs = append(seqs, ev.Seq)
		return nil
	}); err != nil || len(seqs) != len(types) || seqs[0] != 1 || seqs[len(seqs)-1] != uint64(len(types)) {
		t.Errorf("events %v %v", seqs, err)
	}
	// Another tenant sees nothing.
	if _, err := e.Get(context.Background(), "other", v.ID); !isNotFound(err) {
		t.Errorf("other tenant: %v", err)
	}
}

func isNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), ErrNotFound.Error())
}

// TestEventsFollow: a follower gets every event as it is journalled, then
// the run's end.
func TestEventsFollow(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	gate := make(chan struct{})
	m.add("small", func(ctx context.Context, req model.Request) (*model.Response, error) {
		<-gate
		return say("done")(ctx, req)
	})
	e := New(m, b, j)
	defer e.Close()
	v, err := e.Start(context.Background(), owner, coderDoc, "coder", "task", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	first := make(chan struct{})
	go func() {
		<-first
		close(gate)
	}()
	end, err := e.Events(context.Background(), owner.Tenant, v.ID, 0, true, func(ev api.AgentEvent) error {
		got = append(got, ev.Type)
		if ev.Type == api.AgentEvModelRequest {
			close(first)
		}
		return nil
	})
	if err != nil || end.State != api.AgentSucceeded {
		t.Fatalf("events: %v %+v", err, end)
	}
	want := []string{api.AgentEvRunStarted, api.AgentEvMessage, api.AgentEvModelRequest, api.AgentEvModelResponse, api.AgentEvRunSucceeded}
	if !slices.Equal(got, want) {
		t.Errorf("followed %v, want %v", got, want)
	}
}

// TestMaxTurns: an agent that never answers fails after max_turns model
// calls; its sandbox is deleted.
func TestMaxTurns(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	m.fn["small"] = ask(ToolShellExec, `{"command": "true"}`)
	e := New(m, b, j)
	defer e.Close()
	doc := strings.Replace(coderDoc, "max_turns: 10", "max_turns: 3", 1)
	v, err := e.Start(context.Background(), owner, doc, "coder", "loop", nil)
	if err != nil {
		t.Fatal(err)
	}
	run := wait(t, e, v.ID)
	if run.State != api.AgentFailed || run.Error != "max_turns reached (3)" || m.calls() != 3 || run.Ended == nil {
		t.Errorf("run %s %q after %d calls", run.State, run.Error, m.calls())
	}
	if len(b.live()) != 0 || count(b.ops(), api.OpExec) != 3 {
		t.Errorf("backend %v, live %v", b.ops(), b.live())
	}
	// Resume without a task: the count starts again.
	m.fn["small"] = say("finally")
	if _, err := e.Resume(context.Background(), owner.Tenant, v.ID, ""); err != nil {
		t.Fatal(err)
	}
	if run := wait(t, e, v.ID); run.State != api.AgentSucceeded || run.Answer != "finally" || run.Resumes != 1 {
		t.Errorf("resumed run %+v", run)
	}
}

// TestCancelMidTool: cancel while a tool runs stops it, deletes the
// sandbox, answers the call "stopped", and the run can be resumed.
func TestCancelMidTool(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	started := make(chan struct{})
	b.exec = func(ctx context.Context, x api.Exec) (*sandbox.Result, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	m.add("small", ask(ToolShellExec, `{"command": "sleep 1000"}`))
	e := New(m, b, j)
	defer e.Close()
	v, err := e.Start(context.Background(), owner, coderDoc, "coder", "sleep", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	run, err := e.Cancel(context.Background(), owner.Tenant, v.ID)
	if err != nil || run.State != api.AgentCancelled {
		t.Fatalf("cancel: %v %+v", err, run)
	}
	if len(b.live()) != 0 {
		t.Errorf("sandboxes left %v", b.live())
	}
	c := conv(t, e, v.ID, "coder")
	if last := c[len(c)-1]; last.Role != model.RoleTool || !last.IsError || !strings.HasPrefix(last.Text, "stopped while it ran") {
		t.Errorf("last message %+v", last)
	}
	if _, err := e.Cancel(context.Background(), owner.Tenant, v.ID); err == nil {
		t.Error("cancel of an ended run succeeded")
	}
	m.add("small", check(t, func(req model.Request) {
		if n := len(req.Messages); req.Messages[n-1].Text != "go on" || req.Messages[n-2].Role != model.RoleTool {
			t.Errorf("resumed conversation %+v", req.Messages)
		}
	}, say("ok")))
	if _, err := e.Resume(context.Background(), owner.Tenant, v.ID, "go on"); err != nil {
		t.Fatal(err)
	}
	if run := wait(t, e, v.ID); run.State != api.AgentSucceeded {
		t.Errorf("resumed %+v", run)
	}
}

const teamDoc = `
agents:
  - name: lead
    model: big
    tools: [handoff]
    handoff: [helper]
  - name: helper
    model: small
    tags: [local]
    tools: [shell_exec]
    handoff: [lead]
`

// TestHandoff: the helper's conversation persists across two handoffs;
// its answers come back as tool results; a handoff back to an agent
// waiting in the chain is refused.
func TestHandoff(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	m.add("big",
		ask(ToolHandoff, `{"to": "helper", "task": "t1"}`),
		check(t, func(req model.Request) {
			if m := lastTool(t, req); m.Text != "a1" || m.IsError {
				t.Errorf("first handoff result %+v", m)
			}
		}, ask(ToolHandoff, `{"to": "helper", "task": "t2"}`)),
		check(t, func(req model.Request) {
			if m := lastTool(t, req); m.Text != "a2" {
				t.Errorf("second handoff result %+v", m)
			}
		}, say("final")),
	)
	m.add("small",
		check(t, func(req model.Request) {
			if !slices.Equal(req.Tags, []string{"local"}) || len(req.Messages) != 1 || req.Messages[0].Text != "t1" {
				t.Errorf("helper's first request %+v", req)
			}
		}, ask(ToolHandoff, `{"to": "lead", "task": "loop"}`)),
		check(t, func(req model.Request) {
			if m := lastTool(t, req); !m.IsError || !strings.Contains(m.Text, "waiting for an answer") {
				t.Errorf("handoff back: %+v", m)
			}
		}, say("a1")),
		check(t, func(req model.Request) {
			var texts []string
			for _, m := range req.Messages {
				if m.Role != model.RoleTool && len(m.ToolCalls) == 0 {
					texts = append(texts, m.Text)
				}
			}
			if !slices.Equal(texts, []string{"t1", "a1", "t2"}) {
				t.Errorf("helper's conversation %q", texts)
			}
		}, say("a2")),
	)
	e := New(m, b, j)
	defer e.Close()
	v, err := e.Start(context.Background(), owner, teamDoc, "lead", "do it", nil)
	if err != nil {
		t.Fatal(err)
	}
	run := wait(t, e, v.ID)
	if run.State != api.AgentSucceeded || run.Answer != "final" {
		t.Fatalf("run %+v", run)
	}
	if len(run.Agents) != 2 || run.Agents[1].Name != "helper" || run.Agents[1].Messages != 6 || run.Turns != 6 {
		t.Errorf("agents %+v turns %d", run.Agents, run.Turns)
	}
	types := j.types(v.ID)
	if count(types, api.AgentEvHandoff) != 3 || count(types, api.AgentEvHandoffResult) != 3 {
		t.Errorf("events %v", types)
	}
	if len(b.ops()) != 0 {
		t.Errorf("handoffs made backend calls %v", b.ops())
	}
}

// TestHandoffDepth: a chain deeper than MaxHandoffDepth is refused as a
// tool error to the agent at the bottom.
func TestHandoffDepth(t *testing.T) {
	names := []string{"a0", "a1", "a2", "a3", "a4", "a5"}
	var doc strings.Builder
	doc.WriteString("agents:\n")
	m := newFakeModel()
	for i, n := range names {
		doc.WriteString("  - name: " + n + "\n    model: " + n + "\n")
		if i+1 < len(names) {
			doc.WriteString("    handoff: [" + names[i+1] + "]\n")
			next := names[i+1]
			m.fn[n] = func(ctx context.Context, req model.Request) (*model.Response, error) {
				last := req.Messages[len(req.Messages)-1]
				if last.Role == model.RoleUser {
					return ask(ToolHandoff, `{"to": "`+next+`", "task": "go"}`)(ctx, req)
				}
				return say(n+": "+last.Text)(ctx, req)
			}
		} else {
			m.fn[n] = say("bottom")
		}
	}
	e := New(m, newFakeBackend(), newFakeJournal())
	defer e.Close()
	v, err := e.Start(context.Background(), owner, doc.String(), "a0", "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	run := wait(t, e, v.ID)
	if want := "a0: a1: a2: a3: a4: refused: a handoff chain may be at most 4 deep"; run.Answer != want {
		t.Errorf("answer %q, want %q", run.Answer, want)
	}
}

// TestPerCall: per_call sandboxes are made for each call and deleted
// after it, with a bounded life.
func TestPerCall(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	m.add("small", ask(ToolShellExec, `{"command": "one"}`), ask(ToolShellExec, `{"command": "two"}`), say("done"))
	doc := strings.Replace(coderDoc, "timeout: 30s", "timeout: 30s\n      per_call: true", 1)
	e := New(m, b, j)
	defer e.Close()
	v, err := e.Start(context.Background(), owner, doc, "coder", "two calls", nil)
	if err != nil {
		t.Fatal(err)
	}
	if run := wait(t, e, v.ID); run.State != api.AgentSucceeded {
		t.Fatalf("run %+v", run)
	}
	want := []string{api.OpSandboxCreate, api.OpExec, api.OpSandboxDelete, api.OpSandboxCreate, api.OpExec, api.OpSandboxDelete}
	if got := b.ops(); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	for _, r := range b.reqs(api.OpSandboxCreate) {
		if r.(api.CreateSandbox).TimeoutMs != (30*time.Second + perCallMargin).Milliseconds() {
			t.Errorf("per_call create %+v", r)
		}
	}
	ex := b.reqs(api.OpExec)
	if ex[0].(api.Exec).Sandbox == ex[1].(api.Exec).Sandbox {
		t.Error("both calls ran in one sandbox")
	}
	// Each per_call sandbox is deleted before the call's result is
	// journalled; no save without events.
	if j.empty != 0 {
		t.Errorf("%d saves without events", j.empty)
	}
}

// TestRefusals: a policy denial, a denied approval and a refused fetch
// are tool errors with their reasons; the run goes on.
func TestRefusals(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	n := 0
	b.exec = func(ctx context.Context, x api.Exec) (*sandbox.Result, error) {
		n++
		if n == 1 {
			return nil, &api.Error{Code: api.CodePolicyDenied, Message: "git push is denied", Rule: "deny Exec(git push*)"}
		}
		return nil, &api.Error{Code: api.CodePolicyDenied, Message: "denied by the approver", Approval: "ap-1", Rule: "ask Exec(rm*)"}
	}
	b.fetch = func(url string) (*FetchResult, error) {
		if strings.Contains(url, "169.254") {
			return nil, &api.Error{Code: api.CodePolicyDenied, Message: "169.254.169.254 is a link-local address", Rule: "proxy"}
		}
		return &FetchResult{Status: 200, ContentType: "text/plain", Body: []byte("pong")}, nil
	}
	doc := `
agents:
  - name: w
    model: small
    tools: [shell_exec, fetch_url]
    sandbox:
      network: {mode: proxy, allow_domains: [example.com]}
`
	var results []model.Message
	grab := func(next turn) turn {
		return func(ctx context.Context, req model.Request) (*model.Response, error) {
			results = append(results, req.Messages[len(req.Messages)-1])
			return next(ctx, req)
		}
	}
	m.add("small",
		ask(ToolShellExec, `{"command": "git push"}`),
		grab(ask(ToolShellExec, `{"command": "rm -rf /"}`)),
		grab(ask(ToolFetchURL, `{"url": "http://169.254.169.254/latest/meta-data"}`)),
		grab(ask(ToolFetchURL, `{"url": "https://example.com/ping"}`)),
		grab(say("done")),
	)
	e := New(m, b, j)
	defer e.Close()
	v, err := e.Start(context.Background(), owner, doc, "w", "try", nil)
	if err != nil {
		t.Fatal(err)
	}
	if run := wait(t, e, v.ID); run.State != api.AgentSucceeded {
		t.Fatalf("run %+v", run)
	}
	want := []struct {
		isErr bool
		has   string
	}{
		{true, "refused by the policy: git push is denied (rule deny Exec(git push*))"},
		{true, "approval ap-1 was denied or expired: denied by the approver"},
		{true, "link-local"},
		{false, "HTTP 200, text/plain, 4 bytes\n\npong"},
	}
	for i, w := range want {
		if results[i].IsError != w.isErr || !strings.Contains(results[i].Text, w.has) {
			t.Errorf("result %d: %+v, want %q", i, results[i], w.has)
		}
	}
	var decisions []string
	for _, ev := range j.events[v.ID] {
		if ev.Type == api.AgentEvToolResult {
			decisions = append(decisions, ev.Tool.Decision+" "+ev.Tool.Rule)
		}
	}
	if !slices.Equal(decisions, []string{"deny deny Exec(git push*)", "deny ask Exec(rm*)", "deny proxy", "allow "}) {
		t.Errorf("decisions %q", decisions)
	}
}

// TestHostileCalls: arguments a prompt-injected model gives are refused
// (or narrowed) before anything runs, and answered as tool errors.
func TestHostileCalls(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	b.exec = func(ctx context.Context, x api.Exec) (*sandbox.Result, error) {
		huge := strings.Repeat("A", 1<<20) + "THE END"
		return &sandbox.Result{ExitCode: 3, ExitReason: sandbox.ReasonExited, Stdout: huge, StdoutBytes: int64(len(huge))}, nil
	}
	hostile := []string{
		`{"command": "id", "extra": 1}`,
		`{"command": 42}`,
		`{"command": "id", "cwd": "../../etc"}`,
		`{"command": "id", "cwd": "/tmp\u0000x"}`,
		`{"command": "id", "timeout_s": -5}`,
		`[1, 2]`,
		`{"command": "id"} {"command": "again"}`,
	}
	var turns []turn
	for _, h := range hostile {
		turns = append(turns, ask(ToolShellExec, h))
	}
	turns = append(turns,
		ask(ToolWriteFile, `{"path": "/workspace/x\u0000/../etc", "content": "x"}`),
		ask(ToolWriteFile, `{"path": "/workspace/x", "content": "x", "mode": "4755"}`),
		ask("mount_host", `{}`),
		ask(ToolShellExec, `{"command": "yes | head -c 1048576", "timeout_s": 999999999999}`),
		say("done"))
	var results []model.Message
	for i, tn := range turns {
		if i == 0 {
			m.add("small", tn)
			continue
		}
		m.add("small", func(ctx context.Context, req model.Request) (*model.Response, error) {
			results = append(results, req.Messages[len(req.Messages)-1])
			return tn(ctx, req)
		})
	}
	e := New(m, b, j)
	defer e.Close()
	doc := strings.Replace(coderDoc, "max_turns: 10", "max_turns: 20", 1)
	v, err := e.Start(context.Background(), owner, doc, "coder", "be hostile", nil)
	if err != nil {
		t.Fatal(err)
	}
	if run := wait(t, e, v.ID); run.State != api.AgentSucceeded {
		t.Fatalf("run %+v", run)
	}
	wants := []string{"unknown field", "cannot unmarshal number", "climbs out", "NUL", "at least 1", "want a JSON object", "want a JSON object", "NUL", "mode", "no tool \"mount_host\""}
	for i, w := range wants {
		if !results[i].IsError || !strings.Contains(results[i].Text, w) {
			t.Errorf("hostile %d: %+v, want %q", i, results[i], w)
		}
	}
	// Only the last, valid call ran, its timeout cut to the agent's, its
	// huge output clipped head and tail.
	ex := b.reqs(api.OpExec)
	if len(ex) != 1 || ex[0].(api.Exec).TimeoutMs != 30_000 {
		t.Fatalf("execs %+v", ex)
	}
	last := results[len(results)-1]
	if last.IsError || !strings.Contains(last.Text, "exit code 3") || !strings.Contains(last.Text, "cut to 30s") ||
		!strings.Contains(last.Text, "bytes elided …]") || !strings.HasSuffix(last.Text, "THE END\nstderr: (empty)") ||
		len(last.Text) > OutputHead+OutputTail+1024 {
		t.Errorf("last result (%d bytes) %q…", len(last.Text), last.Text[:min(200, len(last.Text))])
	}
}

// TestReadFileCap: a file over the cap shows its head and a note.
func TestReadFileCap(t *testing.T) {
	b := newFakeBackend()
	big := strings.Repeat("x", ReadFileCap+100)
	b.files["/big"] = big
	b.sandboxes["sb"] = true
	b.exec = func(ctx context.Context, x api.Exec) (*sandbox.Result, error) {
		if !slices.Equal(x.Args, []string{"head", "-c", "65536", "--", "/big"}) {
			t.Errorf("head args %q", x.Args)
		}
		return &sandbox.Result{Stdout: big[:ReadFileCap], StdoutBytes: ReadFileCap}, nil
	}
	res := readFile(context.Background(), toolEnv{b: b, o: owner, sandbox: "sb"}, "/big", time.Minute)
	if res.IsError || !strings.HasSuffix(res.Text, "[truncated: the file is 65636 bytes; its first 65536 are shown. Read further with shell_exec (tail -c, sed -n)]") {
		t.Errorf("result %q", res.Text[len(res.Text)-200:])
	}
	b.override[api.OpFileList] = func(context.Context, any, io.Reader, io.Writer) (any, error) {
		return &api.DirList{Path: "/d", Entries: []sandbox.FileInfo{{Name: "b", Type: "dir"}, {Name: "a", Type: "file", Size: 3}, {Name: "l", Type: "symlink", Target: "/etc"}}}, nil
	}
	if res := listDir(context.Background(), toolEnv{b: b, o: owner, sandbox: "sb"}, "/d"); res.Text != "/d: 3 entries\na\tfile\t3\nb\tdir\t0\nl\tsymlink\t0\t-> /etc" {
		t.Errorf("list %q", res.Text)
	}
}

// TestSandboxGone: a long-lived sandbox that went away is made again and
// the call run once more.
func TestSandboxGone(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	m.add("small", ask(ToolShellExec, `{"command": "one"}`),
		func(ctx context.Context, req model.Request) (*model.Response, error) {
			b.mu.Lock()
			clear(b.sandboxes) // it idled out
			b.mu.Unlock()
			return ask(ToolShellExec, `{"command": "two"}`)(ctx, req)
		},
		check(t, func(req model.Request) {
			if m := lastTool(t, req); m.IsError {
				t.Errorf("second call %+v", m)
			}
		}, say("done")))
	e := New(m, b, j)
	defer e.Close()
	v, _ := e.Start(context.Background(), owner, coderDoc, "coder", "x", nil)
	if run := wait(t, e, v.ID); run.State != api.AgentSucceeded {
		t.Fatalf("run %+v", run)
	}
	want := []string{api.OpSandboxCreate, api.OpExec, api.OpExec, api.OpSandboxGet, api.OpSandboxDelete, api.OpSandboxCreate, api.OpExec, api.OpSandboxDelete}
	if got := b.ops(); !slices.Equal(got, want) {
		t.Errorf("calls %v\nwant %v", got, want)
	}
}
