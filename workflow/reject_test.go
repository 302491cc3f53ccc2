package workflow

import (
	"fmt"
	"strings"
	"testing"
)

// wantErr is an error a document must produce: its line, its field and a
// part of its message.
type wantErr struct {
	line  int
	field string
	msg   string
}

// rejectCases are invalid documents, each with every error it must
// produce (and no other).
var rejectCases = []struct {
	name string
	doc  []byte
	cpus int
	want []wantErr
}{
	// Syntax and shape.
	{"syntax", doc(
		"steps:",
		"  - id: a",
		"    run: [x",
		"  - id: b",
	), 0, []wantErr{{3, "", "did not find expected ',' or ']'"}}},
	{"syntax at the end", doc(
		"steps: [",
	), 0, []wantErr{{1, "", "did not find expected node content"}}},
	// yaml.v3 names the line where the list or mapping in error starts.
	{"bad indentation", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"   run: [y]",
	), 0, []wantErr{{2, "", "did not find expected '-' indicator"}}},
	{"scanner error", doc(
		"steps:",
		"  - id: a",
		"    sh: @x",
	), 0, []wantErr{{3, "", "found character that cannot start any token"}}},
	{"empty", doc("# nothing"), 0, []wantErr{{0, "", "empty document"}}},
	{"two documents", doc(
		"steps: [{id: a, sh: x}]",
		"---",
		"steps: [{id: b, sh: x}]",
	), 0, []wantErr{{2, "", "more than one document"}}},
	{"not a mapping", doc("- id: a"), 0, []wantErr{{1, "", "want a mapping"}}},
	{"missing steps", doc("name: x"), 0, []wantErr{{1, "steps", "missing"}}},
	{"empty steps", doc("steps: []"), 0, []wantErr{{1, "steps", "empty"}}},
	{"steps not a list", doc("steps: {id: a}"), 0, []wantErr{{1, "steps", "want a list"}}},
	{"item neither step nor group", doc(
		"steps:",
		"  - sh: x",
	), 0, []wantErr{{2, "steps", "want a step"}}},
	{"item both step and group", doc(
		"steps:",
		"  - id: a",
		"    group: b",
	), 0, []wantErr{{2, "steps", "has both id"}}},
	{"alias", doc(
		"defaults: {template: &t host}",
		"steps:",
		"  - id: a",
		"    sh: x",
		"    template: *t",
	), 0, []wantErr{{5, "template", "aliases are not supported"}}},
	{"merge key", doc(
		"steps:",
		"  - id: a",
		"    <<: {sh: x}",
	), 0, []wantErr{{2, "run", "needs run"}, {3, "", "merge keys"}}},
	{"duplicate key", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    sh: y",
	), 0, []wantErr{{4, "sh", "given twice"}}},

	// Unknown fields.
	{"unknown top-level field", doc(
		"name: x",
		"version: 2",
		"steps: [{id: a, sh: x}]",
	), 0, []wantErr{{2, "version", "unknown field"}}},
	{"unknown step field", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    mode: parallel",
	), 0, []wantErr{{4, "mode", "unknown field"}}},
	{"unknown group field", doc(
		"steps:",
		"  - group: g",
		"    timeout: 1s",
		"    steps: [{id: a, sh: x}]",
	), 0, []wantErr{{3, "timeout", "unknown field"}}},
	{"unknown nested fields", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    limits: {memory: 1g, swap: 1g}",
		"    retry:",
		"      times: 3",
		"    policy: {allow: [x], prompt: [y]}",
		"    network: {mode: proxy, dropped: []}",
	), 0, []wantErr{
		{4, "limits.swap", "unknown field"},
		{6, "retry.times", "unknown field"},
		{7, "policy.prompt", "unknown field"},
		{8, "network.dropped", "unknown field"},
	}},
	{"defaults take no step-only fields", doc(
		"defaults:",
		"  needs: [a]",
		"  outputs: [/x]",
		"  colour: red",
		"steps: [{id: a, sh: x}]",
	), 0, []wantErr{
		{2, "defaults.needs", "cannot have a default"},
		{3, "defaults.outputs", "cannot have a default"},
		{4, "defaults.colour", "unknown field"},
	}},

	// Wrong types.
	{"wrong types", doc(
		"name: 5",
		"steps:",
		"  - id: a",
		"    run: make test",
		"    timeout: [1]",
		"    limits: {cpus: two, pids: 1.5, memory: true}",
		"    env: [A]",
		"    needs: {b: 1}",
		"    outputs: /x",
		"  - id: b",
		"    sh: [x]",
		"    env: {A: {b: c}, B: null}",
		"    snapshot: 1",
	), 0, []wantErr{
		{1, "name", "want a string"},
		{4, "run", "want a list of arguments"},
		{5, "timeout", "want a duration"},
		{6, "limits.cpus", "want a number"},
		{6, "limits.pids", "want a whole number"},
		{6, "limits.memory", "want a size"},
		{7, "env", "want a mapping"},
		{8, "needs", "want an id or a list of ids"},
		{9, "outputs", "want a list of absolute paths"},
		{11, "sh", "want a string"},
		{12, "env.A", "want a string"},
		{12, "env.B", "want a string"},
		{13, "snapshot", "want a string"},
	}},
	{"group wrong types", doc(
		"steps:",
		"  - group: g",
		"    mode: parallel",
		"    max_parallel: two",
		"    budget: 2",
		"    steps: [{id: a, sh: x}]",
	), 0, []wantErr{
		{4, "max_parallel", "want a whole number"},
		{5, "budget", "want a mapping"},
	}},

	// Commands.
	{"neither run nor sh", doc(
		"steps:",
		"  - id: a",
		"    template: host",
	), 0, []wantErr{{2, "run", "needs run (a list of arguments) or sh"}}},
	{"both run and sh", doc(
		"steps:",
		"  - id: a",
		"    run: [make]",
		"    sh: make",
	), 0, []wantErr{{4, "sh", "give run or sh, not both"}}},
	{"both run and sh in defaults", doc(
		"defaults: {run: [make], sh: make}",
		"steps: [{id: a}]",
	), 0, []wantErr{{1, "defaults.sh", "not both"}}},
	{"empty run and sh", doc(
		"steps:",
		"  - id: a",
		"    run: []",
		"  - id: b",
		"    run: ['', x]",
		"  - id: c",
		"    sh: '  '",
	), 0, []wantErr{
		{3, "run", "empty"},
		{5, "run", "the program (first argument) is empty"},
		{7, "sh", "empty command"},
	}},

	// Ids.
	{"duplicate ids", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"  - group: a",
		"    mode: parallel",
		"    steps:",
		"      - id: b",
		"        sh: x",
		"      - id: b",
		"        sh: y",
	), 0, []wantErr{
		{4, "group", `"a" is already the id of the item at line 2`},
		{9, "id", `"b" is already the id of the item at line 7`},
	}},
	{"bad ids", doc(
		"steps:",
		"  - id: Build",
		"    sh: x",
		"  - id: -x",
		"    sh: x",
		"  - id: a.b",
		"    sh: x",
		"  - id: "+strings.Repeat("a", 64),
		"    sh: x",
		"  - id: 7",
		"    sh: x",
	), 0, []wantErr{
		{2, "id", `"Build" is not a valid id`},
		{4, "id", `"-x" is not a valid id`},
		{6, "id", `"a.b" is not a valid id`},
		{8, "id", "is not a valid id"},
		{10, "id", "want a string"},
	}},

	// References.
	{"unknown ids", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    outputs: [/o]",
		"  - group: g",
		"    mode: parallel",
		"    needs: [nope0]",
		"    steps:",
		"      - id: b",
		"        sh: x",
		"        needs: [a, nope1]",
		"        from: nope2",
		"        inputs: {nope3: /in}",
		"        stdin_from: nope4",
	), 0, []wantErr{
		{7, "needs", `no step or group "nope0"`},
		{11, "needs", `no step or group "nope1"`},
		{12, "from", `no step "nope2"`},
		{13, "inputs.nope3", `no step "nope3"`},
		{14, "stdin_from", `no step "nope4"`},
	}},
	{"names itself", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    needs: a",
		"    from: a",
		"    outputs: [/o]",
		"    inputs: {a: /in}",
		"    stdin_from: a",
	), 0, []wantErr{
		{4, "needs", `step "a" names itself`},
		{5, "from", `step "a" names itself`},
		{7, "inputs.a", `step "a" names itself`},
		{8, "stdin_from", `step "a" names itself`},
	}},
	{"groups named where a step must be", doc(
		"steps:",
		"  - group: g",
		"    steps: [{id: a, sh: x, outputs: [/o]}]",
		"  - id: b",
		"    sh: x",
		"    from: g",
		"    inputs: {g: /in}",
	), 0, []wantErr{
		{6, "from", `"g" is a group: name a step`},
		{7, "inputs.g", `"g" is a group: name a step`},
	}},
	{"needs its own group", doc(
		"steps:",
		"  - group: outer",
		"    mode: parallel",
		"    steps:",
		"      - group: inner",
		"        needs: [outer, x]",
		"        steps:",
		"          - id: x",
		"            sh: x",
		"            needs: [outer, inner]",
		"      - id: y",
		"        sh: y",
		"  - group: self",
		"    needs: self",
		"    steps: [{id: z, sh: z}]",
		"  - group: holds",
		"    needs: [inside]",
		"    steps:",
		"      - group: inside",
		"        steps: [{id: w, sh: w}]",
	), 0, []wantErr{
		{6, "needs", `group "outer" holds group "inner"`},
		{6, "needs", `step "x" is inside group "inner"`},
		{10, "needs", `group "outer" holds step "x"`},
		{10, "needs", `group "inner" holds step "x"`},
		{14, "needs", `group "self" needs itself`},
		{17, "needs", `group "inside" is inside group "holds"`},
	}},

	// Cycles.
	{"cycle in a parallel group", doc(
		"steps:",
		"  - group: g",
		"    mode: parallel",
		"    steps:",
		"      - id: a",
		"        sh: x",
		"        needs: [c]",
		"      - id: b",
		"        sh: x",
		"        needs: [a]",
		"      - id: c",
		"        sh: x",
		"        needs: [b]",
	), 0, []wantErr{{5, "needs", "cycle: a -> c -> b -> a"}}},
	{"cycle against the sequential order", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    needs: [b]",
		"  - id: b",
		"    sh: x",
	), 0, []wantErr{{2, "needs", "cycle: a -> b -> a"}}},
	{"cycle through groups", doc(
		"steps:",
		"  - group: g",
		"    mode: parallel",
		"    steps:",
		"      - group: p",
		"        mode: parallel",
		"        needs: [q]",
		"        steps: [{id: a, sh: x}]",
		"      - group: q",
		"        mode: parallel",
		"        needs: [p]",
		"        steps: [{id: b, sh: x}]",
	), 0, []wantErr{{8, "needs", "cycle: a -> b -> a"}}},

	// from.
	{"from not an ancestor", doc(
		"steps:",
		"  - group: g",
		"    mode: parallel",
		"    steps:",
		"      - id: b",
		"        sh: x",
		"      - id: c",
		"        sh: x",
		"        from: b",
	), 0, []wantErr{{9, "from", `step "b" is not an ancestor of "c" (c does not wait for it)`}}},
	{"from a later step", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    from: b",
		"  - id: b",
		"    sh: x",
	), 0, []wantErr{{4, "from", `step "b" is not an ancestor of "a"`}}},
	{"from a step without a snapshot", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    snapshot: none",
		"  - id: b",
		"    sh: x",
		"    from: a",
	), 0, []wantErr{{7, "from", `step "a" keeps no snapshot (snapshot: none)`}}},
	{"from a step without a snapshot by default", doc(
		"defaults: {snapshot: none}",
		"steps:",
		"  - id: a",
		"    sh: x",
		"  - id: b",
		"    sh: x",
		"    from: a",
	), 0, []wantErr{{7, "from", "keeps no snapshot"}}},

	// inputs.
	{"inputs from a non-ancestor", doc(
		"steps:",
		"  - group: g",
		"    mode: parallel",
		"    steps:",
		"      - id: a",
		"        sh: x",
		"        outputs: [/o]",
		"      - id: b",
		"        sh: x",
		"        inputs: {a: /in}",
	), 0, []wantErr{{10, "inputs.a", `step "a" is not an ancestor of "b"`}}},
	{"inputs from a step without outputs", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"  - id: b",
		"    sh: x",
		"    inputs: {a: /in}",
	), 0, []wantErr{{6, "inputs.a", `step "a" has no outputs`}}},

	// stdin_from.
	{"stdin_from in a sequential chain", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"  - id: b",
		"    sh: x",
		"    stdin_from: a",
	), 0, []wantErr{{6, "stdin_from", `step "b" is not in a parallel or concurrent group`}}},
	{"stdin_from another group", doc(
		"steps:",
		"  - group: g",
		"    mode: parallel",
		"    steps:",
		"      - id: a",
		"        sh: x",
		"      - group: h",
		"        mode: parallel",
		"        steps:",
		"          - id: b",
		"            sh: x",
		"            stdin_from: a",
	), 0, []wantErr{{12, "stdin_from", `step "a" is not in group "h" with "b"`}}},
	{"stdin_from a step it waits for", doc(
		"steps:",
		"  - group: g",
		"    mode: concurrent",
		"    steps:",
		"      - id: a",
		"        sh: x",
		"      - id: b",
		"        sh: x",
		"        needs: [a]",
		"        stdin_from: a",
		"      - id: c",
		"        sh: x",
		"        needs: [d]",
		"      - id: d",
		"        sh: x",
		"        stdin_from: c",
	), 0, []wantErr{
		{10, "stdin_from", `"b" waits for "a": they never run together`},
		{16, "stdin_from", `"c" waits for "d": they never run together`},
	}},

	// Paths.
	{"bad outputs", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    outputs:",
		"      - out",
		"      - /a/../b",
		"      - /a/",
		"      - /proc/self",
		"      - /dev",
		"      - /sys/fs",
		"      - /",
		"      - /w",
		"      - /w/x",
		"      - /w",
	), 0, []wantErr{
		{5, "outputs", `"out" is not an absolute path`},
		{6, "outputs", `"/a/../b" is not a clean path (write /b)`},
		{7, "outputs", "is not a clean path"},
		{8, "outputs", "/proc/self is under /proc"},
		{9, "outputs", "/dev is under /dev"},
		{10, "outputs", "/sys/fs is under /sys"},
		{11, "outputs", "must not be /"},
		{13, "outputs", "/w/x overlaps /w"},
		{14, "outputs", "/w overlaps /w"},
	}},
	{"bad input paths", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    outputs: [/o]",
		"  - id: b",
		"    sh: x",
		"    outputs: [/o]",
		"  - id: c",
		"    sh: x",
		"    inputs:",
		"      a: in",
		"      b: /",
		"  - id: d",
		"    sh: x",
		"    inputs:",
		"      a: /dev/shm/x",
		"      b: /in/./x",
		"  - id: e",
		"    sh: x",
		"    inputs: {a: /in, b: /in}",
	), 0, []wantErr{
		{11, "inputs.a", `"in" is not an absolute path`},
		{12, "inputs.b", "must not be /"},
		{16, "inputs.a", "is under /dev"},
		{17, "inputs.b", "is not a clean path"},
		{20, "inputs.b", `/in is already the path of "a"`},
	}},

	// Values.
	{"bad values", doc(
		"steps:",
		"  - group: g",
		"    mode: serial",
		"    steps:",
		"      - id: a",
		"        sh: x",
		"        priority: urgent",
		"        snapshot: heavy",
		"        retry: {from: start}",
		"        network: {mode: host}",
		"        policy: {profile: trusted}",
		"        env: {MOAT_STEP_ID: x, 'A=B': y}",
	), 0, []wantErr{
		{3, "mode", `"serial" is not a mode`},
		{7, "priority", `"urgent" is not a priority (critical, normal, background)`},
		{8, "snapshot", `"heavy" is not a snapshot kind`},
		{9, "retry.from", `"start" is not a retry source`},
		{10, "network.mode", `"host" is not a network mode`},
		{11, "policy.profile", `"trusted" is not a profile`},
		{12, "env", `"A=B" is not a variable name`},
		{12, "env.MOAT_STEP_ID", "set by the workflow engine"},
	}},
	{"bad retry", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    retry: {attempts: 0, backoff: -1s}",
		"  - id: b",
		"    sh: x",
		"    retry: {attempts: 101, backoff: 2m}",
	), 0, []wantErr{
		{4, "retry.attempts", "must be between 1 and 100"},
		{4, "retry.backoff", "must not be negative"},
		{7, "retry.attempts", "must be between 1 and 100"},
		{7, "retry.backoff", "2m0s is more than the longest wait between attempts (1m0s)"},
	}},
	{"negative and bad sizes and durations", doc(
		"defaults:",
		"  timeout: -1s",
		"steps:",
		"  - id: a",
		"    sh: x",
		"    timeout: -5",
		"    limits:",
		"      memory: -1",
		"      disk: -5m",
		"      pids: -1",
		"      cpus: -1",
		"  - id: b",
		"    sh: x",
		"    timeout: soon",
		"    limits: {memory: lots, disk: 1e308p, cpus: .nan}",
		"  - id: c",
		"    sh: x",
		"    timeout: 25h",
	), 0, []wantErr{
		{2, "defaults.timeout", "must not be negative"},
		{6, "timeout", "must not be negative"},
		{8, "limits.memory", "must not be negative"},
		{9, "limits.disk", "must not be negative"},
		{10, "limits.pids", "must not be negative"},
		{11, "limits.cpus", "must not be negative"},
		{14, "timeout", `"soon" is not a duration`},
		{15, "limits.memory", `"lots" is not a size`},
		{15, "limits.disk", "too large"},
		{15, "limits.cpus", "want a number"},
		{18, "timeout", "25h0m0s is more than the most a step may take (24h0m0s)"},
	}},

	// Groups and budgets.
	{"empty groups", doc(
		"steps:",
		"  - group: g",
		"    mode: parallel",
		"    steps: []",
		"  - group: h",
		"    mode: parallel",
	), 0, []wantErr{
		{4, "steps", "empty"},
		{5, "steps", "missing: a group needs at least one step"},
	}},
	{"max_parallel and budget on a sequential group", doc(
		"steps:",
		"  - group: g",
		"    max_parallel: 2",
		"    budget: {cpus: 1}",
		"    steps: [{id: a, sh: x}]",
		"  - group: h",
		"    mode: sequential",
		"    max_parallel: 2",
		"    steps: [{id: b, sh: x}]",
	), 0, []wantErr{
		{3, "max_parallel", "only parallel and concurrent groups take it"},
		{4, "budget", "only parallel and concurrent groups take it"},
		{8, "max_parallel", "only parallel and concurrent groups take it"},
	}},
	{"budget fields must be above 0", doc(
		"steps:",
		"  - group: g",
		"    mode: parallel",
		"    max_parallel: -1",
		"    budget:",
		"      cpus: 0",
		"      memory: 0",
		"      pids: -3",
		"    steps: [{id: a, sh: x}]",
	), 0, []wantErr{
		{4, "max_parallel", "must be between 0 and"},
		{6, "budget.cpus", "must be more than 0"},
		{7, "budget.memory", "must be more than 0"},
		{8, "budget.pids", "must be more than 0"},
	}},
	{"budget above the host", doc(
		"steps:",
		"  - group: g",
		"    mode: parallel",
		"    budget: {cpus: 8}",
		"    steps: [{id: a, sh: x}]",
	), 2, []wantErr{{4, "budget.cpus", "8 is more than this host's 2 CPUs"}}},
	{"limits above the budget", doc(
		"defaults:",
		"  limits: {memory: 2g}",
		"steps:",
		"  - group: g",
		"    mode: concurrent",
		"    budget: {cpus: 1, memory: 1g, pids: 100}",
		"    steps:",
		"      - id: a",
		"        sh: x",
		"        limits: {cpus: 1.5, pids: 200}",
		"      - id: b",
		"        sh: x",
		"        limits: {memory: 1g}",
	), 0, []wantErr{
		{8, "limits.memory", `2GiB (from defaults) is above the budget of group "g" (1GiB)`},
		{10, "limits.cpus", `1.5 is above the budget of group "g" (1)`},
		{10, "limits.pids", `200 is above the budget of group "g" (100)`},
	}},
	{"nested budgets", doc(
		"steps:",
		"  - group: outer",
		"    mode: parallel",
		"    budget: {cpus: 2, memory: 1g}",
		"    steps:",
		"      - group: mid",
		"        steps:",
		"          - group: inner",
		"            mode: parallel",
		"            budget: {cpus: 3, memory: 512m, pids: 10}",
		"            steps:",
		"              - id: a",
		"                sh: x",
		"                limits: {cpus: 2.5}",
	), 0, []wantErr{
		{10, "budget.cpus", `3 is above the budget of group "outer" (2)`},
		{14, "limits.cpus", `2.5 is above the budget of group "outer" (2)`},
	}},

	// Order: errors come sorted by line whatever finds them.
	{"sorted", doc(
		"steps:",
		"  - id: a",
		"    sh: x",
		"    needs: [b]",
		"  - id: b",
		"    sh: x",
		"    colour: red",
	), 0, []wantErr{
		{2, "needs", "cycle: a -> b -> a"},
		{7, "colour", "unknown field"},
	}},
}

