package server

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/sandbox/sandboxtest"
	"github.com/moat-sandbox/moat/workflow/engine"
)

// wfDoc is a workflow document of lines.
func wfDoc(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// createRun starts a run of doc for the tenant of token (201 expected).
func (h *harness) createRun(token, doc string) api.WorkflowRun {
	h.t.Helper()
	r := h.do("POST", "/v1/workflows", token, api.CreateWorkflow{Document: doc})
	if r.status != http.StatusCreated {
		h.t.Fatalf("workflow.create: %d %s", r.status, r.body)
	}
	var run api.WorkflowRun
	r.decode(h.t, &run)
	if !strings.HasPrefix(run.ID, "wf-") {
		h.t.Fatalf("workflow.create: run %+v", run)
	}
	return run
}

// runEvents reads a run's events over HTTP (with follow, until it ends).
func (h *harness) runEvents(token, run string, follow bool) []api.WorkflowEvent {
	h.t.Helper()
	path := "/v1/workflows/" + run + "/events"
	if follow {
		path += "?follow=true"
	}
	r := h.do("GET", path, token, nil)
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/x-ndjson") {
		h.t.Fatalf("workflow.events: %d %s", r.status, r.body)
	}
	var out []api.WorkflowEvent
	for _, ev := range events(h.t, r.body) {
		if ev.Type != api.EventWorkflow || ev.Workflow == nil || ev.Seq != ev.Workflow.Seq {
			h.t.Fatalf("workflow.events: event %+v", ev)
		}
		out = append(out, *ev.Workflow)
	}
	return out
}

// getRun describes a run.
func (h *harness) getRun(token, run string) api.WorkflowRun {
	h.t.Helper()
	r := h.do("GET", "/v1/workflows/"+run, token, nil)
	if r.status != http.StatusOK {
		h.t.Fatalf("workflow.get: %d %s", r.status, r.body)
	}
	var out api.WorkflowRun
	r.decode(h.t, &out)
	return out
}

// stepOf returns a run's step id.
func stepOf(t *testing.T, run api.WorkflowRun, id string) api.WorkflowStep {
	t.Helper()
	for _, st := range run.Steps {
		if st.ID == id {
			return st
		}
	}
	t.Fatalf("run %s has no step %s: %+v", run.ID, id, run.Steps)
	return api.WorkflowStep{}
}

// eventTypes lists the types of evs (with their step, if any).
func eventTypes(evs []api.WorkflowEvent) []string {
	var out []string
	for _, e := range evs {
		s := e.Type
		if e.Step != "" {
			s += ":" + e.Step
		}
		out = append(out, s)
	}
	return out
}

