package workflow

import (
	"fmt"
	"path"
	"strings"

	"github.com/moat-sandbox/moat/internal/yamlnode"
	"go.yaml.in/yaml/v3"
)

// inputs reads inputs: a mapping of step ids to paths.
func (r *reader) inputs(n *yaml.Node, field string) []input {
	var out []input
	seen := make(map[string]string)
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		p, ok := r.Str(v, name)
		if !ok {
			return
		}
		if msg := badPath(p); msg != "" {
			r.Fail(v, name, "%s", msg)
			return
		}
		if other, dup := seen[p]; dup {
			r.Fail(v, name, "%s is already the path of %q", p, other)
			return
		}
		seen[p] = key
		out = append(out, input{ref: ref{id: key, line: k.Line, col: k.Column}, path: p})
	})
	return out
}

// outputs reads outputs: a list of paths, none inside another.
func (r *reader) outputs(n *yaml.Node, field string) []string {
	items, ok := r.Sequence(n, field, "a list of absolute paths")
	if !ok {
		return nil
	}
	var out []string
	for _, it := range items {
		p, ok := r.Str(it, field)
		if !ok {
			continue
		}
		if msg := badPath(p); msg != "" {
			r.Fail(it, field, "%s", msg)
			continue
		}
		if o := overlap(out, p); o != "" {
			r.Fail(it, field, "%s overlaps %s, given before", p, o)
			continue
		}
		out = append(out, p)
	}
	return out
}

// overlap returns the path of list that is p, holds p or is inside p.
func overlap(list []string, p string) string {
	for _, o := range list {
		if o == p || strings.HasPrefix(p, o+"/") || strings.HasPrefix(o, p+"/") {
			return o
		}
	}
	return ""
}

// badPath says why p cannot be a path of outputs or inputs ("" if it can):
// absolute, clean, not / and not under /proc, /dev or /sys.
func badPath(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q is not an absolute path", p)
	case path.Clean(p) != p:
		return fmt.Sprintf("%q is not a clean path (write %s)", p, path.Clean(p))
	case p == "/":
		return "must not be /"
	}
	for _, k := range []string{"/proc", "/dev", "/sys"} {
		if p == k || strings.HasPrefix(p, k+"/") {
			return fmt.Sprintf("%s is under %s", p, k)
		}
	}
	return ""
}
