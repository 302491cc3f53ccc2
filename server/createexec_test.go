package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/sandbox/sandboxtest"
)

// createExec sends a sandbox.create carrying exec for tenant a.
func (h *harness) createExec(req api.CreateSandbox, exec api.Exec) reply {
	h.t.Helper()
	req.Exec = &exec
	return h.do("POST", "/v1/sandboxes", tokenA, req)
}

// running lists the ids of tenant a's running sandboxes.
func (h *harness) running() []string {
	h.t.Helper()
	var l api.SandboxList
	h.do("GET", "/v1/sandboxes?state=running", tokenA, nil).decode(h.t, &l)
	var ids []string
	for _, sb := range l.Sandboxes {
		ids = append(ids, sb.ID)
	}
	return ids
}

// callEvents lists, oldest first, tenant a's sandbox.create and
// process.exec events.
func (h *harness) callEvents() []api.AuditEvent {
	h.t.Helper()
	var out []api.AuditEvent
	for _, ev := range h.auditEvents(tokenA, "") {
		if ev.Kind == api.OpSandboxCreate || ev.Kind == api.OpExec {
			out = append(out, ev)
		}
	}
	return out
}

// TestCreateExec: a create that carries an exec answers the sandbox with
// the exec's result; the sandbox runs on and takes further calls; the
// audit has a sandbox.create (without the exec's environment) and then a
// process.exec, exactly as for two calls; the store has the call.
func TestCreateExec(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(map[bool]string{false: "sequential", true: "pipelined"}[early], func(t *testing.T) {
			testCreateExec(t, newCreateExecHarness(t, early))
		})
	}
}

// newCreateExecHarness is a fake harness whose runtime is, if early, a
// sandbox.EarlyCreator (the pipelined path of createFor).
func newCreateExecHarness(t *testing.T, early bool) *harness {
	return newFakeHarness(t, func(cfg *Config) {
		if early {
			cfg.Runtime = sandboxtest.EarlyRuntime{Runtime: sandboxtest.New()}
		}
	})
}

