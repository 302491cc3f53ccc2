package server

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/agent/model/modeltest"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
)

// opCall calls operation name through the dispatcher, as the stdio
// transport does (the request as JSON params), for the actor given of
// tenant a, an approver.
func (h *harness) opCall(actor, name string, req any) (any, error) {
	h.t.Helper()
	params, err := json.Marshal(req)
	if err != nil {
		h.t.Fatal(err)
	}
	in := &input{
		decode: func(v any) error {
			dec := json.NewDecoder(bytes.NewReader(params))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				return api.Errorf(api.CodeInvalidArgument, "params: %v", err)
			}
			return nil
		},
		out:  &bytes.Buffer{},
		emit: func(api.Event) error { return nil },
	}
	resp, err := h.svc.call(context.Background(), Caller{Tenant: "a", Actor: actor, Approver: true}, name, in)
	releaseAnswer(resp)
	return resp, err
}

// kindsOf lists, sorted, the kinds of the events of tenant a by actor.
func (h *harness) kindsOf(actor string) []string {
	h.t.Helper()
	page, err := h.tape.QueryPage(context.Background(), audit.Query{Tenant: "a", Actor: actor, Limit: audit.MaxLimit})
	if err != nil {
		h.t.Fatal(err)
	}
	var kinds []string
	for _, e := range page.Events {
		kinds = append(kinds, e.Kind)
	}
	slices.Sort(kinds)
	return kinds
}