// workflowAuditEvents returns tenant a's audit events of kind.
func (h *harness) workflowAuditEvents(kind string) []audit.Event {
	h.t.Helper()
	page, err := h.tape.QueryPage(context.Background(), audit.Query{Tenant: "a", Kind: kind, Limit: audit.MaxLimit})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []audit.Event
	for _, e := range page.Events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// envOf is the value of key in a KEY=VALUE list.
func envOf(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// blockingRuntime is a fake runtime whose command "block" waits for its
// context on a step's first attempt (announcing the step on blocked) and
// succeeds at once on later ones.
func blockingRuntime(blocked chan<- string) *sandboxtest.Runtime {
	return sandboxtest.New(sandboxtest.WithHandler(func(ctx context.Context, c *sandboxtest.Cmd) (int, bool) {
		if c.Args[0] != "block" {
			return 0, false
		}
		if envOf(c.Env, "MOAT_STEP_ATTEMPT") != "1" {
			return 0, true
		}
		blocked <- envOf(c.Env, "MOAT_STEP_ID")
		<-ctx.Done()
		return 137, true
	}))
}

// TestWorkflowRun: a run of two steps through the HTTP API, on the fake
// runtime: the events followed to the end, the steps' results, the
// engine's environment, outputs collected with their sha256 (and on the
// host under the artifact directory), the audit of every step's calls
// and of the ends, and the listing.
func TestWorkflowRun(t *testing.T) {
	h := newFakeHarness(t, nil)
	run := h.createRun(tokenA, wfDoc(
		"name: two steps",
		"defaults:",
		"  snapshot: none",
		"steps:",
		"  - id: make",
		"    sh: mkdir -p /tmp/out/sub; echo hello > /tmp/out/sub/x; echo made",
		"    outputs: [/tmp/out]",
		"  - id: env",
		"    sh: echo $MOAT_WORKFLOW_RUN $MOAT_STEP_ID $MOAT_STEP_ATTEMPT",
	))
	if run.Name != "two steps" || (run.State != api.RunPending && run.State != api.RunRunning) {
		t.Errorf("created: %+v", run)
	}
	evs := h.runEvents(tokenA, run.ID, true)
	types := eventTypes(evs)
	for _, want := range []string{api.WfRunStarted, "step.succeeded:make", "step.artifacts:make", "step.succeeded:env", api.WfRunSucceeded} {
		if !slices.Contains(types, want) {
			t.Errorf("events %q lack %s", types, want)
		}
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) || e.Run != run.ID {
			t.Errorf("event %d: %+v", i, e)
		}
	}
	if types[len(types)-1] != api.WfRunSucceeded {
		t.Errorf("the last event is %s", types[len(types)-1])
	}
	// Resuming after a seen event.
	if again := h.runEvents(tokenA, run.ID, false); len(again) != len(evs) {
		t.Errorf("the events again: %d, then %d", len(evs), len(again))
	}
	r := h.do("GET", "/v1/workflows/"+run.ID+"/events?after=2", tokenA, nil)
	if got := events(t, r.body); len(got) != len(evs)-2 || got[0].Seq != 3 {
		t.Errorf("after=2: %d events, first %+v", len(got), got)
	}

	got := h.getRun(tokenA, run.ID)
	if got.State != api.RunSucceeded || got.Ended == nil {
		t.Fatalf("run: %+v", got)
	}
	mk := stepOf(t, got, "make")
	sum := sha256.Sum256([]byte("hello\n"))
	if mk.State != api.StepSucceeded || mk.Attempt != 1 || len(mk.Outputs) != 1 ||
		mk.Outputs[0] != (api.WorkflowArtifact{Path: "/tmp/out/sub/x", Bytes: 6, SHA256: hex.EncodeToString(sum[:])}) {
		t.Errorf("step make: %+v", mk)
	}
	if mk.Result == nil || mk.Result.Stdout != "made\n" {
		t.Errorf("step make's result: %+v", mk.Result)
	}
	host := filepath.Join(h.svc.wf.dir, run.ID, "make", "out", "tmp", "out", "sub", "x")
	if b, err := os.ReadFile(host); err != nil || string(b) != "hello\n" {
		t.Errorf("the output on the host: %q, %v", b, err)
	}
	if fi, err := os.Stat(h.svc.wf.dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the artifact directory: %v, %v", fi, err)
	}
	env := stepOf(t, got, "env")
	if env.Result == nil || env.Result.Stdout != run.ID+" env 1\n" {
		t.Errorf("step env's result: %+v", env.Result)
	}

	// Every call of a step is the tenant's, by the caller's actor.
	for _, kind := range []string{"sandbox.create", "process.exec", "file.download", "sandbox.end"} {
		if n := len(h.workflowAuditEvents(kind)); n < 1 {
			t.Errorf("no %s audit event", kind)
		}
	}
	steps := h.workflowAuditEvents("workflow.step")
	if len(steps) != 2 {
		t.Fatalf("workflow.step events: %+v", steps)
	}
	var req struct {
		Run, Step string
		Attempt   int
	}
	var res struct {
		State     string
		ExitCode  *int `json:"exit_code"`
		Artifacts []api.WorkflowArtifact
	}
	json.Unmarshal(steps[0].Request, &req)
	json.Unmarshal(steps[0].Result, &res)
	if req.Run != run.ID || req.Step != "make" || req.Attempt != 1 || res.State != api.StepSucceeded ||
		res.ExitCode == nil || *res.ExitCode != 0 || len(res.Artifacts) != 1 || res.Artifacts[0] != mk.Outputs[0] ||
		steps[0].Sandbox == "" || steps[0].Actor == "" {
		t.Errorf("workflow.step of make: %+v (%s %s)", steps[0], steps[0].Request, steps[0].Result)
	}
	if runs := h.workflowAuditEvents("workflow.run"); len(runs) != 1 || !strings.Contains(string(runs[0].Result), `"succeeded"`) {
		t.Errorf("workflow.run events: %+v", runs)
	}
	if c := h.workflowAuditEvents(api.OpWorkflowCreate); len(c) != 1 || !strings.Contains(string(c[0].Request), "document_sha256") ||
		strings.Contains(string(c[0].Request), "MOAT_STEP_ID") {
		t.Errorf("workflow.create's audit: %+v", c)
	}

	// The listing, newest first, and its filter.
	var l api.WorkflowList
	h.do("GET", "/v1/workflows?state=succeeded", tokenA, nil).decode(t, &l)
	if len(l.Runs) != 1 || l.Runs[0].ID != run.ID {
		t.Errorf("list succeeded: %+v", l)
	}
	h.do("GET", "/v1/workflows?state=failed", tokenA, nil).decode(t, &l)
	if len(l.Runs) != 0 {
		t.Errorf("list failed: %+v", l)
	}
	if r := h.do("GET", "/v1/workflows?state=sideways", tokenA, nil); r.status != http.StatusBadRequest {
		t.Errorf("list state=sideways: %d %s", r.status, r.body)
	}
	// An ended run cannot be cancelled.
	if r := h.do("POST", "/v1/workflows/"+run.ID+"/cancel", tokenA, struct{}{}); r.status != http.StatusConflict {
		t.Errorf("cancel an ended run: %d %s", r.status, r.body)
	}
}

// TestWorkflowInvalid: an invalid document is 400 invalid_argument with
// the document's line, and starts nothing.
func TestWorkflowInvalid(t *testing.T) {
	h := newFakeHarness(t, nil)
	for name, c := range map[string]struct {
		doc, want string
	}{
		"unknown field": {wfDoc("steps:", "  - id: a", "    sh: exit 0", "    bogus: 1"), "line 4"},
		"cycle":         {wfDoc("steps:", "  - group: g", "    mode: parallel", "    steps:", "      - id: a", "        sh: exit 0", "        needs: [b]", "      - id: b", "        sh: exit 0", "        needs: [a]"), "line "},
		"from no ancestor": {wfDoc("steps:", "  - group: g", "    mode: parallel", "    steps:", "      - id: a", "        sh: exit 0",
			"      - id: b", "        sh: exit 0", "        from: a"), "line 9"},
		"empty": {"", "document is required"},
	} {
		r := h.do("POST", "/v1/workflows", tokenA, api.CreateWorkflow{Document: c.doc})
		if e := r.apiErr(t); r.status != http.StatusBadRequest || e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s: %d %s, want 400 with %q", name, r.status, r.body, c.want)
		}
	}
	var l api.WorkflowList
	h.do("GET", "/v1/workflows", tokenA, nil).decode(t, &l)
	if len(l.Runs) != 0 {
		t.Errorf("invalid documents made runs: %+v", l)
	}
	if n := h.svc.cfg.Runtime.(*sandboxtest.Runtime).Created(); n != 0 {
		t.Errorf("%d sandboxes created", n)
	}
}

