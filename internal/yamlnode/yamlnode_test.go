package yamlnode

import (
	"fmt"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

// problems collects what a Reader or Parse reports, one line each.
type problems []string

func (p *problems) report(line, col int, field, format string, args ...any) {
	*p = append(*p, fmt.Sprintf("%d:%d %s: %s", line, col, field, fmt.Sprintf(format, args...)))
}

// root parses doc, failing the test on any problem.
func root(t *testing.T, doc string) *yaml.Node {
	t.Helper()
	var p problems
	n := Parse([]byte(doc), p.report, DocumentLine)
	if n == nil || len(p) > 0 {
		t.Fatalf("Parse(%q): %q", doc, p)
	}
	return n
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		doc         string
		named, docu string // the one problem under NamedLine and DocumentLine
	}{
		{"", "0:0 : empty document", "0:0 : empty document"},
		{"a: 1\n---\nb: 2\n", "2:1 : more than one document (a second one starts here)", ""},
		// A parser error: yaml.v3 numbers it from 0 (the line is 3).
		{"a:\n  - b\n c: 1\nd: 2\n", "2:0 : did not find expected key", "3:0 : did not find expected key"},
		// At the end: put on the last line.
		{"a: [1, 2\n", "1:0 : did not find expected ',' or ']'", "1:0 : did not find expected ',' or ']'"},
		// A scanner error: numbered from 1 already.
		{"a: 1\nb: \"x\n", "2:0 : found unexpected end of stream", "2:0 : found unexpected end of stream"},
		// No line named: line 1 under NamedLine, the document under DocumentLine.
		{"a: \x01", "1:0 : control characters are not allowed", "0:0 : control characters are not allowed"},
	} {
		for _, place := range []struct {
			name string
			fn   Placer
			want string
		}{{"NamedLine", NamedLine, tc.named}, {"DocumentLine", DocumentLine, tc.docu}} {
			if place.want == "" {
				place.want = tc.named
			}
			var p problems
			if n := Parse([]byte(tc.doc), p.report, place.fn); n != nil {
				t.Errorf("%s(%q): a node and %q", place.name, tc.doc, p)
			}
			if len(p) != 1 || p[0] != place.want {
				t.Errorf("%s(%q): %q, want %q", place.name, tc.doc, p, place.want)
			}
		}
	}
}

func TestMapping(t *testing.T) {
	doc := "a: 1\n1: x\na: 2\nb: &x {c: 1}\nd: *x\n<<: {e: 1}\n"
	for _, tc := range []struct {
		hint string
		want []string
	}{
		{"", []string{"2:1 : keys must be strings", "3:1 a: given twice", "5:4 d: aliases are not supported", "6:1 : keys must be strings"}},
		{"use defaults", []string{"2:1 : keys must be strings", "3:1 a: given twice", "5:4 d: aliases are not supported (use defaults)", "6:1 : merge keys (<<) are not supported (use defaults)"}},
	} {
		var p problems
		r := &Reader{Report: p.report, Hint: tc.hint}
		var keys []string
		r.Mapping(root(t, doc), "", func(key string, _, v *yaml.Node) {
			keys = append(keys, key)
			r.Plain(v, Join("", key))
		})
		if !slices.Equal(keys, []string{"a", "b", "d"}) {
			t.Errorf("hint %q: keys %q", tc.hint, keys)
		}
		if !slices.Equal(p, tc.want) {
			t.Errorf("hint %q: %q, want %q", tc.hint, p, tc.want)
		}
	}
}

func TestScalars(t *testing.T) {
	var p problems
	r := &Reader{Report: p.report}
	n := func(s string) *yaml.Node { return root(t, "v: "+s).Content[1] }
	check := func(what string, got, want any, ok bool) {
		t.Helper()
		if !ok || got != want {
			t.Errorf("%s = %v, %v; want %v (%q)", what, got, ok, want, p)
		}
	}
	s, ok := r.Str(n("hello"), "f")
	check("Str", s, "hello", ok)
	s, ok = r.Text(n("12"), "f")
	check("Text", s, "12", ok)
	b, ok := r.Bool(n("true"), "f")
	check("Bool", b, true, ok)
	i, ok := r.IntegerIn(n("5"), "f", 1, 9)
	check("IntegerIn", i, int64(5), ok)
	f, ok := r.Number(n("1.5"), "f")
	check("Number", f, 1.5, ok)
	z, ok := r.Size(n("512m"), "f")
	check("Size", z, int64(512<<20), ok)
	ss, ok := r.Strs(n("[a, b]"), "f")
	check("Strs", fmt.Sprint(ss), "[a b]", ok)
	if len(p) > 0 {
		t.Fatalf("problems: %q", p)
	}

	for _, tc := range []struct {
		read func() bool
		want string
	}{
		{func() bool { _, ok := r.Str(n("12"), "f"); return ok }, "1:4 f: want a string"},
		{func() bool { _, ok := r.Str(n(`"a\0b"`), "f"); return ok }, "1:4 f: contains a NUL byte"},
		{func() bool { _, ok := r.Text(n("[x]"), "f"); return ok }, "1:4 f: want a string"},
		{func() bool { _, ok := r.Strs(n("x"), "f"); return ok }, "1:4 f: want a list of strings"},
		{func() bool { _, ok := r.Bool(n("yes"), "f"); return ok }, "1:4 f: want true or false"},
		{func() bool { _, ok := r.Integer(n("1.5"), "f"); return ok }, "1:4 f: want a whole number"},
		{func() bool { _, ok := r.IntegerIn(n("10"), "f", 1, 9); return ok }, "1:4 f: must be between 1 and 9"},
		{func() bool { _, ok := r.Number(n(".nan"), "f"); return ok }, "1:4 f: want a number"},
		{func() bool { _, ok := r.Number(n("-1"), "f"); return ok }, "1:4 f: must not be negative"},
		{func() bool { _, ok := r.Size(n("lots"), "f"); return ok }, `1:4 f: "lots" is not a size (512m, 1g) or a number of bytes`},
		{func() bool { _, ok := r.Size(n("-1k"), "f"); return ok }, "1:4 f: must not be negative"},
		{func() bool { _, ok := r.Size(n("2048p"), "f"); return ok }, "1:4 f: too large (at most 1 EiB)"},
		{func() bool { _, ok := r.Size(n("99999999999p"), "f"); return ok }, "1:4 f: too large (at most 1 EiB)"},
		{func() bool { _, ok := r.Size(n("true"), "f"); return ok }, "1:4 f: want a size (512m, 1g) or a number of bytes"},
	} {
		p = nil
		if tc.read() || len(p) != 1 || p[0] != tc.want {
			t.Errorf("got %q, want %q", p, tc.want)
		}
	}
}
