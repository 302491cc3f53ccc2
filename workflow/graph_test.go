package workflow

import (
	"reflect"
	"testing"
)

func TestAncestorsDownstream(t *testing.T) {
	p := mustCompile(t, doc(
		"steps:",
		"  - {id: a, sh: x, outputs: [/o]}",
		"  - group: g",
		"    mode: parallel",
		"    steps:",
		"      - {id: b, sh: x, from: a}",
		"      - {id: c, sh: x}",
		"      - {id: d, sh: x, stdin_from: c}",
		"      - {id: f, sh: x, needs: [b]}",
		"  - {id: e, sh: x, inputs: {a: /in}}",
	))
	for _, tc := range []struct {
		id               string
		ancestors, users []string
	}{
		{"a", nil, []string{"b", "c", "d", "f", "e"}},
		{"b", []string{"a"}, []string{"f", "e"}},
		{"c", []string{"a"}, []string{"d", "e"}}, // d takes c's stdout
		{"d", []string{"a"}, []string{"e"}},
		{"f", []string{"a", "b"}, []string{"e"}},
		{"e", []string{"a", "b", "c", "d", "f"}, nil},
		{"nope", nil, nil},
		{"g", nil, nil}, // a group is no step
	} {
		if got := p.Ancestors(tc.id); !reflect.DeepEqual(got, tc.ancestors) {
			t.Errorf("Ancestors(%s) = %q, want %q", tc.id, got, tc.ancestors)
		}
		if got := p.Downstream(tc.id); !reflect.DeepEqual(got, tc.users) {
			t.Errorf("Downstream(%s) = %q, want %q", tc.id, got, tc.users)
		}
	}
}
