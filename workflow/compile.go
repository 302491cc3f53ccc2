package workflow

import (
	"slices"
)

// Bounds of a plan, so that a document cannot make the host that checks
// and runs it do unbounded work.
const (
	// MaxItems is the most steps and groups a plan may hold (those of
	// the document and those AddStep adds).
	MaxItems = 5000
	// maxWaits bounds the waits of all steps together (a group of n
	// steps needed by m steps makes n×m).
	maxWaits = 1 << 20
)

// Options are the facts of the host a document is checked against.
type Options struct {
	// CPUs is the number of CPUs of the host: a group's budget may not
	// give more. 0 skips the check.
	CPUs int
}

// Compile parses a workflow document (YAML; JSON is YAML too), checks it
// and resolves it into a Plan. On error it returns every problem it found,
// each a *Error with its line, joined in line order (errors.Join); every
// error matches ErrInvalid.
func Compile(data []byte, opts Options) (*Plan, error) {
	errs := &errList{}
	root := parseYAML(data, errs)
	if root == nil {
		return nil, errs.err()
	}
	r := newReader(errs)
	doc := r.parseDocument(data, root)
	p := &Plan{Name: doc.name, defaults: doc.defaults, agents: doc.agents, children: make(map[string][]string)}
	b := &builder{
		p:      p,
		errs:   errs,
		opts:   opts,
		first:  make(map[string]*item),
		steps:  make(map[string]*docStep),
		groups: make(map[string]*docGroup),
	}
	b.ids(doc.items)
	b.place(doc.items, "", nil)
	if n := len(p.Steps) + len(p.Groups); n > MaxItems {
		errs.add(0, 0, "steps", "%d steps and groups: at most %d", n, MaxItems)
		return nil, errs.err()
	}
	b.check()
	if !errs.empty() {
		return nil, errs.err()
	}
	return p, nil
}

// builder places a document's items in a plan and checks what refers to
// what.
type builder struct {
	p    *Plan
	errs *errList
	opts Options
	// first maps every id given to the first item with it.
	first map[string]*item
	// steps and groups are the sources of the plan's items, for the
	// lines of their fields.
	steps  map[string]*docStep
	groups map[string]*docGroup
}

// ids records the first item of each id, in document order (steps and
// groups share one namespace), and reports the ids given again.
func (b *builder) ids(items []*item) {
	for _, it := range items {
		if id := it.id(); id != "" {
			if f, dup := b.first[id]; dup {
				field := "id"
				if it.group != nil {
					field = "group"
				}
				b.errs.add(it.line(), 0, field, "%q is already the id of the item at line %d", id, f.line())
			} else {
				b.first[id] = it
			}
		}
		if it.group != nil {
			b.ids(it.group.items)
		}
	}
}

// place adds items to the plan under the group parent ("" = top level);
// enclosing are the groups around them, innermost first. An item without
// a valid id, or with the id of an item before it, is left out with its
// steps.
func (b *builder) place(items []*item, parent string, enclosing []string) {
	for _, it := range items {
		id := it.id()
		if id == "" || b.first[id] != it {
			continue
		}
		b.p.children[parent] = append(b.p.children[parent], id)
		if s := it.step; s != nil {
			b.steps[id] = s
			b.p.Steps = append(b.p.Steps, &PlanStep{
				Step:   resolve(s, b.p.defaults, b.errs),
				Group:  parent,
				Groups: slices.Clone(enclosing),
			})
			continue
		}
		g := it.group
		b.groups[id] = g
		b.p.Groups = append(b.p.Groups, &Group{
			ID:          id,
			Mode:        g.mode,
			Needs:       refIDs(g.needs),
			MaxParallel: or(g.maxParallel, nil, 0),
			Budget:      g.budget,
			Parent:      parent,
			Line:        g.line,
		})
		b.place(g.items, id, append([]string{id}, enclosing...))
	}
}

// refIDs returns the ids of refs.
func refIDs(refs []ref) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.id)
	}
	return out
}
