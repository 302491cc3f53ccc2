package compile

import (
	"os"
	"path"
	"sort"
	"strings"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// gitSkip are directories below a .git that hold no hooks or config and
// can be large: not walked.
var gitSkip = map[string]bool{"objects": true, "lfs": true}

// restrict compiles DenyRead and ReadOnly into restrictions of the host
// trees the sandbox sees: literal entries directly, patterns by walking
// the caller's trees (the workspace and the binds given with the spec,
// and the trusted profile's writable roots) within the walk budget.
func (c *compiler) restrict() {
	var literal, patterns []item
	for i, list := range [][]policy.PathEntry{c.roots.DenyRead, c.roots.ReadOnly} {
		for _, e := range list {
			it := item{PathEntry: e, hide: i == 0}
			if e.Literal && e.Path != "" {
				literal = append(literal, it)
			} else {
				patterns = append(patterns, it)
			}
		}
	}
	missing := map[string]bool{}
	for _, it := range literal {
		c.literal(it, missing)
	}
	for _, t := range c.view.Trees() {
		if t.Host == "" || isSystem(t.Target) || c.trusted(t) {
			continue
		}
		if c.rep.Walked >= c.o.MaxWalk {
			c.note("%s was not searched for protected and credential files (walk budget of %d entries spent): only the policy engine refuses what patterns name there", t.Target, c.o.MaxWalk)
			continue
		}
		if t.Writable {
			c.enclosingRepo(t)
		}
		var ps []item
		for _, e := range patterns {
			if e.Path == "" || within(e.Path, t.Host) || within(t.Host, e.Path) {
				ps = append(ps, e)
			}
		}
		if len(ps) > 0 {
			c.walk(t, ps)
		}
	}
	targets := make([]string, 0, len(missing))
	for t := range missing {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		c.note("in %s, protected entries that do not exist yet (.git, .moat, shell rc files, policy files) can be created by the sandbox: a mount needs an existing entry; moat's own file operations refuse them; a repository the sandbox creates is its own, and git run in it on the host reads its configuration", t)
	}
	if c.roots.Profile == policy.Trusted {
		var ro []string
		for _, b := range c.rep.Binds {
			if !b.Writable {
				ro = append(ro, b.Target)
			}
		}
		if len(ro) > 0 {
			c.note("patterns (credential names such as *.pem and id_rsa*, deny Read patterns) are not searched for in the host directories shown read-only (%s): there only the policy engine refuses them", strings.Join(ro, ", "))
		}
	}
}

// trusted says whether t is one of the trusted profile's read-only host
// directories (not walked: too big to search at every start).
func (c *compiler) trusted(t Tree) bool {
	if t.Writable {
		return false
	}
	for _, b := range c.rep.Binds {
		if b.Target == t.Target {
			return true
		}
	}
	return false
}

func isSystem(target string) bool {
	for _, d := range systemTrees {
		if within(target, d) {
			return true
		}
	}
	return false
}

// item is an entry of DenyRead (hide) or of ReadOnly.
type item struct {
	policy.PathEntry
	hide bool
}

// literal compiles one literal entry: the path where the sandbox sees it.
func (c *compiler) literal(e item, missing map[string]bool) {
	hide := e.hide
	sp, t, ok := c.view.Sandbox(e.Path)
	if !ok {
		// The sandbox sees nothing of it, unless a tree lies inside it.
		for _, t := range c.view.Trees() {
			if t.Host != "" && within(t.Host, e.Path) && !isSystem(t.Target) {
				c.judge(t.Host, t.Target, t, hide, e.EntryOnly)
			}
		}
		return
	}
	if t.Host == "" || (!hide && !t.Writable) || sp == t.Target {
		return // a tree's root is a mount point already
	}
	if isSystem(t.Target) && strings.HasPrefix(e.Source, "builtin:") {
		return // the runtime's /etc leaves the host's secrets out
	}
	st, err := os.Lstat(e.Path)
	if err != nil {
		if !hide && os.IsNotExist(err) {
			missing[t.Target] = true
		}
		return
	}
	if st.Mode()&os.ModeSymlink != 0 {
		// A mount cannot go on a symlink; what it points to can, when the
		// sandbox sees that.
		target, err := policy.ResolvePath(e.Path)
		if err != nil {
			return
		}
		if tsp, tt, ok := c.view.Sandbox(target); ok && tt.Host != "" && tsp != tt.Target && (hide || tt.Writable) {
			if _, err := os.Lstat(target); err == nil {
				c.judge(target, tsp, tt, hide, e.EntryOnly)
			}
		}
		return
	}
	c.judge(e.Path, sp, t, hide, e.EntryOnly)
}

// judge restricts one existing host path the sandbox sees at sp, if the
// policy indeed refuses it there (the engine is the oracle: exemptions,
// caller-bound roots and the workspace's own rules all count).
func (c *compiler) judge(host, sp string, t Tree, hide, entryOnly bool) bool {
	if hide {
		if c.eff.Decide(policy.ReadPath(host)).Effect == policy.Allow {
			return false
		}
		c.add(sp, sandbox.Hide)
		return true
	}
	if !t.Writable || c.eff.Decide(policy.WritePath(host)).Effect == policy.Allow {
		return false
	}
	if entryOnly {
		c.add(sp, sandbox.Pin)
		return false
	}
	c.add(sp, sandbox.ReadOnly)
	if path.Base(host) == ".git" {
		c.gitRepo(host, sp, t)
	}
	return true
}

// walk searches one tree for paths the patterns name, breadth first (so a
// spent budget leaves the deepest levels unsearched, not a whole top-level
// directory). Patterns are indexed by their last segment, so most entries
// cost one map lookup and a few glob tests (a path a pattern matches ends
// with a component its last segment matches; the search stops at the
// first, shallowest match).
func (c *compiler) walk(t Tree, ps []item) {
	idx := newIndex(ps, t.Writable)
	type dir struct {
		host, sp string
		comps    []string
	}
	var root []string
	if t.Host != "/" {
		root = strings.Split(t.Host[1:], "/")
	}
	queue := []dir{{t.Host, t.Target, root}}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		f, err := openDir(d.host)
		if err != nil {
			continue // not a directory (a bound file, a FIFO: never opened), gone, unreadable
		}
		ents, _ := f.ReadDir(-1)
		f.Close()
		comps := append(d.comps[:len(d.comps):len(d.comps)], "")
		for _, e := range ents {
			if c.rep.Walked >= c.o.MaxWalk {
				c.note("%s was searched only in part for protected and credential files (walk budget of %d entries spent; breadth first): only the policy engine refuses what patterns name deeper", t.Target, c.o.MaxWalk)
				return
			}
			c.rep.Walked++
			name := e.Name()
			if e.Type()&os.ModeSymlink != 0 {
				continue // nothing can be mounted on a symlink; its target is judged where it lies
			}
			comps[len(comps)-1] = name
			h, s := d.host+"/"+name, d.sp+"/"+name
			if cands := idx.candidates(name); len(cands) > 0 && c.match(comps, h, s, t, cands) {
				continue
			}
			if e.IsDir() && !(gitSkip[name] && path.Base(d.host) == ".git") {
				queue = append(queue, dir{h, s, append([]string(nil), comps...)})
			}
		}
	}
}

