package workflow

import (
	"errors"
	"os"
	"testing"
)

// FuzzCompile checks that no document makes Compile (or AddStep, Ancestors
// and Downstream on what it compiles) panic, and that what it accepts is
// a plan whose waits name its own steps.
func FuzzCompile(f *testing.F) {
	if data, err := os.ReadFile("testdata/ci.yaml"); err == nil {
		f.Add(data)
	}
	for _, tc := range rejectCases {
		f.Add(tc.doc)
	}
	f.Add(runningDoc)
	f.Add([]byte(`{"steps": [{"group": "g", "mode": "concurrent", "steps": [{"id": "a", "run": ["x"]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Compile(data, Options{CPUs: 2})
		if err != nil {
			if p != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("plan %v, error %v", p, err)
			}
			return
		}
		ids := make(map[string]bool)
		for _, s := range p.Steps {
			ids[s.ID] = true
		}
		for _, s := range p.Steps {
			for _, w := range s.Waits {
				if !ids[w] || w == s.ID {
					t.Fatalf("step %q waits for %q", s.ID, w)
				}
			}
			p.Ancestors(s.ID)
			p.Downstream(s.ID)
		}
		for _, g := range p.Groups {
			if g.Mode == Concurrent {
				if _, err := p.AddStep(g.ID, data); err != nil && !errors.Is(err, ErrInvalid) {
					t.Fatalf("AddStep: %v", err)
				}
			}
		}
	})
}
