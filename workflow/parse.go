package workflow

import (
	"regexp"
	"strings"
	"unicode"

	"github.com/moat-sandbox/moat/internal/yamlnode"
	"go.yaml.in/yaml/v3"
)

// validID is the form of step and group ids.
var validID = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// maxNameLen bounds a document's name.
const maxNameLen = 256

// parseDocument reads the root node of a document (data, the document's
// text, for the errors of its agents section).
func (r *reader) parseDocument(data []byte, root *yaml.Node) *document {
	doc := &document{}
	var steps *yaml.Node
	r.Mapping(root, "", func(key string, k, v *yaml.Node) {
		switch key {
		case "name":
			if s, ok := r.Str(v, key); ok {
				if len(s) > maxNameLen || strings.IndexFunc(s, unicode.IsControl) >= 0 {
					r.Fail(v, key, "must be at most %d bytes, without control characters", maxNameLen)
				} else {
					doc.name = s
				}
			}
		case "defaults":
			doc.defaults = &fields{}
			r.Mapping(v, key, func(dk string, dkn, dv *yaml.Node) {
				if r.field(doc.defaults, key, dk, dv) {
					return
				}
				switch dk {
				case "id", "needs", "from", "inputs", "outputs", "stdin_from", "build", "agent":
					r.Fail(dkn, yamlnode.Join(key, dk), "cannot have a default")
				default:
					r.Fail(dkn, yamlnode.Join(key, dk), "unknown field")
				}
			})
			r.command(doc.defaults, key, v)
		case "agents":
			doc.agents = r.agents(k, v)
			r.checkAgents(doc.agents, data, root, k)
		case "steps":
			steps = v
			doc.items = r.items(v, key)
		default:
			r.Fail(k, key, "unknown field")
		}
	})
	if root.Kind == yaml.MappingNode && steps == nil {
		r.Fail(root, "steps", "missing: a document needs a list of steps")
	}
	return doc
}

// items reads a non-empty list of steps and groups.
func (r *reader) items(n *yaml.Node, field string) []*item {
	list, ok := r.Sequence(n, field, "a list of steps and groups")
	if !ok {
		return nil
	}
	if len(list) == 0 {
		r.Fail(n, field, "empty: give at least one step")
		return nil
	}
	var out []*item
	for _, e := range list {
		if it := r.item(e, field); it != nil {
			out = append(out, it)
		}
	}
	return out
}

// item reads one entry of a steps list: a mapping with id (a step) or
// group (a group).
func (r *reader) item(n *yaml.Node, field string) *item {
	if !r.Plain(n, field) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		r.Fail(n, field, "want a step (a mapping with id) or a group (a mapping with group)")
		return nil
	}
	var isStep, isGroup bool
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch n.Content[i].Value {
		case "id":
			isStep = true
		case "group":
			isGroup = true
		}
	}
	switch {
	case isStep && isGroup:
		r.Fail(n, field, "has both id (a step) and group (a group)")
		return nil
	case isGroup:
		return &item{group: r.group(n)}
	case isStep:
		return &item{step: r.step(n)}
	}
	r.Fail(n, field, "want a step (a mapping with id) or a group (a mapping with group)")
	return nil
}

// id reads a step's or group's id.
func (r *reader) id(n *yaml.Node, field string) string {
	s, ok := r.Str(n, field)
	if !ok {
		return ""
	}
	if !validID.MatchString(s) {
		r.Fail(n, field, "%q is not a valid id (lowercase letters, digits, _ and -, starting with a letter or digit, at most 63)", s)
	}
	return s
}

// ref reads an id that a field names.
func (r *reader) ref(n *yaml.Node, field string) *ref {
	s, ok := r.Str(n, field)
	if !ok {
		return nil
	}
	if s == "" {
		r.Fail(n, field, "empty id")
		return nil
	}
	return &ref{id: s, line: n.Line, col: n.Column}
}

// needs reads an id or a list of ids.
func (r *reader) needs(n *yaml.Node, field string) []ref {
	if n.Kind == yaml.ScalarNode {
		if x := r.ref(n, field); x != nil {
			return []ref{*x}
		}
		return nil
	}
	list, ok := r.Sequence(n, field, "an id or a list of ids")
	if !ok {
		return nil
	}
	var out []ref
	for _, e := range list {
		if x := r.ref(e, field); x != nil {
			out = append(out, *x)
		}
	}
	return out
}

// step reads a step.
func (r *reader) step(n *yaml.Node) *docStep {
	s := &docStep{line: n.Line, col: n.Column}
	var keys []*yaml.Node
	r.Mapping(n, "", func(key string, k, v *yaml.Node) {
		keys = append(keys, k)
		if r.field(&s.f, "", key, v) {
			return
		}
		switch key {
		case "id":
			s.id, s.line, s.col = r.id(v, key), k.Line, k.Column
		case "needs":
			s.needs = r.needs(v, key)
		case "from":
			s.from = r.ref(v, key)
		case "stdin_from":
			s.stdinFrom = r.ref(v, key)
		case "inputs":
			s.inputs = r.inputs(v, key)
		case "outputs":
			s.outputs = r.outputs(v, key)
		case "build":
			s.build = r.build(k, v, key)
		case "agent":
			s.agent = r.agentStep(k, v, key)
		default:
			r.Fail(k, key, "unknown field")
		}
	})
	r.command(&s.f, "", n)
	switch {
	case s.agent != nil:
		r.agentOnly(s, keys)
		s.build = nil
	case s.build != nil:
		r.buildOnly(s, keys)
	}
	return s
}

// command checks that a step or the defaults (n) give at most one of run
// and sh.
func (r *reader) command(f *fields, prefix string, n *yaml.Node) {
	if f.run != nil && f.sh != nil {
		r.errs.add(f.lines["sh"], 0, yamlnode.Join(prefix, "sh"), "give run or sh, not both")
		f.sh = nil
	}
}

// group reads a group and its steps.
func (r *reader) group(n *yaml.Node) *docGroup {
	g := &docGroup{line: n.Line, mode: Sequential, lines: make(map[string]int)}
	var steps *yaml.Node
	r.Mapping(n, "", func(key string, k, v *yaml.Node) {
		g.lines[key] = v.Line
		switch key {
		case "group":
			g.id, g.line = r.id(v, key), k.Line
		case "mode":
			if s, ok := r.Str(v, key); ok {
				switch s {
				case Sequential, Parallel, Concurrent:
					g.mode = s
				default:
					r.Fail(v, key, "%q is not a mode (sequential, parallel or concurrent)", s)
				}
			}
		case "needs":
			g.needs = r.needs(v, key)
		case "max_parallel":
			if c, ok := r.count(v, key); ok {
				g.maxParallel = &c
			}
		case "budget":
			g.budget = r.budget(v, key, g.lines)
		case "steps":
			steps = v
			g.items = r.items(v, key)
		default:
			r.Fail(k, key, "unknown field")
		}
	})
	if steps == nil {
		r.Fail(n, "steps", "missing: a group needs at least one step")
	}
	if g.mode == Sequential {
		if g.maxParallel != nil {
			r.errs.add(g.lines["max_parallel"], 0, "max_parallel", "only parallel and concurrent groups take it")
		}
		if g.budget != nil {
			r.errs.add(g.lines["budget"], 0, "budget", "only parallel and concurrent groups take it")
		}
	}
	return g
}
