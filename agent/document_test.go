package agent

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const fullDoc = `providers:
  - name: local
    kind: openai
    base_url: http://127.0.0.1:8080/v1
    model: qwen
    aliases: [small]
    tags: [local, green-tea]
    max_concurrency: 2
    weight: 3
max_turns: 30
agents:
  - name: coder
    model: small
    tags: [green-tea]
    system: hi
    tools: [shell_exec, fetch_url, process_start]
    handoff: [reviewer]
    policy: {profile: untrusted, deny: ["Exec(git push*)"]}
    sandbox:
      template: python
      limits: {memory: 1g, cpus: 1.5, pids: 100, disk: 512m}
      network: {mode: proxy, allow_domains: [pypi.org]}
      timeout: 5m
  - name: reviewer
    model: big
    max_turns: 5
    sandbox: {per_call: true}
`

func TestCompile(t *testing.T) {
	d, err := Compile([]byte(fullDoc))
	if err != nil {
		t.Fatal(err)
	}
	c, r := d.Agent("coder"), d.Agent("reviewer")
	if len(d.Providers.Providers) != 1 || d.Providers.Providers[0].Weight != 3 || d.ProvidersLine != 1 || d.MaxTurns != 30 {
		t.Errorf("document %+v", d)
	}
	if c.MaxTurns != 30 || c.Sandbox.Template != "python" || c.Sandbox.Limits.MemoryBytes != 1<<30 || c.Sandbox.Limits.CPUs != 1.5 ||
		c.Sandbox.Network.Mode != "proxy" || c.Sandbox.Timeout != 5*time.Minute || c.Policy.Profile != "untrusted" ||
		strings.Join(c.Tools, ",") != "shell_exec,fetch_url,process_start,handoff" || c.Line != 12 {
		t.Errorf("coder %+v", c)
	}
	if r.MaxTurns != 5 || !r.Sandbox.PerCall || r.Sandbox.Template != DefaultTemplate || r.Sandbox.Network.Mode != "none" || r.Sandbox.Timeout != DefaultToolTimeout {
		t.Errorf("reviewer %+v", r)
	}
	// JSON is accepted.
	if _, err := Compile([]byte(`{"agents": [{"name": "a", "model": "m", "tools": ["read_file"]}]}`)); err != nil {
		t.Error(err)
	}
	// A models file: providers only.
	if _, err := Compile([]byte("providers:\n  - {name: p, kind: anthropic, base_url: https://api.anthropic.com, model: claude}\n")); err != nil {
		t.Error(err)
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"", "empty document"},
		{"agents: [", "line 1"},
		{"agents:\n  - name: a\n    model: m\n    color: red\n", "line 4: agents.a.color: unknown field"},
		{"agents:\n  - name: a\n    model: m\n    tools: [rm_rf]\n", `line 4: agents.a.tools: unknown tool "rm_rf"`},
		{"agents:\n  - name: a\n    model: m\n    handoff: [b]\n", `line 2: agents.a.handoff: no agent "b"`},
		{"agents:\n  - name: a\n    model: m\n    handoff: [a]\n", "hand a task to itself"},
		{"max_turns: 0\nagents:\n  - {name: a, model: m}\n", "line 1: max_turns: must be between 1 and 200"},
		{"max_turns: 201\nagents:\n  - {name: a, model: m}\n", "between 1 and 200"},
		{"agents:\n  - {name: a, model: m, tools: [process_start], sandbox: {per_call: true}}\n", "not with sandbox.per_call"},
		{"agents:\n  - {name: a, model: m, tools: [fetch_url]}\n", "fetch_url needs sandbox.network.mode proxy"},
		{"agents:\n  - {name: a, model: m, sandbox: {network: {allow_domains: [x.org]}}}\n", "need mode proxy"},
		{"agents:\n  - {name: a, model: m, sandbox: {network: {mode: open}}}\n", `"open" is not a mode`},
		{"agents:\n  - {name: a, model: m, sandbox: {timeout: 2h}}\n", "must be between 1s and 1h0m0s"},
		{"agents:\n  - {name: a, model: m}\n  - {name: a, model: n}\n", "line 3: agents.a: agent \"a\" is already defined at line 2"},
		{"agents:\n  - {name: A, model: m}\n", "not a valid name"},
		{"agents:\n  - {name: a}\n", "agents.a.model: missing"},
		{"agents:\n  - {name: a, model: m, tools: [handoff]}\n", "names no agent"},
		{"agents:\n  - {name: a, model: m, sandbox: {limits: {memory: lots}}}\n", "not a size"},
		{"providers:\n  - {name: p, kind: gemini, base_url: http://x, model: m}\n", "line 2: providers[0]: "},
		{"providers: []\n", "empty: give at least one provider"},
		{"a: &x 1\nagents: *x\n", "aliases are not supported"},
		{"agents:\n  - {name: a, model: m}\n---\nagents: []\n", "more than one document"},
	} {
		_, err := Compile([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func TestDecodeArgs(t *testing.T) {
	var v struct {
		A string `json:"a"`
	}
	for raw, want := range map[string]string{
		`{"a": "x"} {"a": "y"}`: "data after",
		`{"b": 1}`:              "unknown field",
		`{"a": 1}`:              "cannot unmarshal",
		`"str"`:                 "want a JSON object",
	} {
		if err := decodeArgs([]byte(raw), &v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
	if err := decodeArgs(nil, &v); err != nil {
		t.Errorf("no arguments: %v", err)
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("é", 10000) // 2 bytes each
	c := clip(s, 101, 101)
	if !strings.Contains(c, "[… 19800 bytes elided …]") || strings.ContainsRune(c, '\uFFFD') {
		t.Errorf("clip %q", c)
	}
	if clip("short", 8, 8) != "short" || clip("a\xffb", 8, 8) != "a\uFFFDb" {
		t.Error("short or invalid text")
	}
}

func FuzzCompile(f *testing.F) {
	f.Add([]byte(fullDoc))
	f.Add([]byte(coderDoc))
	f.Add([]byte(teamDoc))
	f.Add([]byte(`{"agents": [{"name": "a", "model": "m"}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		d, err := Compile(doc)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		for _, a := range d.Agents {
			if a.Model == "" || a.MaxTurns < 1 || a.MaxTurns > MaxMaxTurns || a.Sandbox.Timeout <= 0 || a.Sandbox.Timeout > MaxToolTimeout {
				t.Fatalf("agent %+v", a)
			}
			for _, h := range a.Handoff {
				if h == a.Name || d.Agent(h) == nil {
					t.Fatalf("handoff %q of %s", h, a.Name)
				}
			}
			_ = schemas(a)
		}
	})
}