// index finds the patterns whose last segment matches a name.
type index struct {
	byName map[string][]item
	globs  []globItem
	always []item
	buf    []item
}

type globItem struct {
	item
	match func(string) bool
}

func newIndex(ps []item, writable bool) *index {
	x := &index{byName: map[string][]item{}}
	for _, e := range ps {
		if !e.hide && !writable {
			continue // read-only entries matter only in writable trees
		}
		name, lit, match, any := e.Last()
		switch {
		case any:
			x.always = append(x.always, e)
		case lit:
			x.byName[name] = append(x.byName[name], e)
		default:
			x.globs = append(x.globs, globItem{e, match})
		}
	}
	return x
}

func (x *index) candidates(name string) []item {
	x.buf = append(append(x.buf[:0], x.byName[name]...), x.always...)
	for _, g := range x.globs {
		if g.match(name) {
			x.buf = append(x.buf, g.item)
		}
	}
	return x.buf
}

// match restricts h (components comps) if one of the candidate patterns
// names it exactly; true when what is below needs no more search.
func (c *compiler) match(comps []string, h, s string, t Tree, cands []item) bool {
	entry, whole := false, false
	for _, e := range cands {
		if !e.MatchComponents(comps, false) {
			continue
		}
		switch {
		case e.hide:
			if c.judge(h, s, t, true, false) {
				return true
			}
		case e.EntryOnly:
			entry = true
		default:
			whole = true
		}
	}
	if whole || entry {
		return c.judge(h, s, t, false, !whole)
	}
	return false
}

// within says whether p is dir or below it (clean absolute paths).
func within(p, dir string) bool {
	_, ok := cut(p, dir)
	return ok
}