func TestCompileRejects(t *testing.T) {
	for _, tc := range rejectCases {
		t.Run(tc.name, func(t *testing.T) { checkReject(t, tc.doc, tc.cpus, tc.want) })
	}
}

// checkReject compiles doc on a host of cpus CPUs and checks that it
// fails with every error of want, and no other, sorted by line.
func checkReject(t *testing.T, doc []byte, cpus int, want []wantErr) {
	t.Helper()
	p, err := Compile(doc, Options{CPUs: cpus})
	if err == nil {
		t.Fatalf("Compile accepted the document: %+v", p)
	}
	if p != nil {
		t.Errorf("Compile returned a plan with its error")
	}
	got := errorsOf(t, err)
	for _, w := range want {
		found := false
		for _, g := range got {
			if g.Line == w.line && g.Field == w.field && strings.Contains(g.Msg, w.msg) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("missing error line %d: %s: ...%s... in:\n%v", w.line, w.field, w.msg, err)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Line < got[i-1].Line {
			t.Errorf("errors not sorted by line:\n%v", err)
		}
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{Line: 3, Field: "from", Msg: "m"}, "line 3: from: m"},
		{Error{Line: 3, Msg: "m"}, "line 3: m"},
		{Error{Field: "group", Msg: "m"}, "group: m"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.e, got, tc.want)
		}
	}
}

func TestTooManyErrors(t *testing.T) {
	var lines []string
	lines = append(lines, "steps:")
	for i := range maxErrors + 5 {
		lines = append(lines, fmt.Sprintf("  - {id: s%d, sh: x, bogus: 1}", i))
	}
	_, err := Compile(doc(lines...), Options{})
	got := errorsOf(t, err)
	if len(got) != maxErrors+1 || got[maxErrors].Msg != "5 more errors" {
		t.Fatalf("got %d errors, last %v", len(got), got[len(got)-1])
	}
}
