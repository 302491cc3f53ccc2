package agent

import (
	"bytes"
	"errors"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	units "github.com/docker/go-units"
	"go.yaml.in/yaml/v3"
)

// maxDocument bounds the size of an agents document.
const maxDocument = 1 << 20

// maxSize is the largest byte size a document may give (1 EiB).
const maxSize = 1 << 60

// yamlLine finds the line in a yaml.v3 syntax error ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML reads data, one YAML (or JSON) document, into its root node.
// A syntax error is recorded in errs and nil returned.
func parseYAML(data []byte, errs *errList) *yaml.Node {
	if len(data) > maxDocument {
		errs.add(0, 0, "", "the document is %d bytes: at most %d", len(data), maxDocument)
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			errs.add(0, 0, "", "empty document")
			return nil
		}
		syntaxError(err, errs)
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		errs.add(next.Line, next.Column, "", "more than one document (a second one starts here)")
		return nil
	case !errors.Is(err, io.EOF):
		syntaxError(err, errs)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		errs.add(0, 0, "", "empty document")
		return nil
	}
	return doc.Content[0]
}

// syntaxError records a yaml.v3 error at the line it names (line 1 when it
// names none).
func syntaxError(err error, errs *errList) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		line = max(line, 1)
		msg = m[2]
	}
	errs.add(line, 0, "", "%s", msg)
}

// reader reads typed values out of YAML nodes, recording what is wrong.
// Every method takes the field name its errors carry.
type reader struct {
	errs *errList
}

// fail records an error at node n.
func (r *reader) fail(n *yaml.Node, field, format string, args ...any) {
	r.errs.add(n.Line, n.Column, field, format, args...)
}

// join names a sub-field: join("sandbox", "limits") = "sandbox.limits".
func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// plain reports whether n is usable (not an alias): expanding aliases
// could make a small document huge.
func (r *reader) plain(n *yaml.Node, field string) bool {
	if n.Kind == yaml.AliasNode {
		r.fail(n, field, "aliases are not supported")
		return false
	}
	return true
}

// mapping calls fn with each key of the mapping n in order. It records a
// node that is no mapping, keys that are no strings and duplicate keys
// (skipped).
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
			r.fail(k, field, "keys must be strings")
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

// str reads a string scalar (a number or a boolean is not a string
// unless quoted). It refuses NUL bytes.
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

// boolean reads true or false.
func (r *reader) boolean(n *yaml.Node, field string) (bool, bool) {
	if !r.plain(n, field) {
		return false, false
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		r.fail(n, field, "want true or false")
		return false, false
	}
	return v, true
}

// integer reads a whole number between lo and hi.
func (r *reader) integer(n *yaml.Node, field string, lo, hi int64) (int64, bool) {
	if !r.plain(n, field) {
		return 0, false
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		r.fail(n, field, "want a whole number")
		return 0, false
	}
	if v < lo || v > hi {
		r.fail(n, field, "must be between %d and %d", lo, hi)
		return 0, false
	}
	return v, true
}

// number reads a finite number of 0 or more.
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
// binary unit ("512m", "1g"; k, m, g, t, p are powers of 1024).
func (r *reader) size(n *yaml.Node, field string) (int64, bool) {
	if !r.plain(n, field) {
		return 0, false
	}
	const want = "want a size (512m, 1g) or a number of bytes"
	var v int64
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
		if n.Decode(&v) != nil {
			r.fail(n, field, want)
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
		r.fail(n, field, want)
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

// duration reads a Go duration ("30s", "2m") or a whole number of
// seconds, between lo and hi.
func (r *reader) duration(n *yaml.Node, field string, lo, hi time.Duration) (time.Duration, bool) {
	if !r.plain(n, field) {
		return 0, false
	}
	const want = "want a duration (30s, 2m) or a whole number of seconds"
	if n.Kind != yaml.ScalarNode {
		r.fail(n, field, want)
		return 0, false
	}
	var d time.Duration
	switch n.ShortTag() {
	case "!!str":
		v, err := time.ParseDuration(strings.TrimSpace(n.Value))
		if err != nil {
			r.fail(n, field, "%q is not a duration (30s, 2m)", n.Value)
			return 0, false
		}
		d = v
	case "!!int":
		var s int64
		if n.Decode(&s) != nil || s > int64(hi/time.Second)+1 || s < 0 {
			r.fail(n, field, "must be between %s and %s", lo, hi)
			return 0, false
		}
		d = time.Duration(s) * time.Second
	default:
		r.fail(n, field, want)
		return 0, false
	}
	if d < lo || d > hi {
		r.fail(n, field, "must be between %s and %s", lo, hi)
		return 0, false
	}
	return d, true
}
