package agent

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// crashAfter returns a journal that freezes after the first save holding
// an event of type typ: the daemon "crashed" with what was saved then.
func crashAfter(j *fakeJournal, typ string) *crashJournal {
	return &crashJournal{
		fakeJournal: j,
		freeze: func(evs []api.AgentEvent) bool {
			return slices.ContainsFunc(evs, func(ev api.AgentEvent) bool { return ev.Type == typ })
		},
		hit:     make(chan struct{}),
		release: make(chan struct{}),
	}
}

// TestRecoverAfterModelAnswer: a crash after the model's answer (tool
// calls) was journalled and before its tool ran: the new daemon runs the
// tool once, in the agent's sandbox, and goes on.
func TestRecoverAfterModelAnswer(t *testing.T) {
	store, b := newFakeJournal(), newFakeBackend()
	execs := 0
	b.exec = func(ctx context.Context, x api.Exec) (*sandbox.Result, error) {
		execs++
		return &sandbox.Result{ExitReason: sandbox.ReasonExited, Stdout: "42\n", StdoutBytes: 3}, nil
	}
	cj := crashAfter(store, api.AgentEvModelResponse)
	m1 := newFakeModel()
	m1.add("small", ask(ToolShellExec, `{"command": "echo 42"}`))
	e1 := New(m1, b, cj)
	v, err := e1.Start(context.Background(), owner, coderDoc, "coder", "answer", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-cj.hit // the tool.call save blocks: the tool has not run
	if execs != 0 {
		t.Fatal("the tool ran before its tool.call was journalled")
	}

	m2 := newFakeModel()
	m2.add("small", check(t, func(req model.Request) {
		if m := lastTool(t, req); m.IsError || !strings.Contains(m.Text, "42") {
			t.Errorf("tool result after recovery %+v", m)
		}
		if len(req.Messages) != 3 {
			t.Errorf("conversation %+v", req.Messages)
		}
	}, say("42")))
	e2 := New(m2, b, store)
	defer e2.Close()
	if err := e2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	run := wait(t, e2, v.ID)
	if run.State != api.AgentSucceeded || run.Answer != "42" || run.Resumes != 1 || execs != 1 || m2.calls() != 1 {
		t.Errorf("run %+v, %d execs, %d model calls", run, execs, m2.calls())
	}
	types := store.types(v.ID)
	if !slices.Contains(types, api.AgentEvRunInterrupted) || !slices.Contains(types, api.AgentEvRunResumed) {
		t.Errorf("events %v", types)
	}
	close(cj.release)
	e1.Close()
}

// TestRecoverDuringTool: a crash while a tool ran: the new daemon answers
// the call as interrupted (never runs it again), keeps the agent's
// sandbox that still runs, and goes on.
func TestRecoverDuringTool(t *testing.T) {
	store, b := newFakeJournal(), newFakeBackend()
	execs := 0
	b.exec = func(ctx context.Context, x api.Exec) (*sandbox.Result, error) {
		execs++
		return &sandbox.Result{ExitReason: sandbox.ReasonExited}, nil
	}
	cj := crashAfter(store, api.AgentEvToolCall)
	m1 := newFakeModel()
	m1.add("small", ask(ToolShellExec, `{"command": "make deploy"}`))
	e1 := New(m1, b, cj)
	v, err := e1.Start(context.Background(), owner, coderDoc, "coder", "deploy", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-cj.hit // the tool ran; its result's save blocks

	m2 := newFakeModel()
	m2.add("small", check(t, func(req model.Request) {
		if m := lastTool(t, req); !m.IsError || m.Text != interrupted {
			t.Errorf("in-flight call answered %+v", m)
		}
	}, ask(ToolShellExec, `{"command": "echo again"}`)), say("done"))
	e2 := New(m2, b, store)
	defer e2.Close()
	if err := e2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	run := wait(t, e2, v.ID)
	if run.State != api.AgentSucceeded || execs != 2 {
		t.Errorf("run %+v, %d execs (want the first once, and the model's new call)", run, execs)
	}
	ops := b.ops()
	if count(ops, api.OpSandboxCreate) != 1 || count(ops, api.OpSandboxGet) != 1 || len(b.live()) != 0 {
		t.Errorf("calls %v, live %v: the sandbox should be reused, then deleted", ops, b.live())
	}
	close(cj.release)
	e1.Close()
}

// TestRecoverHandoff: a crash while the helper worked on a handoff: the
// helper goes on in its own conversation and its answer reaches the lead.
func TestRecoverHandoff(t *testing.T) {
	store, b := newFakeJournal(), newFakeBackend()
	cj := crashAfter(store, api.AgentEvHandoff)
	m1 := newFakeModel()
	m1.add("big", ask(ToolHandoff, `{"to": "helper", "task": "sub"}`))
	e1 := New(m1, b, cj)
	v, err := e1.Start(context.Background(), owner, teamDoc, "lead", "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-cj.hit
	m2 := newFakeModel()
	m2.add("small", check(t, func(req model.Request) {
		if len(req.Messages) != 1 || req.Messages[0].Text != "sub" {
			t.Errorf("helper's conversation %+v", req.Messages)
		}
	}, say("sub done")))
	m2.add("big", check(t, func(req model.Request) {
		if m := lastTool(t, req); m.Text != "sub done" {
			t.Errorf("handoff result %+v", m)
		}
	}, say("all done")))
	e2 := New(m2, b, store)
	defer e2.Close()
	if err := e2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if run := wait(t, e2, v.ID); run.State != api.AgentSucceeded || run.Answer != "all done" {
		t.Errorf("run %+v", run)
	}
	close(cj.release)
	e1.Close()
}

// TestCloseKeepsRuns: Close journals nothing more; Cancel of a run not
// taken up ends it.
func TestCloseKeepsRuns(t *testing.T) {
	store, b := newFakeJournal(), newFakeBackend()
	m := newFakeModel()
	started := make(chan struct{})
	m.add("small", func(ctx context.Context, req model.Request) (*model.Response, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	e := New(m, b, store)
	v, err := e.Start(context.Background(), owner, coderDoc, "coder", "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	e.Close()
	rec, err := store.LoadRun(context.Background(), owner.Tenant, v.ID)
	if err != nil || rec.Run.State != api.AgentRunning {
		t.Fatalf("after close: %v %+v", err, rec.Run)
	}
	e2 := New(newFakeModel(), b, store)
	defer e2.Close()
	run, err := e2.Cancel(context.Background(), owner.Tenant, v.ID)
	if err != nil || run.State != api.AgentCancelled {
		t.Errorf("cancel: %v %+v", err, run)
	}
	if _, err := e2.Resume(context.Background(), owner.Tenant, "ag-000000000000", ""); !isNotFound(err) {
		t.Errorf("resume of no run: %v", err)
	}
}

// TestRecoverBadDocumentDeletesSandboxes: a run whose document no longer
// compiles ends failed at recovery, and its sandboxes are deleted as any
// ended run's are (they leaked before).
func TestRecoverBadDocumentDeletesSandboxes(t *testing.T) {
	store, b := newFakeJournal(), newFakeBackend()
	b.exec = func(ctx context.Context, x api.Exec) (*sandbox.Result, error) {
		return &sandbox.Result{ExitReason: sandbox.ReasonExited}, nil
	}
	cj := crashAfter(store, api.AgentEvToolCall)
	m1 := newFakeModel()
	m1.add("small", ask(ToolShellExec, `{"command": "true"}`))
	e1 := New(m1, b, cj)
	v, err := e1.Start(context.Background(), owner, coderDoc, "coder", "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-cj.hit // the tool ran in its sandbox; its result's save blocks
	if len(b.live()) != 1 {
		t.Fatalf("live sandboxes %v, want the agent's", b.live())
	}
	rec, err := store.LoadRun(context.Background(), owner.Tenant, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.Document = "agents: [" // no longer compiles
	if err := store.SaveRun(context.Background(), rec, nil); err != nil {
		t.Fatal(err)
	}

	e2 := New(newFakeModel(), b, store)
	defer e2.Close()
	if err := e2.Recover(context.Background()); err == nil {
		t.Error("recover of a run whose document does not compile: no error")
	}
	got, err := store.LoadRun(context.Background(), owner.Tenant, v.ID)
	if err != nil || got.Run.State != api.AgentFailed {
		t.Fatalf("after recover: %v %+v", err, got.Run)
	}
	if live := b.live(); len(live) != 0 {
		t.Errorf("live sandboxes %v after the run failed, want none", live)
	}
	for _, st := range got.Run.Agents {
		if st.Sandbox != "" {
			t.Errorf("agent %s still records sandbox %s", st.Name, st.Sandbox)
		}
	}
	close(cj.release)
	e1.Close()
}
