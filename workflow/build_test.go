package workflow

import (
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
)

func TestCompileBuild(t *testing.T) {
	data := doc(
		"defaults:",
		"  template: alpine",
		"  timeout: 1s",
		"  env: {A: b}",
		"  sh: echo default",
		"  retry: {attempts: 3}",
		"  priority: critical",
		"steps:",
		"  - id: fetch",
		"    outputs: [/out/src]",
		"  - id: compile",
		"    needs: [fetch]",
		"    build:",
		"      source: fetch:/out/src",
		"      command: [make, hello]",
		"      outputs: [hello, dist/lib]",
		"      template: host",
		"      timeout: 5m",
		"      env: {CFLAGS: -O2, SOURCE_DATE_EPOCH: 0}",
		"      memory: 512m",
		"      cpus: 1.5",
		"      pids: 64",
		"      disk: 1g",
		"      net: proxy",
		"      allow_domains: [proxy.golang.org]",
		"      max_files: 1000",
		"      max_file_bytes: 1m",
		"      max_total_bytes: 10m",
		"    retry: {attempts: 2}",
		"  - id: shell",
		"    build: {source: compile, sh: make all, outputs: [a.out]}",
		"  - id: test",
		"    inputs: {compile: /in, shell: /in2}",
		"    run: [/in/src/hello]",
	)
	p := mustCompile(t, data)
	c := p.Step("compile")
	want := api.CreateBuild{
		Template:      "host",
		Command:       []string{"make", "hello"},
		Outputs:       []string{"hello", "dist/lib"},
		Env:           []string{"CFLAGS=-O2", "SOURCE_DATE_EPOCH=0"},
		TimeoutMs:     (5 * time.Minute).Milliseconds(),
		MemoryBytes:   512 << 20,
		CPUs:          1.5,
		Pids:          64,
		DiskBytes:     1 << 30,
		Net:           "proxy",
		AllowDomains:  []string{"proxy.golang.org"},
		MaxFiles:      1000,
		MaxFileBytes:  1 << 20,
		MaxTotalBytes: 10 << 20,
	}
	switch {
	case c.Kind != KindBuild || c.Build == nil:
		t.Fatalf("compile: kind %q, build %+v", c.Kind, c.Build)
	case c.Build.Source != "fetch" || c.Build.SourcePath != "/out/src":
		t.Errorf("source %q path %q", c.Build.Source, c.Build.SourcePath)
	case !reflect.DeepEqual(c.Build.Settings, want):
		t.Errorf("settings %+v\nwant %+v", c.Build.Settings, want)
	}
	// The plan's view of the step repeats the build's settings; the
	// defaults give only retry and priority.
	if c.Snapshot != SnapshotNone || c.Template != "host" || c.Timeout != 5*time.Minute ||
		!reflect.DeepEqual(c.Outputs, []string{"/src/hello", "/src/dist/lib"}) ||
		!reflect.DeepEqual(c.Env, want.Env) || c.Limits.MemoryBytes != 512<<20 ||
		c.Retry.Attempts != 2 || c.Priority != Critical || c.Policy != nil || c.Network != nil {
		t.Errorf("compile step %+v", c.Step)
	}
	s := p.Step("shell")
	if s.Kind != KindBuild || s.Build.Source != "compile" || s.Build.SourcePath != "" ||
		!reflect.DeepEqual(s.Build.Settings.Command, []string{"/bin/sh", "-c", "make all"}) ||
		s.Build.Settings.Template != "" || s.Build.Settings.Env != nil || s.Timeout != 0 || s.Retry.Attempts != 3 {
		t.Errorf("shell step %+v, build %+v", s.Step, s.Build)
	}
	if f := p.Step("fetch"); f.Kind != KindRun || f.Build != nil {
		t.Errorf("fetch %+v", f.Step)
	}
	if got := waitsOf(p); got["compile"] != "fetch" || got["shell"] != "compile" || got["test"] != "shell" {
		t.Errorf("waits %v", got)
	}
}

