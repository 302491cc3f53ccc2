package workflow

import (
	"math"
	"strings"
	"time"

	units "github.com/docker/go-units"
	"go.yaml.in/yaml/v3"
)

// Bounds of the scalar readers.
const (
	// maxSize is the largest byte size a document may give (1 EiB).
	maxSize = 1 << 60
	// maxSeconds is the largest duration, in seconds, that fits a
	// time.Duration.
	maxSeconds = float64(math.MaxInt64 / int64(time.Second))
)

// reader reads typed values out of YAML nodes, recording what is wrong.
// Every method takes the field name its errors carry.
type reader struct {
	errs *errList
}

// fail records an error at node n.
func (r *reader) fail(n *yaml.Node, field, format string, args ...any) {
	r.errs.add(n.Line, n.Column, field, format, args...)
}

// plain reports whether n is usable (not an alias), recording an error
// for an alias: expanding them could make a small document huge.
func (r *reader) plain(n *yaml.Node, field string) bool {
	if n.Kind == yaml.AliasNode {
		r.fail(n, field, "aliases are not supported (use defaults)")
		return false
	}
	return true
}

// join names a sub-field: join("limits", "memory") = "limits.memory".
func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// mapping calls fn with each key of the mapping n in order (field is the
// mapping's own name; the name of each value is join(field, key)). It
// records a node that is no mapping, keys that are no strings and
// duplicate keys (skipped).
func (r *reader) mapping(n *yaml.Node, field string, fn func(key string, k, v *yaml.Node)) bool {
	if !r.plain(n, field) {
		return false
	}
	if n.Kind != yaml.MappingNode {
		r.fail(n, field, "want a mapping (key: value)")
		return false
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !r.plain(k, field) {
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			if k.ShortTag() == "!!merge" {
				r.fail(k, field, "merge keys (<<) are not supported (use defaults)")
			} else {
				r.fail(k, field, "keys must be strings")
			}
			continue
		}
		if seen[k.Value] {
			r.fail(k, join(field, k.Value), "given twice")
			continue
		}
		seen[k.Value] = true
		fn(k.Value, k, v)
	}
	return true
}

// sequence returns the items of the sequence n.
func (r *reader) sequence(n *yaml.Node, field, want string) ([]*yaml.Node, bool) {
	if !r.plain(n, field) {
		return nil, false
	}
	if n.Kind != yaml.SequenceNode {
		r.fail(n, field, "want %s", want)
		return nil, false
	}
	return n.Content, true
}

// str reads a string scalar (YAML tag !!str: a number or a boolean is not
// a string unless quoted). It refuses NUL bytes.
func (r *reader) str(n *yaml.Node, field string) (string, bool) {
	if !r.plain(n, field) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		r.fail(n, field, "want a string")
		return "", false
	}
	if strings.IndexByte(n.Value, 0) >= 0 {
		r.fail(n, field, "contains a NUL byte")
		return "", false
	}
	return n.Value, true
}

// text reads a scalar as the text written, for values that are strings
// in the end (an argument, an environment value): a number or boolean
// counts as its text; null, lists and mappings do not.
func (r *reader) text(n *yaml.Node, field string) (string, bool) {
	if !r.plain(n, field) {
		return "", false
	}
	switch tag := n.ShortTag(); {
	case n.Kind != yaml.ScalarNode, tag != "!!str" && tag != "!!int" && tag != "!!float" && tag != "!!bool":
		r.fail(n, field, "want a string")
		return "", false
	case strings.IndexByte(n.Value, 0) >= 0:
		r.fail(n, field, "contains a NUL byte")
		return "", false
	}
	return n.Value, true
}

// strs reads a list of strings.
func (r *reader) strs(n *yaml.Node, field string) ([]string, bool) {
	items, ok := r.sequence(n, field, "a list of strings")
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, ok := r.str(it, field)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// integer reads a whole number (tag !!int).
func (r *reader) integer(n *yaml.Node, field string) (int64, bool) {
	if !r.plain(n, field) {
		return 0, false
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		r.fail(n, field, "want a whole number")
		return 0, false
	}
	return v, true
}

// count reads a whole number of 0 or more that fits an int.
func (r *reader) count(n *yaml.Node, field string) (int, bool) {
	v, ok := r.integer(n, field)
	if !ok {
		return 0, false
	}
	if v < 0 || v > math.MaxInt32 {
		r.fail(n, field, "must be between 0 and %d", math.MaxInt32)
		return 0, false
	}
	return int(v), true
}

// number reads a finite number of 0 or more (tags !!int and !!float).
func (r *reader) number(n *yaml.Node, field string) (float64, bool) {
	if !r.plain(n, field) {
		return 0, false
	}
	var v float64
	tag := n.ShortTag()
	if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") || n.Decode(&v) != nil ||
		math.IsNaN(v) || math.IsInf(v, 0) {
		r.fail(n, field, "want a number")
		return 0, false
	}
	if v < 0 {
		r.fail(n, field, "must not be negative")
		return 0, false
	}
	return v, true
}

// size reads a byte size: a whole number of bytes or a string with a
// binary unit ("512m", "1g", "2GiB"; k, m, g, t, p are powers of 1024).
func (r *reader) size(n *yaml.Node, field string) (int64, bool) {
	if !r.plain(n, field) {
		return 0, false
	}
	var v int64
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
		if n.Decode(&v) != nil {
			r.fail(n, field, "want a size (512m, 1g) or a number of bytes")
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
			r.fail(n, field, "%q is not a size (512m, 1g) or a number of bytes", n.Value)
			return 0, false
		}
		if v < 0 { // the float product overflowed
			v = maxSize + 1
		}
	default:
		r.fail(n, field, "want a size (512m, 1g) or a number of bytes")
		return 0, false
	}
	if v < 0 {
		r.fail(n, field, "must not be negative")
		return 0, false
	}
	if v > maxSize {
		r.fail(n, field, "too large (at most 1 EiB)")
		return 0, false
	}
	return v, true
}

// duration reads a Go duration string ("30s", "2m") or a number of
// seconds, of 0 or more.
func (r *reader) duration(n *yaml.Node, field string) (time.Duration, bool) {
	if !r.plain(n, field) {
		return 0, false
	}
	const want = "want a duration (30s, 2m) or a number of seconds"
	if n.Kind != yaml.ScalarNode {
		r.fail(n, field, want)
		return 0, false
	}
	var d time.Duration
	switch n.ShortTag() {
	case "!!str":
		v, err := time.ParseDuration(strings.TrimSpace(n.Value))
		if err != nil {
			r.fail(n, field, "%q is not a duration (30s, 2m) or a number of seconds", n.Value)
			return 0, false
		}
		d = v
	case "!!int", "!!float":
		var s float64
		if n.Decode(&s) != nil || math.IsNaN(s) || math.IsInf(s, 0) {
			r.fail(n, field, want)
			return 0, false
		}
		if s > maxSeconds || s < -maxSeconds {
			r.fail(n, field, "too large")
			return 0, false
		}
		d = time.Duration(s * float64(time.Second))
	default:
		r.fail(n, field, want)
		return 0, false
	}
	if d < 0 {
		r.fail(n, field, "must not be negative")
		return 0, false
	}
	return d, true
}