// TestAuditEveryOp: every operation of api.Ops leaves exactly its record
// on the audit tape, written by the dispatcher (callRecord), on success
// and when refused (by its decoding, and later, once it knows what it
// acts on): one event of its name, or the events that are its record (a
// fork's creates, a delete's sandbox.end, a background process's start
// and, later, its exit). An operation added to api.Ops without a row
// here fails the test. A handler that panics leaves one event too.
func TestAuditEveryOp(t *testing.T) {
	// The model of the agent runs: a task "block" is held until the test
	// ends; any other is answered at once.
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	models := modeltest.NewOpenAI(t)
	models.Respond(func(r modeltest.Received) modeltest.Turn {
		if len(r.Messages) > 0 && r.Messages[0].Text == "block" {
			return modeltest.Turn{Hold: block}
		}
		return modeltest.Turn{Text: "done"}
	})
	h := newHarness(t, withProviders(t, []fakeProvider{{"fake", nil, models}}, withLayers(t)))
	writePolicy(t, h.user, askTouch)
	setup := func(name string, req any) any {
		t.Helper()
		resp, err := h.opCall("setup", name, req)
		if err != nil {
			t.Fatalf("setup %s: %v", name, err)
		}
		return resp
	}
	sb := setup(api.OpSandboxCreate, api.CreateSandbox{}).(*api.Sandbox).ID
	doomed := setup(api.OpSandboxCreate, api.CreateSandbox{}).(*api.Sandbox).ID
	proc := setup(api.OpStart, api.Exec{Sandbox: sb, Args: []string{"cat"}}).(*api.Process).ID
	snap := setup(api.OpSnapshotCreate, api.CreateSnapshot{Sandbox: sb}).(*api.Snapshot).ID
	// A run that blocks in a concurrent group, for cancel, resume and
	// add_step (its steps' calls are the setup actor's).
	blocked := setup(api.OpWorkflowCreate, api.CreateWorkflow{Document: "steps:\n  - group: g\n    mode: concurrent\n    steps:\n" +
		"      - {id: slow, run: [sleep, \"60\"], snapshot: none}\n"}).(*api.WorkflowRun).ID
	// An agent run whose model call is held, for cancel and resume (its
	// model calls and end are the setup actor's).
	const agents = "agents:\n  - {name: a, model: m}\n"
	heldRun := setup(api.OpAgentCreate, api.CreateAgentRun{Document: agents, Agent: "a", Task: "block"}).(*api.AgentRun).ID

	// A call held by an ask rule, for the approvals' operations.
	fol := h.follow(tokenA, "")
	asked := h.async(context.Background(), "POST", "/v1/sandboxes/"+sb+"/exec", tokenA, api.Exec{Args: []string{"touch", "/workspace/asked"}})
	approval := fol.next(api.ApprovalPending).ID

	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	tw.WriteHeader(&tar.Header{Name: "up.txt", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("up"))
	tw.Close()

	const missing = "sb-0000000000000000"
	var made string // the snapshot the snapshot.create row makes
	var wf string   // the run the workflow.create row makes
	const noRun = "wf-000000000000"
	var ag string // the agent run the agent.create row makes
	const noAgent = "ag-000000000000"
	var bld api.Build // the build the build.create row makes
	const noBuild = "bld-00000000000000000000"
	one := func(name string) []string { return []string{name} }
	type row struct {
		name string
		ok   func() any // a request that succeeds (a func: it may use what earlier rows made)
		want []string   // the kinds of its record
		bad  any        // a request refused once decoded (nil: none refuses but the decoding)
	}
	rows := []row{
		{api.OpSandboxCreate, func() any { return api.CreateSandbox{} }, one(api.OpSandboxCreate), api.CreateSandbox{Workspace: "/srv"}},
		{api.OpSandboxList, func() any { return api.ListSandboxes{} }, one(api.OpSandboxList), api.ListSandboxes{State: "bogus"}},
		{api.OpSandboxGet, func() any { return api.SandboxRef{Sandbox: sb} }, one(api.OpSandboxGet), api.SandboxRef{Sandbox: missing}},
		{api.OpSandboxNetwork, func() any { return api.SetNetwork{Sandbox: sb, Mode: "none"} }, one(api.OpSandboxNetwork), api.SetNetwork{Sandbox: sb, Mode: "open"}},
		{api.OpExec, func() any { return api.Exec{Sandbox: sb, Args: []string{"true"}} }, one(api.OpExec), api.Exec{Sandbox: missing, Args: []string{"true"}}},
		// The exit comes later, when the sandbox ends (Close).
		{api.OpStart, func() any { return api.Exec{Sandbox: sb, Args: []string{"cat"}} }, []string{"process.exit", api.OpStart}, api.Exec{Sandbox: missing, Args: []string{"cat"}}},
		{api.OpProcessList, func() any { return api.SandboxRef{Sandbox: sb} }, one(api.OpProcessList), api.SandboxRef{Sandbox: missing}},
		{api.OpProcessGet, func() any { return api.ProcessRef{Sandbox: sb, Process: proc} }, one(api.OpProcessGet), api.ProcessRef{Sandbox: sb, Process: 999}},
		{api.OpOutput, func() any { return api.ReadOutput{Sandbox: sb, Process: proc} }, one(api.OpOutput), api.ReadOutput{Sandbox: sb, Process: 999}},
		{api.OpStdin, func() any { return api.Stdin{Sandbox: sb, Process: proc, Data: "x\n"} }, one(api.OpStdin), api.Stdin{Sandbox: sb, Process: 999, Data: "x"}},
		{api.OpWait, func() any { return api.ProcessRef{Sandbox: sb, Process: proc, TimeoutMs: 1} }, one(api.OpWait), api.ProcessRef{Sandbox: sb, Process: 999, TimeoutMs: 1}},
		{api.OpSignal, func() any { return api.Signal{Sandbox: sb, Process: proc, Signal: "TERM"} }, one(api.OpSignal), api.Signal{Sandbox: sb, Process: proc, Signal: "NOPE"}},
		{api.OpFileWrite, func() any { return api.WriteFile{Sandbox: sb, Path: "/workspace/f", Content: []byte("hi")} }, one(api.OpFileWrite), api.WriteFile{Sandbox: missing, Path: "/workspace/f"}},
		{api.OpFileRead, func() any { return api.FilePath{Sandbox: sb, Path: "/workspace/f"} }, one(api.OpFileRead), api.FilePath{Sandbox: sb, Path: "/workspace/none"}},
		{api.OpFileList, func() any { return api.FilePath{Sandbox: sb, Path: "/workspace"} }, one(api.OpFileList), api.FilePath{Sandbox: sb, Path: "/workspace/none"}},
		{api.OpFileStat, func() any { return api.FilePath{Sandbox: sb, Path: "/workspace/f"} }, one(api.OpFileStat), api.FilePath{Sandbox: sb, Path: "/workspace/none"}},
		{api.OpFileMkdir, func() any { return api.Mkdir{Sandbox: sb, Path: "/workspace/d"} }, one(api.OpFileMkdir), api.Mkdir{Sandbox: sb, Path: "/workspace/d"}},
		{api.OpFileMove, func() any { return api.Move{Sandbox: sb, From: "/workspace/f", To: "/workspace/g"} }, one(api.OpFileMove), api.Move{Sandbox: sb, From: "/workspace/none", To: "/workspace/h"}},
		{api.OpFileRemove, func() any { return api.Remove{Sandbox: sb, Path: "/workspace/g"} }, one(api.OpFileRemove), api.Remove{Sandbox: sb, Path: "/workspace/none"}},
		{api.OpFileUpload, func() any { return api.WriteFile{Sandbox: sb, Path: "/workspace/d", Content: archive.Bytes()} }, one(api.OpFileUpload), api.WriteFile{Sandbox: sb, Path: "/workspace/none", Content: archive.Bytes()}},
		{api.OpFileDownload, func() any { return api.FilePath{Sandbox: sb, Path: "/workspace/d"} }, one(api.OpFileDownload), api.FilePath{Sandbox: sb, Path: "/workspace/none"}},
		{api.OpTemplateList, func() any { return api.ListTemplates{} }, one(api.OpTemplateList), nil},
		{api.OpSnapshotCreate, func() any { return api.CreateSnapshot{Sandbox: sb} }, one(api.OpSnapshotCreate), api.CreateSnapshot{Sandbox: missing}},
		{api.OpSnapshotList, func() any { return api.ListSnapshots{} }, one(api.OpSnapshotList), nil},
		{api.OpSnapshotGet, func() any { return api.SnapshotRef{Snapshot: made} }, one(api.OpSnapshotGet), api.SnapshotRef{Snapshot: "sn_none"}},
		{api.OpSnapshotDelete, func() any { return api.SnapshotRef{Snapshot: made} }, one(api.OpSnapshotDelete), api.SnapshotRef{Snapshot: "sn_none"}},
		// A fork's record is the create of each sandbox it made.
		{api.OpSnapshotFork, func() any { return api.ForkSnapshot{Snapshot: snap, Count: 2} }, []string{api.OpSandboxCreate, api.OpSandboxCreate}, api.ForkSnapshot{Snapshot: snap, Count: MaxFork + 1}},
		{api.OpSandboxRestore, func() any { return api.RestoreSandbox{Sandbox: sb, Snapshot: snap} }, one(api.OpSandboxRestore), api.RestoreSandbox{Sandbox: sb, Snapshot: "sn_none"}},
		{api.OpAuditQuery, func() any { return api.AuditQuery{} }, one(api.OpAuditQuery), api.AuditQuery{Limit: -1}},
		{api.OpApprovalList, func() any { return api.ListApprovals{} }, one(api.OpApprovalList), api.ListApprovals{State: "bogus"}},
		{api.OpApprovalGet, func() any { return api.ApprovalRef{ID: approval} }, one(api.OpApprovalGet), api.ApprovalRef{ID: "ap_none"}},
		// An answer is recorded as approval.answer (a refused one under
		// the operation's name).
		{api.OpApprovalAnswer, func() any { return api.AnswerApproval{ID: approval, Decision: api.DecisionAllow} }, one("approval.answer"), api.AnswerApproval{ID: approval, Decision: "maybe"}},
		// A delete's record is the sandbox's end.
		{api.OpSandboxDelete, func() any { return api.SandboxRef{Sandbox: doomed} }, one("sandbox.end"), api.SandboxRef{Sandbox: missing}},
		// A run's steps are calls of its creator: the step's create, exec
		// and delete (sandbox.end), then its end and the run's. The
		// events row follows the run to its end.
		{api.OpWorkflowCreate, func() any {
			return api.CreateWorkflow{Document: "steps:\n  - {id: one, run: [\"true\"], snapshot: none}\n"}
		}, []string{"process.exec", "sandbox.create", "sandbox.end", api.OpWorkflowCreate, "workflow.run", "workflow.step"}, api.CreateWorkflow{Document: "steps: []"}},
		{api.OpWorkflowEvents, func() any { return api.WorkflowEvents{Run: wf, Follow: true} }, one(api.OpWorkflowEvents), api.WorkflowEvents{Run: noRun}},
		{api.OpWorkflowList, func() any { return api.ListWorkflows{} }, one(api.OpWorkflowList), api.ListWorkflows{State: "bogus"}},
		{api.OpWorkflowGet, func() any { return api.WorkflowRef{Run: wf} }, one(api.OpWorkflowGet), api.WorkflowRef{Run: noRun}},
		{api.OpWorkflowCancel, func() any { return api.WorkflowRef{Run: blocked} }, one(api.OpWorkflowCancel), api.WorkflowRef{Run: noRun}},
		{api.OpWorkflowResume, func() any { return api.ResumeWorkflow{Run: blocked} }, one(api.OpWorkflowResume), api.ResumeWorkflow{Run: noRun}},
		{api.OpWorkflowAdd, func() any {
			return api.AddWorkflowStep{Run: blocked, Group: "g", Step: json.RawMessage(`{"id": "extra", "run": ["true"], "snapshot": "none"}`)}
		}, one(api.OpWorkflowAdd), api.AddWorkflowStep{Run: blocked, Group: "nope", Step: json.RawMessage(`{"id": "x", "run": ["true"]}`)}},
		// A build's calls are its creator's: its sandbox's create, exec,
		// the download of its output and delete (sandbox.end), then the
		// build's own end (kind build).
		{api.OpBuildCreate, func() any {
			return api.CreateBuild{Command: []string{"true"}, Outputs: []string{"up.txt"}, Content: archive.Bytes()}
		}, []string{"build", api.OpBuildCreate, "file.download", "process.exec", "sandbox.create", "sandbox.end"}, api.CreateBuild{Content: archive.Bytes()}},
		// An agent run's model calls and end are its creator's: one
		// model.call, then agent.run; the events row follows it to its
		// end.
		{api.OpAgentCreate, func() any { return api.CreateAgentRun{Document: agents, Agent: "a", Task: "answer"} },
			[]string{api.OpAgentCreate, "agent.run", "model.call"}, api.CreateAgentRun{Document: "agents: []", Agent: "a", Task: "t"}},
		{api.OpAgentEvents, func() any { return api.AgentEvents{Run: ag, Follow: true} }, one(api.OpAgentEvents), api.AgentEvents{Run: noAgent}},
		{api.OpAgentList, func() any { return api.ListAgentRuns{} }, one(api.OpAgentList), api.ListAgentRuns{State: "bogus"}},
		{api.OpAgentGet, func() any { return api.AgentRunRef{Run: ag} }, one(api.OpAgentGet), api.AgentRunRef{Run: noAgent}},
		{api.OpAgentCancel, func() any { return api.AgentRunRef{Run: heldRun} }, one(api.OpAgentCancel), api.AgentRunRef{Run: noAgent}},
		{api.OpAgentResume, func() any { return api.ResumeAgentRun{Run: heldRun, Task: "answer"} }, one(api.OpAgentResume), api.ResumeAgentRun{Run: noAgent}},
		{api.OpBuildList, func() any { return api.ListBuilds{} }, one(api.OpBuildList), api.ListBuilds{Status: "bogus"}},
		{api.OpBuildGet, func() any { return api.BuildRef{ID: bld.ID} }, one(api.OpBuildGet), api.BuildRef{ID: noBuild}},
		{api.OpBuildLog, func() any { return api.BuildLogRequest{ID: bld.ID} }, one(api.OpBuildLog), api.BuildLogRequest{ID: noBuild}},
		{api.OpBuildArtifact, func() any { return api.BuildArtifactRef{ID: bld.ID, Digest: bld.Artifacts[0].SHA256} }, one(api.OpBuildArtifact),
			api.BuildArtifactRef{ID: bld.ID, Digest: strings.Repeat("0", 64)}},
		{api.OpBuildDelete, func() any { return api.BuildRef{ID: bld.ID} }, one(api.OpBuildDelete), api.BuildRef{ID: noBuild}},
	}
	var names []string
	for _, o := range api.Ops {
		names = append(names, o.Name)
	}
	var covered []string
	for _, r := range rows {
		covered = append(covered, r.name)
	}
	slices.Sort(names)
	slices.Sort(covered)
	if !slices.Equal(names, covered) {
		t.Fatalf("the rows cover %q, api.Ops has %q: add a row for every operation", covered, names)
	}

	for _, r := range rows {
		resp, err := h.opCall(r.name+"/ok", r.name, r.ok())
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if sn, ok := resp.(*api.Snapshot); ok && r.name == api.OpSnapshotCreate {
			made = sn.ID
		}
		if run, ok := resp.(*api.WorkflowRun); ok && r.name == api.OpWorkflowCreate {
			wf = run.ID
		}
		if run, ok := resp.(*api.AgentRun); ok && r.name == api.OpAgentCreate {
			ag = run.ID
		}
		if b, ok := resp.(*api.Build); ok && r.name == api.OpBuildCreate {
			if bld = *b; b.Status != api.BuildSucceeded || len(b.Artifacts) != 1 {
				t.Fatalf("the build: %+v", b)
			}
		}
		if r.bad != nil {
			if _, err := h.opCall(r.name+"/bad", r.name, r.bad); err == nil {
				t.Errorf("%s: the refused request succeeded", r.name)
			}
		}
		if _, err := h.opCall(r.name+"/decode", r.name, map[string]any{"no_such_field": 1}); err == nil {
			t.Errorf("%s: a request with an unknown field succeeded", r.name)
		}
	}
	if r := await(t, asked); r.status != 200 {
		t.Fatalf("the asked exec: %d %s", r.status, r.body)
	}

	// A handler that panics is recorded too (and the panic goes on).
	h.svc.ops["test.panic"] = func(context.Context, Caller, *input) (any, error) { panic("boom") }
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not go on")
			}
		}()
		h.opCall("panic", "test.panic", struct{}{})
	}()

	// Once every process has ended and been recorded.
	if err := h.svc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if got := h.kindsOf(r.name + "/ok"); !slices.Equal(got, r.want) {
			t.Errorf("%s: recorded %q, want %q", r.name, got, r.want)
		}
		if r.bad != nil {
			if got := h.kindsOf(r.name + "/bad"); !slices.Equal(got, one(r.name)) {
				t.Errorf("%s refused: recorded %q, want one %s", r.name, got, r.name)
			}
		}
		if got := h.kindsOf(r.name + "/decode"); !slices.Equal(got, one(r.name)) {
			t.Errorf("%s refused by its decoding: recorded %q, want one %s", r.name, got, r.name)
		}
	}
	page, err := h.tape.QueryPage(context.Background(), audit.Query{Tenant: "a", Actor: "panic"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 || page.Events[0].Kind != "test.panic" || !strings.Contains(page.Events[0].Error, "internal") {
		t.Errorf("the panicking call: %+v", page.Events)
	}
}
