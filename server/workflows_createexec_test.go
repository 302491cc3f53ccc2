package server

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/sandbox/sandboxtest"
)

// createCounts counts the sandboxes a runtime handed out before their
// setup had finished, their first exec queued behind it (CreateEarly),
// and those it made ready first (Create).
type createCounts struct{ early, plain atomic.Int32 }

// countedFake is the fake runtime as an EarlyCreator, counted.
type countedFake struct {
	sandboxtest.EarlyRuntime
	n *createCounts
}

func (r countedFake) Create(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	r.n.plain.Add(1)
	return r.EarlyRuntime.Create(ctx, spec)
}

func (r countedFake) CreateEarly(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, func(context.Context) error, error) {
	r.n.early.Add(1)
	return r.EarlyRuntime.CreateEarly(ctx, spec)
}

// stepCalls checks that every sandbox of tenant a's audit has one
// sandbox.create, allowed, then one process.exec (its first call, when it
// ran), and returns the exec of each sandbox.
func (h *harness) stepCalls() map[string]api.AuditEvent {
	h.t.Helper()
	kinds := map[string][]string{}
	execs := map[string]api.AuditEvent{}
	for _, ev := range h.callEvents() {
		kinds[ev.Sandbox] = append(kinds[ev.Sandbox], ev.Kind)
		switch ev.Kind {
		case api.OpSandboxCreate:
			if ev.Decision != audit.DecisionAllow || ev.Error != "" || strings.Contains(string(ev.Request), `"exec"`) {
				h.t.Errorf("the create of %s: %+v", ev.Sandbox, ev)
			}
		case api.OpExec:
			if ev.Decision == audit.DecisionAllow && ev.Call != ev.Sandbox+"/c1" {
				h.t.Errorf("the exec in %s is call %q, not its first", ev.Sandbox, ev.Call)
			}
			execs[ev.Sandbox] = ev
		}
	}
	for sb, k := range kinds {
		if strings.Join(k, " ") != "sandbox.create process.exec" {
			h.t.Errorf("sandbox %s: audit %v, want a create then an exec", sb, k)
		}
	}
	return execs
}

// TestWorkflowCreateExecPaths, on the fake runtime made an EarlyCreator: a
// step whose command the policy allows outright starts with its sandbox,
// its stdout streamed into a consumer that also does; a step the policy
// denies is created first and then refused, as a process.exec in a
// running sandbox is. Each attempt's sandbox has its create and then its
// exec in the audit.
func TestWorkflowCreateExecPaths(t *testing.T) {
	var n createCounts
	h := newFakeHarness(t, func(c *Config) {
		c.Runtime = countedFake{EarlyRuntime: sandboxtest.EarlyRuntime{Runtime: sandboxtest.New()}, n: &n}
	})
	writePolicy(t, h.user, "version = 1\ndeny = [\"Exec(touch *)\"]\n")
	run := h.createRun(tokenA, wfDoc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - group: pipe",
		"    mode: parallel",
		"    steps:",
		"      - id: producer",
		"        sh: echo one; echo two",
		"      - id: consumer",
		"        stdin_from: producer",
		"        sh: while read l; do echo got $l; done",
		"  - id: denied",
		"    run: [touch, /workspace/marker]",
	))
	got := h.waitRun(tokenA, run.ID)
	if got.State != api.RunFailed {
		t.Fatalf("run %s, want failed: %+v", got.State, got)
	}
	if c := stepOf(t, got, "consumer"); c.Result == nil || c.Result.Stdout != "got one\ngot two\n" {
		t.Errorf("consumer: %+v", c.Result)
	}
	d := stepOf(t, got, "denied")
	if d.State != api.StepFailed || len(d.Attempts) != 1 || d.Attempts[0].Sandbox == "" || !strings.Contains(d.Error, "deny Exec(touch *)") {
		t.Errorf("denied: %+v", d)
	}
	if early, plain := n.early.Load(), n.plain.Load(); early != 2 || plain != 1 {
		t.Errorf("%d sandboxes made early, %d ready first; want 2 and 1", early, plain)
	}
	execs := h.stepCalls()
	if len(execs) != 3 {
		t.Errorf("%d sandboxes with an exec, want 3", len(execs))
	}
	if ev := execs[d.Attempts[0].Sandbox]; ev.Decision != audit.DecisionDeny || !strings.Contains(ev.Rule, "touch") {
		t.Errorf("the denied step's exec: %+v", ev)
	}
}
