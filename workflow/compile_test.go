package workflow

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// lineOf returns the 1-based line of the first line of data holding s.
func lineOf(t *testing.T, data []byte, s string) int {
	t.Helper()
	for i, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%q not in the document", s)
	return 0
}

func TestCompileCI(t *testing.T) {
	data, err := os.ReadFile("testdata/ci.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := mustCompile(t, data)
	if p.Name != "ci" {
		t.Errorf("name %q", p.Name)
	}
	var ids []string
	for _, s := range p.Steps {
		ids = append(ids, s.ID)
		if want := lineOf(t, data, "- id: "+s.ID); s.Line != want {
			t.Errorf("%s: line %d, want %d", s.ID, s.Line, want)
		}
	}
	if got := strings.Join(ids, " "); got != "fetch build unit cli corpus load report" {
		t.Errorf("steps in order %q", got)
	}
	wantWaits := map[string]string{
		"fetch":  "",
		"build":  "fetch",
		"unit":   "build",
		"cli":    "build",
		"corpus": "build",
		"load":   "build",
		"report": "unit,cli,corpus,load",
	}
	if got := waitsOf(p); !reflect.DeepEqual(got, wantWaits) {
		t.Errorf("waits %v\nwant %v", got, wantWaits)
	}

	if len(p.Groups) != 1 {
		t.Fatalf("groups %+v", p.Groups)
	}
	g := p.Groups[0]
	wantGroup := Group{
		ID: "tests", Mode: Parallel, MaxParallel: 4,
		Budget: &sandbox.Limits{CPUs: 2, MemoryBytes: 512 << 20, Pids: 256},
		Line:   lineOf(t, data, "- group: tests"),
	}
	if !reflect.DeepEqual(*g, wantGroup) {
		t.Errorf("group %+v\nwant %+v", *g, wantGroup)
	}

	build := p.Step("build")
	if build.From != "fetch" || build.Sh == "" || build.Args[0] != "/bin/sh" || build.Args[1] != "-c" || build.Args[2] != build.Sh {
		t.Errorf("build: from %q args %q", build.From, build.Args)
	}
	if build.Retry != (Retry{Attempts: 2, Backoff: time.Second, From: FromSnapshot}) {
		t.Errorf("build retry %+v", build.Retry)
	}
	if !reflect.DeepEqual(build.Outputs, []string{"/workspace/dist"}) {
		t.Errorf("build outputs %q", build.Outputs)
	}
	for _, s := range p.Steps {
		if s.Template != "host" || s.Kind != KindRun ||
			s.Limits != (sandbox.Limits{MemoryBytes: 256 << 20, CPUs: 1, Pids: 128}) ||
			!reflect.DeepEqual(s.Env, []string{"PYTHONDONTWRITEBYTECODE=1"}) {
			t.Errorf("%s: defaults not applied: template %q limits %+v env %q", s.ID, s.Template, s.Limits, s.Env)
		}
		wantGroups := []string(nil)
		if s.Group == "tests" {
			wantGroups = []string{"tests"}
		}
		if !reflect.DeepEqual(s.Groups, wantGroups) {
			t.Errorf("%s: groups %q", s.ID, s.Groups)
		}
	}
	if d := p.Step("load").Timeout; d != 30*time.Second {
		t.Errorf("load timeout %s (its own wins over the default)", d)
	}
	if d := p.Step("fetch").Timeout; d != 2*time.Minute {
		t.Errorf("fetch timeout %s", d)
	}
	load := p.Step("load")
	if load.StdinFrom != "corpus" || load.Priority != Critical || load.Inputs["build"] != "/opt/wordfreq" {
		t.Errorf("load: %+v", load.Step)
	}
	corpus := p.Step("corpus")
	if corpus.Priority != Background || corpus.Snapshot != SnapshotNone || corpus.Args[0] != "python3" || corpus.Sh != "" {
		t.Errorf("corpus: %+v", corpus.Step)
	}
	report := p.Step("report")
	if !reflect.DeepEqual(report.Inputs, map[string]string{"unit": "/in/unit", "cli": "/in/cli", "load": "/in/load"}) {
		t.Errorf("report inputs %v", report.Inputs)
	}
	if report.Snapshot != SnapshotNone || p.Step("unit").Snapshot != SnapshotLight || p.Step("unit").Priority != Normal {
		t.Errorf("snapshot and priority defaults")
	}
}

func TestWaits(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  []byte
		want map[string]string
	}{
		{"top level is sequential", doc(
			"steps:",
			"  - {id: a, sh: x}",
			"  - {id: b, sh: x}",
			"  - {id: c, sh: x}",
		), map[string]string{"a": "", "b": "a", "c": "b"}},
		{"a group stands for all its steps", doc(
			"steps:",
			"  - {id: a, sh: x}",
			"  - group: g",
			"    steps: [{id: b, sh: x}, {id: c, sh: x}]",
			"  - {id: d, sh: x}",
		), map[string]string{"a": "", "b": "a", "c": "a,b", "d": "b,c"}},
		{"parallel", doc(
			"steps:",
			"  - {id: a, sh: x}",
			"  - group: p",
			"    mode: parallel",
			"    steps:",
			"      - {id: b, sh: x}",
			"      - {id: c, sh: x, needs: b}",
			"      - group: s",
			"        steps: [{id: d, sh: x}, {id: e, sh: x}]",
			"  - {id: f, sh: x}",
		), map[string]string{"a": "", "b": "a", "c": "a,b", "d": "a", "e": "a,d", "f": "b,c,d,e"}},
		{"needs of groups and of steps", doc(
			"steps:",
			"  - group: outer",
			"    mode: concurrent",
			"    steps:",
			"      - {id: x, sh: x}",
			"      - {id: y, sh: x}",
			"      - group: inner",
			"        mode: parallel",
			"        needs: [x]",
			"        steps:",
			"          - {id: z, sh: x, needs: [w, y]}",
			"          - {id: w, sh: x}",
			"      - {id: v, sh: x, needs: [inner, x, inner]}",
		), map[string]string{"x": "", "y": "", "z": "x,y,w", "w": "x", "v": "x,z,w"}},
		{"document order, no duplicates", doc(
			"steps:",
			"  - group: g",
			"    mode: parallel",
			"    steps:",
			"      - {id: a, sh: x}",
			"      - {id: b, sh: x}",
			"      - {id: c, sh: x, needs: [b, a, b, g2]}",
			"      - group: g2",
			"        mode: parallel",
			"        steps: [{id: d, sh: x}]",
		), map[string]string{"a": "", "b": "", "c": "a,b,d", "d": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, tc.doc)
			if got := waitsOf(p); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("waits %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	p := mustCompile(t, doc(
		"defaults:",
		"  run: [make, all]",
		"  template: base",
		"  limits: {memory: 1g, cpus: 0.5, pids: 64, disk: 2GiB}",
		"  timeout: 90",
		"  env: {A: '1', B: 2, C: true}",
		"  policy: {profile: untrusted, deny: [rm]}",
		"  network: {mode: proxy, allow_domains: [example.com]}",
		"  retry: {attempts: 3, backoff: 1.5}",
		"  snapshot: full",
		"  priority: background",
		"steps:",
		"  - id: inherits",
		"  - id: overrides",
		"    sh: make test",
		"    template: ''",
		"    limits: {memory: 512m, disk: 1048576}",
		"    timeout: 30s",
		"    env: {B: three, D: x=y}",
		"    policy: {allow: [make]}",
		"    network: {mode: none}",
		"    retry: {from: scratch}",
		"    snapshot: light",
		"    priority: critical",
	))
	in, ov := p.Step("inherits"), p.Step("overrides")
	want := Step{
		ID: "inherits", Kind: KindRun, Args: []string{"make", "all"}, Template: "base",
		Limits:   sandbox.Limits{MemoryBytes: 1 << 30, CPUs: 0.5, Pids: 64, DiskBytes: 2 << 30},
		Timeout:  90 * time.Second,
		Env:      []string{"A=1", "B=2", "C=true"},
		Policy:   &api.CallRules{Profile: "untrusted", Deny: []string{"rm"}},
		Network:  &api.Network{Mode: "proxy", AllowDomains: []string{"example.com"}},
		Retry:    Retry{Attempts: 3, Backoff: 1500 * time.Millisecond, From: FromSnapshot},
		Snapshot: SnapshotFull, Priority: Background, Line: 13,
	}
	if !reflect.DeepEqual(in.Step, want) {
		t.Errorf("inherits:\n%+v\nwant\n%+v", in.Step, want)
	}
	want = Step{
		ID: "overrides", Kind: KindRun, Args: []string{"/bin/sh", "-c", "make test"}, Sh: "make test",
		Limits:   sandbox.Limits{MemoryBytes: 512 << 20, CPUs: 0.5, Pids: 64, DiskBytes: 1 << 20},
		Timeout:  30 * time.Second,
		Env:      []string{"A=1", "B=three", "C=true", "D=x=y"},
		Policy:   &api.CallRules{Allow: []string{"make"}},
		Network:  &api.Network{Mode: "none"},
		Retry:    Retry{Attempts: 3, Backoff: 1500 * time.Millisecond, From: FromScratch},
		Snapshot: SnapshotLight, Priority: Critical, Line: 14,
	}
	if !reflect.DeepEqual(ov.Step, want) {
		t.Errorf("overrides:\n%+v\nwant\n%+v", ov.Step, want)
	}
	if in.Policy == p.defaults.policy || in.Network == p.defaults.network {
		t.Errorf("steps share the defaults' policy or network")
	}
}

func TestMinimalDefaults(t *testing.T) {
	p := mustCompile(t, doc("steps: [{id: a, run: [true, 1, 2.5, false]}]"))
	a := p.Step("a")
	want := Step{ID: "a", Kind: KindRun, Args: []string{"true", "1", "2.5", "false"},
		Retry: Retry{Attempts: 1, From: FromSnapshot}, Snapshot: SnapshotLight, Priority: Normal, Line: 1}
	if !reflect.DeepEqual(a.Step, want) || a.Group != "" || a.Groups != nil || a.Waits != nil {
		t.Errorf("got %+v", *a)
	}
	if p.Name != "" || len(p.Groups) != 0 {
		t.Errorf("plan %+v", p)
	}
}

func TestJSON(t *testing.T) {
	yamlDoc := doc(
		"name: j",
		"steps:",
		"  - id: a",
		"    run: [cat, /etc/hostname]",
		"    outputs: [/out/a]",
		"  - group: g",
		"    mode: parallel",
		"    budget: {cpus: 1.5, memory: 1g}",
		"    steps:",
		"      - id: b",
		"        sh: echo hi",
		"        inputs: {a: /in/a}",
		"        limits: {memory: 1073741824}",
	)
	jsonDoc := []byte("{\n" +
		"\t\"name\": \"j\",\n" +
		"\t\"steps\": [\n" +
		"\t\t{\"id\": \"a\", \"run\": [\"cat\", \"\\/etc\\/hostname\"], \"outputs\": [\"/out/a\"]},\n" +
		"\t\t{\"group\": \"g\", \"mode\": \"parallel\", \"budget\": {\"cpus\": 1.5, \"memory\": \"1g\"},\n" +
		"\t\t \"steps\": [{\"id\": \"b\", \"sh\": \"echo hi\", \"inputs\": {\"a\": \"/in/a\"}, \"limits\": {\"memory\": 1073741824}}]}\n" +
		"\t]\n" +
		"}\n")
	py, pj := mustCompile(t, yamlDoc), mustCompile(t, jsonDoc)
	if len(py.Steps) != len(pj.Steps) {
		t.Fatalf("steps %d vs %d", len(py.Steps), len(pj.Steps))
	}
	for i := range py.Steps {
		y, j := *py.Steps[i], *pj.Steps[i]
		y.Line, j.Line = 0, 0
		if !reflect.DeepEqual(y, j) {
			t.Errorf("step %d:\nyaml %+v\njson %+v", i, y, j)
		}
	}
	if !reflect.DeepEqual(py.Groups[0].Budget, pj.Groups[0].Budget) {
		t.Errorf("budgets %+v vs %+v", py.Groups[0].Budget, pj.Groups[0].Budget)
	}
	_, err := Compile([]byte("{\n\"steps\": [\n{\"id\": \"a\", \"sh\": \"x\", \"colour\": 1}\n]\n}"), Options{})
	if errs := errorsOf(t, err); len(errs) != 1 || errs[0].Line != 3 || errs[0].Field != "colour" {
		t.Errorf("JSON error %v", err)
	}
}

func TestUnescapeSolidus(t *testing.T) {
	for in, want := range map[string]string{
		`{"a": "x\/y"}`:         `{"a": "x/y"}`,
		`{"a": "x\\/y"}`:        `{"a": "x\\/y"}`,
		`{"a": "\"\/\\\/"}`:     `{"a": "\"/\\/"}`,
		`{"a\/": ["\/", "\n"]}`: `{"a/": ["/", "\n"]}`,
		`a: "x\/y"`:             `a: "x\/y"`, // not JSON: left alone
	} {
		if got := string(unescapeSolidus([]byte(in))); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}