// TestWorkflowTenants: another tenant's run is not found, whatever it
// asks; its listing does not show it.
func TestWorkflowTenants(t *testing.T) {
	h := newFakeHarness(t, nil)
	run := h.createRun(tokenA, wfDoc("steps:", "  - id: a", "    sh: exit 0", "    snapshot: none"))
	h.runEvents(tokenA, run.ID, true)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/workflows/" + run.ID},
		{"GET", "/v1/workflows/" + run.ID + "/events?follow=true"},
		{"POST", "/v1/workflows/" + run.ID + "/cancel"},
		{"POST", "/v1/workflows/" + run.ID + "/resume"},
		{"POST", "/v1/workflows/" + run.ID + "/steps"},
		{"GET", "/v1/workflows/wf-0123456789ab"},
		{"GET", "/v1/workflows/not-a-run"},
	} {
		var body any
		if c.method == "POST" {
			body = map[string]any{"group": "g", "step": map[string]any{"id": "x", "sh": "true"}}
			if strings.HasSuffix(c.path, "cancel") || strings.HasSuffix(c.path, "resume") {
				body = struct{}{}
			}
		}
		if r := h.do(c.method, c.path, tokenB, body); r.status != http.StatusNotFound || r.apiErr(t).Code != api.CodeNotFound {
			t.Errorf("tenant b: %s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	var l api.WorkflowList
	h.do("GET", "/v1/workflows", tokenB, nil).decode(t, &l)
	if len(l.Runs) != 0 {
		t.Errorf("tenant b lists %+v", l.Runs)
	}
	h.do("GET", "/v1/workflows", tokenA, nil).decode(t, &l)
	if len(l.Runs) != 1 || l.Runs[0].ID != run.ID {
		t.Errorf("tenant a lists %+v", l.Runs)
	}
}

// TestWorkflowCancelResume: a run cancelled while a step blocks ends
// cancelled (the step cancelled, its sandbox gone); resumed, it runs the
// step that did not succeed again (attempt 2) and not the one before it,
// and succeeds.
func TestWorkflowCancelResume(t *testing.T) {
	blocked := make(chan string, 4)
	h := newFakeHarness(t, func(c *Config) { c.Runtime = blockingRuntime(blocked) })
	run := h.createRun(tokenA, wfDoc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - id: first",
		"    sh: echo one",
		"  - id: second",
		"    run: [block]",
	))
	select {
	case id := <-blocked:
		if id != "second" {
			t.Fatalf("blocked in %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the step did not start")
	}
	r := h.do("POST", "/v1/workflows/"+run.ID+"/cancel", tokenA, struct{}{})
	if r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	var cancelled api.WorkflowRun
	r.decode(t, &cancelled)
	if cancelled.State != api.RunCancelled || stepOf(t, cancelled, "second").State != api.StepCancelled {
		t.Fatalf("cancelled: %+v", cancelled)
	}
	if live := h.running(); len(live) != 0 {
		t.Errorf("sandboxes left running: %v", live)
	}
	r = h.do("POST", "/v1/workflows/"+run.ID+"/resume", tokenA, api.ResumeWorkflow{})
	if r.status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	h.runEvents(tokenA, run.ID, true)
	got := h.getRun(tokenA, run.ID)
	if got.State != api.RunSucceeded || got.Resumes != 1 {
		t.Fatalf("resumed: %+v", got)
	}
	if st := stepOf(t, got, "first"); st.Attempt != 1 || len(st.Attempts) != 1 {
		t.Errorf("the first step ran again: %+v", st)
	}
	if st := stepOf(t, got, "second"); st.State != api.StepSucceeded || st.Attempt != 2 {
		t.Errorf("the second step: %+v", st)
	}
	// Resuming a run that succeeded is a conflict.
	if r := h.do("POST", "/v1/workflows/"+run.ID+"/resume", tokenA, api.ResumeWorkflow{}); r.status != http.StatusConflict {
		t.Errorf("resume a succeeded run: %d %s", r.status, r.body)
	}
}

// TestWorkflowAddStep: a step added to a running concurrent group runs.
func TestWorkflowAddStep(t *testing.T) {
	blocked := make(chan string, 4)
	h := newFakeHarness(t, func(c *Config) { c.Runtime = blockingRuntime(blocked) })
	run := h.createRun(tokenA, wfDoc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - group: work",
		"    mode: concurrent",
		"    steps:",
		"      - id: hold",
		"        run: [block]",
	))
	<-blocked
	r := h.do("POST", "/v1/workflows/"+run.ID+"/steps", tokenA, api.AddWorkflowStep{Group: "work",
		Step: json.RawMessage(`{"id": "extra", "sh": "echo extra"}`)})
	if r.status != http.StatusOK {
		t.Fatalf("add_step: %d %s", r.status, r.body)
	}
	r = h.do("POST", "/v1/workflows/"+run.ID+"/steps", tokenA, api.AddWorkflowStep{Group: "nope",
		Step: json.RawMessage(`{"id": "other", "sh": "true"}`)})
	if r.status == http.StatusOK {
		t.Errorf("add_step to no group: %d %s", r.status, r.body)
	}
	// The added step ends while hold still blocks.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := h.getRun(tokenA, run.ID)
		if slices.ContainsFunc(got.Steps, func(s api.WorkflowStep) bool { return s.ID == "extra" && s.State == api.StepSucceeded }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the added step did not succeed: %+v", got.Steps)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := h.do("POST", "/v1/workflows/"+run.ID+"/cancel", tokenA, struct{}{}); r.status != http.StatusOK {
		t.Errorf("cancel: %d %s", r.status, r.body)
	}
}

// TestWorkflowRPC: workflow.create and a followed workflow.events over
// JSON-RPC: the events arrive as notifications, the ended run as the
// result.
func TestWorkflowRPC(t *testing.T) {
	h := newFakeHarness(t, nil)
	p := newRPCPeer(t, h)
	doc, _ := json.Marshal(wfDoc("steps:", "  - id: a", "    sh: echo rpc", "    snapshot: none"))
	p.send(`{"jsonrpc":"2.0","id":1,"method":"workflow.create","params":{"document":` + string(doc) + `}}`)
	m := p.next()
	res, _ := m["result"].(map[string]any)
	id, _ := res["id"].(string)
	if !strings.HasPrefix(id, "wf-") {
		t.Fatalf("create: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","id":2,"method":"workflow.events","params":{"run":"` + id + `","follow":true}}`)
	var types []string
	for {
		m := p.next()
		if m["method"] == api.NotifyEvent {
			ev := m["params"].(map[string]any)["event"].(map[string]any)
			if ev["type"] != api.EventWorkflow {
				t.Fatalf("notification: %v", m)
			}
			types = append(types, ev["workflow"].(map[string]any)["type"].(string))
			continue
		}
		if m["id"] != float64(2) {
			t.Fatalf("answer: %v", m)
		}
		if res := m["result"].(map[string]any); res["state"] != api.RunSucceeded {
			t.Fatalf("the followed run: %v", m)
		}
		break
	}
	if len(types) == 0 || types[0] != api.WfRunStarted || types[len(types)-1] != api.WfRunSucceeded {
		t.Errorf("events: %q", types)
	}
	p.send(`{"jsonrpc":"2.0","id":3,"method":"workflow.get","params":{"run":"wf-0123456789ab"}}`)
	if m := p.next(); m["error"] == nil {
		t.Errorf("get a missing run: %v", m)
	}
	p.w.Close()
	if err := <-p.done; err != nil {
		t.Fatal(err)
	}
}

// TestWorkflowSDK: the SDK's workflow methods against the server over
// HTTP.
func TestWorkflowSDK(t *testing.T) {
	h := newFakeHarness(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(client.WithHTTP(h.srv.URL, tokenA))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.CreateWorkflow(ctx, api.CreateWorkflow{Document: "steps: [{id: a, sh: exit 0, bogus: 1}]"})
	if ae := api.AsError(err); ae.Code != api.CodeInvalidArgument || !strings.Contains(ae.Message, "line 1") {
		t.Errorf("invalid: %v", err)
	}
	run, err := c.CreateWorkflow(ctx, api.CreateWorkflow{Document: wfDoc("steps:", "  - id: a", "    sh: echo sdk", "    snapshot: none"),
		Name: "sdk", Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	ended, err := c.WaitWorkflow(ctx, run.ID)
	if err != nil || ended.State != api.RunSucceeded || ended.Name != "sdk" || ended.Labels["k"] != "v" {
		t.Fatalf("wait: %+v, %v", ended, err)
	}
	var n int
	got, err := c.WorkflowEvents(ctx, api.WorkflowEvents{Run: run.ID, After: 1}, func(ev api.WorkflowEvent) error {
		n++
		return nil
	})
	if err != nil || got.ID != run.ID || n == 0 {
		t.Errorf("events: %+v, %d, %v", got, n, err)
	}
	list, err := c.ListWorkflows(ctx, api.ListWorkflows{})
	if err != nil || len(list) != 1 || list[0].ID != run.ID {
		t.Errorf("list: %+v, %v", list, err)
	}
	if _, err := c.CancelWorkflow(ctx, run.ID); api.AsError(err).Code != api.CodeConflict {
		t.Errorf("cancel an ended run: %v", err)
	}
	if _, err := c.Workflow(ctx, "wf-0123456789ab"); !client.IsNotFound(err) {
		t.Errorf("a missing run: %v", err)
	}
}

// TestWorkflowCollectSymlinks: what a step's outputs hold is extracted
// without following a symlink the sandbox made: a symlink is kept as one
// (not listed), and a later output whose host path would cross it is
// refused rather than written through it.
func TestWorkflowCollectSymlinks(t *testing.T) {
	h := newFakeHarness(t, nil)
	sb := h.create(tokenA, api.CreateSandbox{})
	var arc bytes.Buffer
	tw := tar.NewWriter(&arc)
	for _, hdr := range []*tar.Header{
		{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "out/sub/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "out/sub/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2},
		{Name: "out/link", Typeflag: tar.TypeSymlink, Linkname: "sub"},
	} {
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			tw.Write([]byte("x\n"))
		}
	}
	tw.Close()
	if r := h.send("PUT", "/v1/sandboxes/"+sb+"/archive?path=/workspace", tokenA, "application/x-tar", arc.Bytes()); r.status != http.StatusOK {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	ctx := context.Background()
	c := Caller{Tenant: "a", Actor: "test"}
	dir := func(name string) string {
		d := filepath.Join(h.svc.wf.dir, "wf-0123456789ab", name, "out")
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}

	one := dir("one")
	arts, err := h.svc.collect(ctx, c, sb, []string{"/workspace/out"}, one)
	if err != nil {
		t.Fatal(err)
	}
	if len(arts) != 1 || arts[0].Path != "/workspace/out/sub/x" || arts[0].Bytes != 2 {
		t.Errorf("artifacts: %+v", arts)
	}
	if target, err := os.Readlink(filepath.Join(one, "workspace", "out", "link")); err != nil || target != "sub" {
		t.Errorf("the symlink on the host: %q, %v", target, err)
	}

	two := dir("two")
	_, err = h.svc.collect(ctx, c, sb, []string{"/workspace/out", "/workspace/out/link/x"}, two)
	if err == nil || !strings.Contains(err.Error(), "/workspace/out/link/x") || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("an output through the sandbox's symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(two, "workspace", "out", "sub", "x")); err != nil {
		t.Errorf("the first output: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(two, "workspace", "out", "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v, %v", fi, err)
	}

	for _, bad := range [][]string{{"workspace/out"}, {"/"}, {"/workspace/../etc"}} {
		if _, err := h.svc.collect(ctx, c, sb, bad, dir("bad")); err == nil {
			t.Errorf("output %q accepted", bad)
		}
	}
	if _, err := h.svc.collect(ctx, c, sb, []string{"/workspace/out"}, t.TempDir()); err == nil {
		t.Error("a directory outside the artifact directory accepted")
	}
	if _, err := h.svc.collect(ctx, c, sb, []string{"/workspace/none"}, dir("missing")); err == nil {
		t.Error("a missing output accepted")
	}
}

// TestWorkflowInputChecks: the daemon binds only directories under its
// artifact directory, reached without a symlink, read-only, and only a
// budget of the caller's.
func TestWorkflowInputChecks(t *testing.T) {
	h := newFakeHarness(t, nil)
	root := h.svc.wf.dir
	good := filepath.Join(root, "wf-0123456789ab", "a", "out")
	if err := os.MkdirAll(good, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "wf-0123456789ab"), filepath.Join(root, "wf-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := Caller{Tenant: "a", Actor: "test"}
	check := func(b sandbox.Bind, budget string) error {
		return h.svc.checkStep(c, &stepSandbox{inputs: []sandbox.Bind{b}, budget: budget})
	}
	if err := check(sandbox.Bind{Source: good, Target: "/in"}, ""); err != nil {
		t.Errorf("a step's output directory: %v", err)
	}
	for name, b := range map[string]sandbox.Bind{
		"writable":        {Source: good, Target: "/in", Writable: true},
		"outside":         {Source: t.TempDir(), Target: "/in"},
		"through symlink": {Source: filepath.Join(root, "wf-link", "a", "out"), Target: "/in"},
		"a file":          {Source: filepath.Join(root, "file"), Target: "/in"},
		"not clean":       {Source: root + "/wf-0123456789ab/../wf-0123456789ab/a/out", Target: "/in"},
		"missing":         {Source: filepath.Join(root, "nope"), Target: "/in"},
		"system target":   {Source: good, Target: "/proc"},
	} {
		if err := check(b, ""); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Budgets: only a live one of the caller's tenant.
	rel, err := wfBackend{s: h.svc}.NewBudget(context.Background(), engine.Owner{Tenant: "b"}, "wf-0123456789ab-g", sandbox.Limits{CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.checkStep(c, &stepSandbox{budget: "wf-0123456789ab-g"}); api.AsError(err).Code != api.CodeNotFound {
		t.Errorf("another tenant's budget: %v", err)
	}
	if err := h.svc.checkStep(Caller{Tenant: "b"}, &stepSandbox{budget: "wf-0123456789ab-g"}); err != nil {
		t.Errorf("the tenant's own budget: %v", err)
	}
	rel()
	if err := h.svc.checkStep(Caller{Tenant: "b"}, &stepSandbox{budget: "wf-0123456789ab-g"}); err == nil {
		t.Error("a released budget accepted")
	}
	if evs := h.workflowAuditEvents("workflow.budget"); len(evs) != 0 {
		t.Errorf("tenant b's budget audited for tenant a: %+v", evs)
	}
}

// noBudgets is a runtime without sandbox.Budgeter.
type noBudgets struct{ sandbox.Runtime }

// TestWorkflowBudgetSupport: a group's budget is made through the
// runtime and released (audited) once its steps end; a runtime without
// budgets fails the group's steps rather than run them unbounded.
func TestWorkflowBudgetSupport(t *testing.T) {
	doc := wfDoc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - group: g",
		"    mode: parallel",
		"    budget: {cpus: 1, pids: 64}",
		"    steps:",
		"      - {id: a, sh: echo a}",
		"      - {id: b, sh: echo b}",
	)
	h := newFakeHarness(t, nil)
	run := h.createRun(tokenA, doc)
	h.runEvents(tokenA, run.ID, true)
	if got := h.getRun(tokenA, run.ID); got.State != api.RunSucceeded {
		t.Fatalf("with budgets: %+v", got)
	}
	evs := h.workflowAuditEvents("workflow.budget")
	if len(evs) != 1 || !strings.Contains(string(evs[0].Request), run.ID) || !strings.Contains(string(evs[0].Result), `"cpu_ms":0`) {
		t.Errorf("workflow.budget: %+v", evs)
	}
	if live := h.svc.cfg.Runtime.(*sandboxtest.Runtime).Budgets(); len(live) != 0 {
		t.Errorf("budgets left: %v", live)
	}

	h = newFakeHarness(t, func(c *Config) { c.Runtime = noBudgets{sandboxtest.New()} })
	run = h.createRun(tokenA, doc)
	h.runEvents(tokenA, run.ID, true)
	got := h.getRun(tokenA, run.ID)
	if got.State != api.RunFailed || !strings.Contains(stepOf(t, got, "a").Error, "cannot make budgets") {
		t.Errorf("without budgets: %+v", got)
	}
}