// buildRejectCases are invalid documents with build steps.
var buildRejectCases = []struct {
	name string
	doc  []byte
	cpus int
	want []wantErr
}{
	{"build and run", doc(
		"steps:",
		"  - id: a",
		"    outputs: [/o]",
		"    sh: x",
		"  - id: b",
		"    run: [x]",
		"    sh: y",
		"    build: {source: a, command: [make]}",
	), 0, []wantErr{
		{6, "run", "a build step runs build.command"},
		{7, "sh", "give run or sh, not both"},
		{7, "sh", "a build step runs build.command"},
	}},
	{"run-step fields", doc(
		"steps:",
		"  - id: a",
		"    outputs: [/o]",
		"    sh: x",
		"  - id: b",
		"    build: {source: a, command: [make]}",
		"    template: host",
		"    timeout: 1m",
		"    env: {A: b}",
		"    limits: {memory: 1g}",
		"    network: {mode: none}",
		"    policy: {profile: untrusted}",
		"    snapshot: light",
		"    from: a",
		"    inputs: {a: /in}",
		"    outputs: [/out]",
		"    stdin_from: a",
	), 0, []wantErr{
		{7, "template", "write build.template"},
		{8, "timeout", "write build.timeout"},
		{9, "env", "write build.env"},
		{10, "limits", "write build.memory"},
		{11, "network", "build.net"},
		{12, "policy", "cannot give its own"},
		{13, "snapshot", "keeps no snapshot"},
		{14, "from", "starts from its source"},
		{15, "inputs", "build.source"},
		{16, "outputs", "collects build.outputs"},
		{17, "stdin_from", "no standard input"},
	}},
	{"build in defaults", doc(
		"defaults:",
		"  build: {source: a, command: [make]}",
		"steps:",
		"  - id: a",
		"    sh: x",
	), 0, []wantErr{{2, "defaults.build", "cannot have a default"}}},
	{"missing source and command", doc(
		"steps:",
		"  - id: a",
		"    build: {outputs: [x]}",
	), 0, []wantErr{
		{3, "build.command", "missing"},
		{3, "build.source", "missing"},
	}},
	{"not a mapping", doc(
		"steps:",
		"  - id: a",
		"    build: [make]",
	), 0, []wantErr{{3, "build", "want a mapping"}}},
	{"command and sh, empty command", doc(
		"steps:",
		"  - id: a",
		"    outputs: [/o]",
		"    sh: x",
		"  - id: b",
		"    build:",
		"      source: a",
		"      command: [make]",
		"      sh: make",
		"  - id: c",
		"    build:",
		"      source: a",
		"      command: []",
		"  - id: d",
		"    build: {source: a, sh: ' '}",
	), 0, []wantErr{
		{9, "build.sh", "give command or sh, not both"},
		{13, "build.command", "empty"},
		{15, "build.sh", "empty command"},
	}},
	{"bad fields", doc(
		"steps:",
		"  - id: a",
		"    outputs: [/o]",
		"    sh: x",
		"  - id: b",
		"    build:",
		"      source: a",
		"      command: [make]",
		"      colour: red",
		"      net: open",
		"      memory: lots",
		"      pids: -1",
		"      max_files: -2",
		"      timeout: 25h",
		"      cpus: -1",
		"  - id: c",
		"    build:",
		"      source: a",
		"      command: [make]",
		"      allow_domains: [example.com]",
	), 0, []wantErr{
		{9, "build.colour", "unknown field"},
		{10, "build.net", `"open" is not a build network (none, proxy)`},
		{11, "build.memory", "lots"},
		{12, "build.pids", "must not be negative"},
		{13, "build.max_files", "must be between 0"},
		{14, "build.timeout", "more than the most a step may take"},
		{15, "build.cpus", "must not be negative"},
		{20, "build.allow_domains", "needs net: proxy"},
	}},
	{"outputs", doc(
		"steps:",
		"  - id: a",
		"    outputs: [/o]",
		"    sh: x",
		"  - id: b",
		"    build:",
		"      source: a",
		"      command: [make]",
		"      outputs:",
		"        - /abs",
		"        - a/../b",
		"        - ../up",
		"        - .",
		"        - bin/",
		"        - bin/x",
		"        - a//b",
		"  - id: c",
		"    build: {source: a, command: [make], outputs: []}",
	), 0, []wantErr{
		{10, "build.outputs", "is absolute"},
		{11, "build.outputs", `has a ".."`},
		{12, "build.outputs", `has a ".."`},
		{13, "build.outputs", "is /src itself"},
		{15, "build.outputs", "bin/x overlaps bin"},
		{16, "build.outputs", "is not clean"},
		{18, "build.outputs", "empty"},
	}},
	{"env", doc(
		"steps:",
		"  - id: a",
		"    outputs: [/o]",
		"    sh: x",
		"  - id: b",
		"    build:",
		"      source: a",
		"      command: [make]",
		"      env:",
		"        HOME: /root",
		"        TMPDIR: /tmp",
		"        XDG_CACHE_HOME: /c",
		"        SOURCE_DATE_EPOCH: yesterday",
		"        PATH: /bin",
		"        MOAT_STEP_ID: x",
	), 0, []wantErr{
		{10, "build.env.HOME", "fixed by moat"},
		{11, "build.env.TMPDIR", "fixed by moat"},
		{12, "build.env.XDG_CACHE_HOME", "fixed by moat"},
		{13, "build.env.SOURCE_DATE_EPOCH", "not a whole number"},
	}},
	// What reads without error is checked as build.create checks it, at
	// the line of build.
	{"settings the daemon refuses", doc(
		"steps:",
		"  - id: a",
		"    outputs: [/o]",
		"    sh: x",
		"  - id: b",
		"    build:",
		"      source: a",
		"      command: [make]",
		"      env: {1BAD: x}",
	), 0, []wantErr{{6, "build", "is not a variable name"}}},
	{"source references", doc(
		"steps:",
		"  - id: a",
		"    outputs: [/o]",
		"    sh: x",
		"  - id: nout",
		"    sh: x",
		"  - id: b",
		"    build: {source: nope, command: [make]}",
		"  - id: c",
		"    build: {source: c, command: [make]}",
		"  - id: d",
		"    build: {source: nout, command: [make]}",
		"  - id: e",
		"    build: {source: 'a:/o/../x', command: [make]}",
		"  - id: f",
		"    build: {source: 'a:/other', command: [make]}",
		"  - id: g",
		"    build: {source: 'a:/o/sub', command: [make]}",
		"  - id: h",
		"    build: {source: ':/o', command: [make]}",
		"  - group: par",
		"    mode: parallel",
		"    steps:",
		"      - id: p1",
		"        outputs: [/o]",
		"        sh: x",
		"      - id: p2",
		"        build: {source: p1, command: [make]}",
		"  - id: i",
		"    build: {source: par, command: [make]}",
	), 0, []wantErr{
		{8, "build.source", `no step "nope"`},
		{10, "build.source", `step "c" names itself`},
		{12, "build.source", `step "nout" has no outputs`},
		{14, "build.source", "not a clean path"},
		{16, "build.source", `/other is not an output of step "a"`},
		{20, "build.source", "empty id"},
		{28, "build.source", `step "p1" is not an ancestor of "p2"`},
		{30, "build.source", `"par" is a group: name a step`},
	}},
	{"from, stdin_from and budgets", doc(
		"steps:",
		"  - id: a",
		"    outputs: [/o]",
		"    sh: x",
		"  - id: b",
		"    build: {source: a, command: [make], outputs: [x]}",
		"  - id: c",
		"    from: b",
		"    sh: x",
		"  - group: par",
		"    mode: parallel",
		"    steps:",
		"      - id: p1",
		"        build: {source: b, command: [make], outputs: [y]}",
		"      - id: p2",
		"        stdin_from: p1",
		"        sh: cat",
		"  - group: bud",
		"    mode: parallel",
		"    budget: {cpus: 1}",
		"    steps:",
		"      - id: q",
		"        build: {source: a, command: [make]}",
	), 4, []wantErr{
		{8, "from", `step "b" is a build: it keeps no snapshot`},
		{16, "stdin_from", `step "p1" is a build: it has no stdout`},
		{23, "build", `cannot run inside the budget of group "bud"`},
	}},
}

