package yamlnode

import (
	"math"
	"strings"

	units "github.com/docker/go-units"
	"go.yaml.in/yaml/v3"
)

// MaxSize is the largest byte size Reader.Size accepts (1 EiB).
const MaxSize = 1 << 60

// Reader reads typed values out of YAML nodes, reporting what is wrong.
// Every method takes the field name its errors carry and returns false
// (having reported) when the node is not what it wants. Aliases are
// refused everywhere: expanding them could make a small document huge.
type Reader struct {
	// Report receives every problem; it must be set.
	Report Report
	// Hint, when set, is added in parentheses to the error for an alias
	// ("aliases are not supported (use defaults)"), and a merge key (<<)
	// gets an error of its own carrying it; when empty a merge key is a
	// key that is not a string.
	Hint string
}

// Fail reports an error at node n.
func (r *Reader) Fail(n *yaml.Node, field, format string, args ...any) {
	r.Report(n.Line, n.Column, field, format, args...)
}

// Join names a sub-field: Join("limits", "memory") = "limits.memory".
func Join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// hint is r.Hint in parentheses after a space, or "".
func (r *Reader) hint() string {
	if r.Hint == "" {
		return ""
	}
	return " (" + r.Hint + ")"
}

// Plain reports whether n is usable (not an alias), reporting an alias.
func (r *Reader) Plain(n *yaml.Node, field string) bool {
	if n.Kind == yaml.AliasNode {
		r.Fail(n, field, "aliases are not supported%s", r.hint())
		return false
	}
	return true
}

// Mapping calls fn with each key of the mapping n in order (field is the
// mapping's own name; the name of each value is Join(field, key)). It
// reports a node that is no mapping, keys that are no strings and
// duplicate keys (skipped), and returns whether n was a mapping.
func (r *Reader) Mapping(n *yaml.Node, field string, fn func(key string, k, v *yaml.Node)) bool {
	if !r.Plain(n, field) {
		return false
	}
	if n.Kind != yaml.MappingNode {
		r.Fail(n, field, "want a mapping (key: value)")
		return false
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !r.Plain(k, field) {
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			if r.Hint != "" && k.ShortTag() == "!!merge" {
				r.Fail(k, field, "merge keys (<<) are not supported%s", r.hint())
			} else {
				r.Fail(k, field, "keys must be strings")
			}
			continue
		}
		if seen[k.Value] {
			r.Fail(k, Join(field, k.Value), "given twice")
			continue
		}
		seen[k.Value] = true
		fn(k.Value, k, v)
	}
	return true
}

// Sequence returns the items of the sequence n; want names what the field
// takes ("a list of strings") in the error for a node that is no list.
func (r *Reader) Sequence(n *yaml.Node, field, want string) ([]*yaml.Node, bool) {
	if !r.Plain(n, field) {
		return nil, false
	}
	if n.Kind != yaml.SequenceNode {
		r.Fail(n, field, "want %s", want)
		return nil, false
	}
	return n.Content, true
}

// Str reads a string scalar (YAML tag !!str: a number or a boolean is not
// a string unless quoted). It refuses NUL bytes.
func (r *Reader) Str(n *yaml.Node, field string) (string, bool) {
	if !r.Plain(n, field) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		r.Fail(n, field, "want a string")
		return "", false
	}
	if strings.IndexByte(n.Value, 0) >= 0 {
		r.Fail(n, field, "contains a NUL byte")
		return "", false
	}
	return n.Value, true
}

// Text reads a scalar as the text written, for values that are strings
// in the end (an argument, an environment value): a number or boolean
// counts as its text; null, lists and mappings do not. It refuses NUL
// bytes.
func (r *Reader) Text(n *yaml.Node, field string) (string, bool) {
	if !r.Plain(n, field) {
		return "", false
	}
	switch tag := n.ShortTag(); {
	case n.Kind != yaml.ScalarNode, tag != "!!str" && tag != "!!int" && tag != "!!float" && tag != "!!bool":
		r.Fail(n, field, "want a string")
		return "", false
	case strings.IndexByte(n.Value, 0) >= 0:
		r.Fail(n, field, "contains a NUL byte")
		return "", false
	}
	return n.Value, true
}

// Strs reads a list of strings (each as Str).
func (r *Reader) Strs(n *yaml.Node, field string) ([]string, bool) {
	items, ok := r.Sequence(n, field, "a list of strings")
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, ok := r.Str(it, field)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// Bool reads true or false (tag !!bool).
func (r *Reader) Bool(n *yaml.Node, field string) (bool, bool) {
	if !r.Plain(n, field) {
		return false, false
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		r.Fail(n, field, "want true or false")
		return false, false
	}
	return v, true
}

// Integer reads a whole number (tag !!int) that fits an int64.
func (r *Reader) Integer(n *yaml.Node, field string) (int64, bool) {
	if !r.Plain(n, field) {
		return 0, false
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		r.Fail(n, field, "want a whole number")
		return 0, false
	}
	return v, true
}

// IntegerIn reads a whole number between lo and hi (inclusive).
func (r *Reader) IntegerIn(n *yaml.Node, field string, lo, hi int64) (int64, bool) {
	v, ok := r.Integer(n, field)
	if !ok {
		return 0, false
	}
	if v < lo || v > hi {
		r.Fail(n, field, "must be between %d and %d", lo, hi)
		return 0, false
	}
	return v, true
}

// Number reads a finite number of 0 or more (tags !!int and !!float).
func (r *Reader) Number(n *yaml.Node, field string) (float64, bool) {
	if !r.Plain(n, field) {
		return 0, false
	}
	var v float64
	tag := n.ShortTag()
	if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") || n.Decode(&v) != nil ||
		math.IsNaN(v) || math.IsInf(v, 0) {
		r.Fail(n, field, "want a number")
		return 0, false
	}
	if v < 0 {
		r.Fail(n, field, "must not be negative")
		return 0, false
	}
	return v, true
}

// Size reads a byte size of at most MaxSize: a whole number of bytes or a
// string with a binary unit ("512m", "1g", "2GiB"; k, m, g, t, p are
// powers of 1024).
func (r *Reader) Size(n *yaml.Node, field string) (int64, bool) {
	if !r.Plain(n, field) {
		return 0, false
	}
	const want = "want a size (512m, 1g) or a number of bytes"
	var v int64
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
		if n.Decode(&v) != nil {
			r.Fail(n, field, want)
			return 0, false
		}
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		s := strings.TrimSpace(n.Value)
		if strings.HasPrefix(s, "-") {
			v = -1
			break
		}
		var err error
		if v, err = units.RAMInBytes(s); err != nil {
			r.Fail(n, field, "%q is not a size (512m, 1g) or a number of bytes", n.Value)
			return 0, false
		}
		if v < 0 { // the float product overflowed
			v = MaxSize + 1
		}
	default:
		r.Fail(n, field, want)
		return 0, false
	}
	if v < 0 {
		r.Fail(n, field, "must not be negative")
		return 0, false
	}
	if v > MaxSize {
		r.Fail(n, field, "too large (at most 1 EiB)")
		return 0, false
	}
	return v, true
}