func testCreateExec(t *testing.T, h *harness) {
	r := h.createExec(api.CreateSandbox{Labels: map[string]string{"k": "v"}},
		api.Exec{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, Env: []string{"SECRET_TOKEN=hunter2"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sb api.Sandbox
	r.decode(t, &sb)
	if sb.ID == "" || sb.State != api.StateRunning || sb.Labels["k"] != "v" {
		t.Fatalf("sandbox: %s", r.body)
	}
	if sb.Exec == nil || sb.Exec.Error != nil || sb.Exec.Result == nil {
		t.Fatalf("exec outcome: %s", r.body)
	}
	if res := sb.Exec.Result; res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Fatalf("result: %+v", res)
	}
	if strings.Contains(string(r.body), "hunter2") {
		t.Fatalf("the answer holds the environment: %s", r.body)
	}
	// The sandbox takes the next exec, and its description has no exec.
	var res2 struct{ Stdout string }
	h.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", tokenA, api.Exec{Args: []string{"echo", "again"}}).decode(t, &res2)
	if res2.Stdout != "again\n" {
		t.Fatalf("second exec: %+v", res2)
	}
	var got api.Sandbox
	h.do("GET", "/v1/sandboxes/"+sb.ID, tokenA, nil).decode(t, &got)
	if got.Exec != nil {
		t.Fatalf("sandbox.get answers an exec: %+v", got.Exec)
	}

	evs := h.callEvents()
	var kinds []string
	for _, ev := range evs {
		kinds = append(kinds, ev.Kind)
		if strings.Contains(string(ev.Request), "hunter2") || strings.Contains(string(ev.Result), "hunter2") {
			t.Errorf("the audit holds the environment's value: %+v", ev)
		}
		if ev.Kind == api.OpSandboxCreate && strings.Contains(string(ev.Request), `"exec"`) {
			t.Errorf("the create's record holds the exec: %s", ev.Request)
		}
	}
	// In order: the create, the carried exec, the second exec.
	if want := []string{"sandbox.create", "process.exec", "process.exec"}; !slices.Equal(kinds, want) {
		t.Fatalf("audit kinds %v, want %v", kinds, want)
	}
	carried := evs[1]
	if carried.Kind != "process.exec" || carried.Sandbox != sb.ID || carried.Decision != audit.DecisionAllow || carried.Call == "" ||
		!strings.Contains(string(carried.Request), "SECRET_TOKEN") || !strings.Contains(string(carried.Result), `"exit_code":3`) ||
		!strings.Contains(string(carried.Result), `"policy":[{`) {
		t.Fatalf("the exec's record: %+v", carried)
	}
	if create := evs[0]; create.Sandbox != sb.ID || create.Decision != audit.DecisionAllow || create.Error != "" {
		t.Fatalf("the create's record: %+v", create)
	}
	// The call's row in the store.
	calls, err := h.st.ListCalls(t.Context(), "a", sb.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 {
		t.Fatalf("calls in the store: %+v", calls)
	}
}

// TestCreateExecDenied: an exec the policy refuses after the create
// leaves the sandbox running and answers 201 with the refusal, which
// says the sandbox exists; the audit records the create as allowed and
// the exec as denied with its rule.
func TestCreateExecDenied(t *testing.T) {
	h := newCreateExecHarness(t, true)
	writePolicy(t, h.user, "version = 1\ndeny = [\"Exec(touch *)\"]\n")
	r := h.createExec(api.CreateSandbox{}, api.Exec{Args: []string{"touch", "/workspace/marker"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sb api.Sandbox
	r.decode(t, &sb)
	if sb.Exec == nil || sb.Exec.Result != nil || sb.Exec.Error == nil {
		t.Fatalf("exec outcome: %s", r.body)
	}
	e := sb.Exec.Error
	if e.Code != api.CodePolicyDenied || !strings.Contains(e.Rule, "deny Exec(touch *)") ||
		!strings.Contains(e.Message, "sandbox "+sb.ID+" was created") || !strings.Contains(e.Message, "denied: ") {
		t.Fatalf("exec error: %+v", e)
	}
	if ids := h.running(); !slices.Contains(ids, sb.ID) {
		t.Fatalf("the sandbox is not running: %v", ids)
	}
	if r := h.do("GET", "/v1/sandboxes/"+sb.ID+"/files/stat?path=/workspace/marker", tokenA, nil); r.status != http.StatusNotFound {
		t.Fatalf("the marker exists: %d %s", r.status, r.body)
	}
	evs := h.callEvents()
	if len(evs) != 2 || evs[0].Kind != "sandbox.create" || evs[1].Kind != "process.exec" {
		t.Fatalf("audit: %+v", evs)
	}
	if evs[0].Decision != audit.DecisionAllow || evs[1].Decision != audit.DecisionDeny ||
		!strings.Contains(evs[1].Rule, "deny Exec(touch *)") || evs[1].Sandbox != sb.ID {
		t.Fatalf("audit decisions: %+v", evs)
	}
}

// TestCreateExecBadInput: an exec body the daemon would refuse (400) is
// refused before anything is created: no sandbox is left, and the audit
// has the refused create only.
func TestCreateExecBadInput(t *testing.T) {
	h := newFakeHarness(t, nil)
	for name, ex := range map[string]api.Exec{
		"no args":     {},
		"sandbox set": {Sandbox: "sb-0000000000000000", Args: []string{"true"}},
		"NUL":         {Args: []string{"echo", "a\x00b"}},
		"bad timeout": {Args: []string{"true"}, TimeoutMs: -1},
		"bad rules":   {Args: []string{"true"}, Policy: &api.CallRules{Deny: []string{"Exec("}}},
	} {
		r := h.createExec(api.CreateSandbox{}, ex)
		if r.status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", name, r.status, r.body)
		}
		if e := r.apiErr(t); e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, "exec") {
			t.Fatalf("%s: %+v", name, e)
		}
	}
	if ids := h.running(); len(ids) != 0 {
		t.Fatalf("sandboxes left: %v", ids)
	}
	evs := h.callEvents()
	if len(evs) != 5 {
		t.Fatalf("audit: %+v", evs)
	}
	for _, ev := range evs {
		if ev.Kind != api.OpSandboxCreate || ev.Error == "" || ev.Sandbox != "" {
			t.Fatalf("audit: %+v", ev)
		}
	}
}

// TestCreateExecStream: with stream the answer is the exec's event stream
// after a first sandbox event; a refused exec ends it with an error event
// that names the sandbox.
func TestCreateExecStream(t *testing.T) {
	h := newCreateExecHarness(t, true)
	r := h.createExec(api.CreateSandbox{}, api.Exec{Args: []string{"sh", "-c", "echo one; echo two >&2"}, Stream: true})
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/x-ndjson") {
		t.Fatalf("stream: %d %v %s", r.status, r.header, r.body)
	}
	evs := events(t, r.body)
	if len(evs) < 3 || evs[0].Type != api.EventSandbox || evs[0].Sandbox == nil || evs[0].Sandbox.ID == "" || evs[0].Seq != 1 {
		t.Fatalf("events: %s", r.body)
	}
	last := evs[len(evs)-1]
	if last.Type != api.EventExit || last.Result == nil || last.Result.ExitCode != 0 {
		t.Fatalf("last event: %+v", last)
	}
	var out, errOut string
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: %s", i, ev.Seq, r.body)
		}
		switch ev.Type {
		case api.EventStdout:
			out += ev.Text
		case api.EventStderr:
			errOut += ev.Text
		}
	}
	if out != "one\n" || errOut != "two\n" {
		t.Fatalf("output %q %q", out, errOut)
	}

	writePolicy(t, h.user, "version = 1\ndeny = [\"Exec(touch *)\"]\n")
	r = h.createExec(api.CreateSandbox{}, api.Exec{Args: []string{"touch", "x"}, Stream: true})
	evs = events(t, r.body)
	if len(evs) != 2 || evs[0].Type != api.EventSandbox || evs[1].Type != api.EventError || evs[1].Error.Code != api.CodePolicyDenied ||
		!strings.Contains(evs[1].Error.Message, evs[0].Sandbox.ID+" was created") {
		t.Fatalf("refused stream: %s", r.body)
	}
}

// TestCreateExecRPC: over the dispatcher (JSON-RPC's path) the answer is
// the sandbox with its exec's outcome, encoded whole.
func TestCreateExecRPC(t *testing.T) {
	h := newCreateExecHarness(t, true)
	in := &input{
		decode: func(v any) error {
			return json.Unmarshal([]byte(`{"exec":{"args":["echo","hi"]}}`), v)
		},
		emit: func(api.Event) error { return nil },
	}
	resp, err := h.svc.call(t.Context(), Caller{Tenant: "a", Actor: "rpc"}, api.OpSandboxCreate, in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(resp)
	releaseAnswer(resp)
	if err != nil {
		t.Fatal(err)
	}
	var sb api.Sandbox
	if err := json.Unmarshal(b, &sb); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if sb.ID == "" || sb.Exec == nil || sb.Exec.Result == nil || sb.Exec.Result.Stdout != "hi\n" {
		t.Fatalf("answer: %s", b)
	}
	if kinds := h.kindsOf("rpc"); !slices.Equal(kinds, []string{"process.exec", "sandbox.create"}) {
		t.Fatalf("audit kinds: %v", kinds)
	}
}

// TestCreateExecLinux: with the Linux runtime the exec is sent with the
// sandbox's setup (sandbox.EarlyCreator) and runs once it is ready, in
// the sandbox as every later call sees it; a command that cannot run is
// a result (127), and the sandbox runs on.
func TestCreateExecLinux(t *testing.T) {
	h := newHarness(t, nil)
	if _, ok := h.svc.cfg.Runtime.(sandbox.EarlyCreator); !ok {
		t.Fatal("the Linux runtime is not a sandbox.EarlyCreator")
	}
	r := h.createExec(api.CreateSandbox{Hostname: "first"}, api.Exec{Args: []string{"sh", "-c", "hostname; echo x > /tmp/mark; id -u"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sb api.Sandbox
	r.decode(t, &sb)
	if sb.Exec == nil || sb.Exec.Result == nil || sb.Exec.Result.ExitCode != 0 || sb.Exec.Result.Stdout != "first\n1000\n" {
		t.Fatalf("exec: %s", r.body)
	}
	var res sandbox.Result
	h.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", tokenA, api.Exec{Args: []string{"cat", "/tmp/mark"}}).decode(t, &res)
	if res.ExitCode != 0 || res.Stdout != "x\n" {
		t.Fatalf("second exec: %+v", res)
	}
	r = h.createExec(api.CreateSandbox{}, api.Exec{Args: []string{"/nonexistent"}})
	r.decode(t, &sb)
	if r.status != http.StatusCreated || sb.Exec == nil || sb.Exec.Result == nil || sb.Exec.Result.ExitCode != sandbox.ExitNotFound {
		t.Fatalf("not found: %d %s", r.status, r.body)
	}
	h.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", tokenA, api.Exec{Args: []string{"true"}}).decode(t, &res)
	if res.ExitCode != 0 {
		t.Fatalf("after a command not found: %+v", res)
	}
}