func TestCompileRejectsBuild(t *testing.T) {
	for _, tc := range buildRejectCases {
		t.Run(tc.name, func(t *testing.T) { checkReject(t, tc.doc, tc.cpus, tc.want) })
	}
}

func TestAddStepBuild(t *testing.T) {
	p := mustCompile(t, doc(
		"steps:",
		"  - id: fetch",
		"    outputs: [/out]",
		"    sh: x",
		"  - group: work",
		"    mode: concurrent",
		"    needs: [fetch]",
		"    steps:",
		"      - id: first",
		"        sh: x",
	))
	s, err := p.AddStep("work", []byte(`{"id": "more", "build": {"source": "fetch:/out", "command": ["make"], "outputs": ["bin"]}}`))
	if err != nil {
		t.Fatalf("AddStep: %v", err)
	}
	if s.Kind != KindBuild || s.Build.Source != "fetch" || s.Build.SourcePath != "/out" {
		t.Errorf("added %+v", s.Step)
	}
	_, err = p.AddStep("work", []byte(`{"id": "bad", "build": {"source": "first", "command": ["make"]}}`))
	if got := errorsOf(t, err); len(got) != 1 || got[0].Field != "build.source" {
		t.Errorf("a source that is not an ancestor: %v", err)
	}
}

// The example of a build step compiles.
func TestCompileBuildExample(t *testing.T) {
	data, err := os.ReadFile("../examples/workflows/sandboxed-build.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := mustCompile(t, data)
	if c := p.Step("compile"); c == nil || c.Kind != KindBuild || c.Build.Source != "fetch" || c.Build.SourcePath != "/workspace/src" {
		t.Errorf("compile: %+v", c)
	}
}
