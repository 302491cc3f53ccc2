package config

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAgent(t *testing.T) {
	d, err := Parse("c.toml", []byte("[agent]\nmodels_file = \"/etc/moat/models.yaml\"\nmax_runs = 3\nmax_turns = 50\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Agent{ModelsFile: "/etc/moat/models.yaml", MaxRuns: 3, MaxTurns: 50}); d.Agent != want {
		t.Fatalf("got %+v, want %+v", d.Agent, want)
	}
	// Unset keys keep the documented defaults.
	d, err = Parse("c.toml", []byte("[agent]\nmax_runs = 2\n"))
	if err != nil || d.Agent != (Agent{MaxRuns: 2, MaxTurns: DefaultAgentMaxTurns}) {
		t.Fatalf("%+v %v", d.Agent, err)
	}
	if d := BuiltIn(); d.Agent != (Agent{MaxRuns: DefaultAgentMaxRuns, MaxTurns: DefaultAgentMaxTurns}) {
		t.Fatalf("built-in: %+v", d.Agent)
	}
}

func TestParseAgentErrors(t *testing.T) {
	for text, want := range map[string]string{
		"[agent]\nmodel_file = \"/x\"\n":           "c.toml:2:1: unknown key \"agent.model_file\"",
		"[agent]\nmodels_file = \"models.yaml\"\n": "agent.models_file: want an absolute path",
		"[agent]\nmax_runs = 0\n":                  "agent.max_runs",
		"[agent]\nmax_runs = 1000000\n":            "agent.max_runs",
		"[agent]\nmax_turns = -1\n":                "agent.max_turns",
		"[agent]\nmax_turns = 100000\n":            "agent.max_turns",
		"[agent]\nmax_turns = \"many\"\n":          "c.toml:2",
	} {
		_, err := Parse("c.toml", []byte(text))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
