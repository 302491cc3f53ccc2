package workflow

import (
	"reflect"
	"strings"
	"testing"
)

// runningDoc is a plan with a concurrent group steps are added to.
var runningDoc = doc(
	"defaults: {limits: {memory: 128m}, env: {A: '1'}}",
	"steps:",
	"  - id: prep",
	"    sh: x",
	"    outputs: [/o]",
	"  - id: quiet",
	"    sh: x",
	"    snapshot: none",
	"  - group: work",
	"    mode: concurrent",
	"    budget: {memory: 1g, cpus: 2}",
	"    steps:",
	"      - {id: w1, sh: x}",
	"  - id: report",
	"    sh: x",
	"  - group: seq",
	"    steps: [{id: s1, sh: x}]",
)

func TestAddStep(t *testing.T) {
	p := mustCompile(t, runningDoc)
	if got := p.Step("report").Waits; !reflect.DeepEqual(got, []string{"w1"}) {
		t.Fatalf("report waits %q", got)
	}
	s, err := p.AddStep("work", []byte(`{"id": "w2", "sh": "y", "needs": ["w1"], "from": "prep", "inputs": {"prep": "/in"}, "priority": "critical"}`))
	if err != nil {
		t.Fatal(err)
	}
	if s != p.Steps[len(p.Steps)-1] || p.Step("w2") != s {
		t.Errorf("the step is not appended to the plan")
	}
	want := PlanStep{
		Step: Step{ID: "w2", Kind: KindRun, Args: []string{"/bin/sh", "-c", "y"}, Sh: "y",
			Needs: []string{"w1"}, From: "prep", Inputs: map[string]string{"prep": "/in"},
			Env: []string{"A=1"}, Retry: Retry{Attempts: 1, From: FromSnapshot},
			Snapshot: SnapshotLight, Priority: Critical, Line: 1},
		Group:  "work",
		Groups: []string{"work"},
		Waits:  []string{"quiet", "w1"},
	}
	want.Limits.MemoryBytes = 128 << 20
	if !reflect.DeepEqual(*s, want) {
		t.Errorf("added:\n%+v\nwant\n%+v", *s, want)
	}
	// What waits for the group waits for the new step too.
	if got := p.Step("report").Waits; !reflect.DeepEqual(got, []string{"w1", "w2"}) {
		t.Errorf("report waits %q, want w1 w2", got)
	}
	if got := p.Step("s1").Waits; !reflect.DeepEqual(got, []string{"report"}) {
		t.Errorf("s1 waits %q", got)
	}

	// YAML, and a stream between two added steps.
	if _, err := p.AddStep("work", []byte("id: w3\nsh: z\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AddStep("work", []byte("id: w4\nsh: z\nstdin_from: w3\n")); err != nil {
		t.Fatal(err)
	}
	// Added steps come after the document's, in the order added.
	if got := strings.Join(p.Downstream("w3"), ","); got != "report,s1,w4" {
		t.Errorf("downstream of w3: %s", got)
	}
}

func TestAddStepRejects(t *testing.T) {
	for _, tc := range []struct {
		name, group, step string
		want              []wantErr
	}{
		{"unknown group", "nope", `{id: x, sh: x}`, []wantErr{{0, "group", `no group "nope"`}}},
		{"sequential group", "seq", `{id: x, sh: x}`, []wantErr{{0, "group", `group "seq" is sequential`}}},
		{"syntax", "work", "id: [x", []wantErr{{1, "", "did not find expected"}}},
		{"not a mapping", "work", "[x]", []wantErr{{1, "", "want a step"}}},
		{"a group", "work", "group: g\nsteps: [{id: x, sh: x}]", []wantErr{{1, "group", "a group cannot be added"}}},
		{"no id", "work", "sh: x", []wantErr{{1, "id", "missing"}}},
		{"bad id", "work", "id: X\nsh: x", []wantErr{{1, "id", "not a valid id"}}},
		{"duplicate ids", "work", "id: w1\nsh: x", []wantErr{{1, "id", `"w1" is already the id`}}},
		{"group id", "work", "id: seq\nsh: x", []wantErr{{1, "id", `"seq" is already the id`}}},
		{"unknown field", "work", "id: x\nsh: x\nmode: parallel", []wantErr{{3, "mode", "unknown field"}}},
		{"no command", "work", "id: x", []wantErr{{1, "run", "needs run"}}},
		{"unknown needs", "work", "id: x\nsh: x\nneeds: [nope]", []wantErr{{3, "needs", `no step or group "nope"`}}},
		{"needs its group", "work", "id: x\nsh: x\nneeds: work", []wantErr{{3, "needs", `group "work" holds step "x"`}}},
		{"from a later step", "work", "id: x\nsh: x\nfrom: report", []wantErr{{3, "from", `step "report" is not an ancestor of "x"`}}},
		{"from no snapshot", "work", "id: x\nsh: x\nfrom: quiet", []wantErr{{3, "from", `step "quiet" keeps no snapshot`}}},
		{"inputs without outputs", "work", "id: x\nsh: x\nneeds: w1\ninputs: {w1: /in}", []wantErr{{4, "inputs.w1", `step "w1" has no outputs`}}},
		{"stdin from a step it waits for", "work", "id: x\nsh: x\nneeds: w1\nstdin_from: w1", []wantErr{{4, "stdin_from", `"x" waits for "w1"`}}},
		{"stdin from outside the group", "work", "id: x\nsh: x\nstdin_from: prep", []wantErr{{3, "stdin_from", `step "prep" is not in group "work" with "x"`}}},
		{"above the budget", "work", "id: x\nsh: x\nlimits: {memory: 2g, cpus: 3}", []wantErr{
			{3, "limits.memory", `2GiB is above the budget of group "work" (1GiB)`},
			{3, "limits.cpus", `3 is above the budget of group "work" (2)`},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, runningDoc)
			before := len(p.Steps)
			s, err := p.AddStep(tc.group, []byte(tc.step))
			if err == nil {
				t.Fatalf("AddStep accepted %+v", s)
			}
			got := errorsOf(t, err)
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					if g.Line == w.line && g.Field == w.field && strings.Contains(g.Msg, w.msg) {
						found = true
					}
				}
				if !found {
					t.Errorf("missing error line %d: %s: ...%s... in:\n%v", w.line, w.field, w.msg, err)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %d errors, want %d:\n%v", len(got), len(tc.want), err)
			}
			if len(p.Steps) != before || !reflect.DeepEqual(p.Step("report").Waits, []string{"w1"}) {
				t.Errorf("a refused step changed the plan")
			}
		})
	}
}

func TestAddStepNestedBudget(t *testing.T) {
	p := mustCompile(t, doc(
		"steps:",
		"  - group: outer",
		"    mode: parallel",
		"    budget: {pids: 100}",
		"    steps:",
		"      - group: inner",
		"        mode: concurrent",
		"        needs: [a]",
		"        steps: [{id: b, sh: x}]",
		"      - {id: a, sh: x}",
	))
	_, err := p.AddStep("inner", []byte("id: c\nsh: x\nlimits: {pids: 101}"))
	if errs := errorsOf(t, err); len(errs) != 1 || !strings.Contains(errs[0].Msg, `above the budget of group "outer"`) {
		t.Fatalf("got %v", err)
	}
	s, err := p.AddStep("inner", []byte("id: c\nsh: x\nlimits: {pids: 100}"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Groups, []string{"inner", "outer"}) || !reflect.DeepEqual(s.Waits, []string{"a"}) {
		t.Errorf("groups %q waits %q", s.Groups, s.Waits)
	}
}
