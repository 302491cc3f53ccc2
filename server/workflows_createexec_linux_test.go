package server

import (
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/runtime/linux"
	"github.com/moat-sandbox/moat/sandbox"
)

// countedLinux is the real runtime, counted; every other method (and
// optional interface) is the runtime's own.
type countedLinux struct {
	*linux.Runtime
	n *createCounts
}

func (r countedLinux) Create(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	r.n.plain.Add(1)
	return r.Runtime.Create(ctx, spec)
}

func (r countedLinux) CreateEarly(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, func(context.Context) error, error) {
	r.n.early.Add(1)
	return r.Runtime.CreateEarly(ctx, spec)
}

// TestWorkflowEarlyExec: on the real runtime every step's process is sent
// to its sandbox with the setup (the runtime's CreateEarly, never Create):
// a chain from a snapshot with a retry, and a producer's stdout streamed
// into a consumer's stdin while both run. The results are right, and the
// audit has, for each attempt's sandbox, its create and then its exec, as
// for two calls.
func TestWorkflowEarlyExec(t *testing.T) {
	var n createCounts
	layers := withLayers(t)
	h := newHarness(t, func(c *Config) {
		layers(c)
		c.Runtime = countedLinux{Runtime: c.Runtime.(*linux.Runtime), n: &n}
	})
	run := h.createRun(tokenA, wfDoc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - id: a",
		"    sh: mkdir -p /workspace/s && echo from-a > /workspace/s/a",
		"    snapshot: light",
		"  - id: b",
		"    from: a",
		"    retry: {attempts: 2}",
		"    sh: |",
		`      if [ "$MOAT_STEP_ATTEMPT" = 1 ]; then exit 3; fi`,
		"      cat /workspace/s/a",
		"  - group: pipe",
		"    mode: parallel",
		"    steps:",
		"      - id: producer",
		"        sh: for i in 1 2 3; do echo line$i; sleep 0.2; done",
		"      - id: consumer",
		"        stdin_from: producer",
		"        sh: while read l; do echo got $l; done",
	))
	got := h.waitRun(tokenA, run.ID)
	wantSucceeded(t, got)
	b, p, c := stepOf(t, got, "b"), stepOf(t, got, "producer"), stepOf(t, got, "consumer")
	if len(b.Attempts) != 2 || b.Attempts[0].Result == nil || b.Attempts[0].Result.ExitCode != 3 || b.Result == nil || b.Result.Stdout != "from-a\n" {
		t.Errorf("b: %+v", b)
	}
	if c.Result == nil || c.Result.Stdout != "got line1\ngot line2\ngot line3\n" {
		t.Errorf("consumer: %+v", c.Result)
	}
	if p.Result == nil || p.Result.Stdout != "line1\nline2\nline3\n" {
		t.Errorf("producer: %+v", p.Result)
	}
	if c.Started == nil || p.Ended == nil || !c.Started.Before(*p.Ended) {
		t.Errorf("the consumer started at %v, the producer ended at %v: not while both ran", c.Started, p.Ended)
	}
	if early, plain := n.early.Load(), n.plain.Load(); early != 5 || plain != 0 {
		t.Errorf("%d sandboxes made early, %d ready first; want 5 (every attempt's) and 0", early, plain)
	}
	execs := h.stepCalls()
	if len(execs) != 5 {
		t.Errorf("%d sandboxes with an exec, want 5", len(execs))
	}
	for sb, ev := range execs {
		if ev.Decision != audit.DecisionAllow || !strings.Contains(string(ev.Result), `"exit_code":`) {
			t.Errorf("the exec in %s: %+v", sb, ev)
		}
	}
}
