package enforce

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
	var walked []string
	for _, t := range c.view.Trees() {
		if t.Host == "" || isSystem(t.Target) || c.trusted(t) {
			continue
		}
		if c.rep.Walked >= c.o.MaxWalk {
			c.note("%s was not searched for protected and credential files (walk budget of %d entries spent): only the policy engine refuses what patterns name there", t.Target, c.o.MaxWalk)
			continue
		}
		var ps []item
		for _, e := range patterns {
			if e.Path == "" || within(e.Path, t.Host) || within(t.Host, e.Path) {
				ps = append(ps, e)
			}
		}
		if len(ps) > 0 {
			c.walk(t, ps)
			walked = append(walked, t.Target)
		}
	}
	targets := make([]string, 0, len(missing))
	for t := range missing {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		c.note("in %s, protected entries that do not exist yet (.git, .git/hooks, .git/config, .moat, shell rc files, policy files) can be created by the sandbox: a mount needs an existing entry; moat's own file operations refuse them", t)
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
		if path.Base(host) == ".git" {
			c.gitHooks(host, sp)
		}
		return false
	}
	c.add(sp, sandbox.ReadOnly)
	return true
}

// walk searches one tree for paths the patterns name.
func (c *compiler) walk(t Tree, ps []item) {
	var hide, ro []policy.PathEntry
	for _, e := range ps {
		if e.hide {
			hide = append(hide, e.PathEntry)
		} else if t.Writable {
			ro = append(ro, e.PathEntry)
		}
	}
	var comps []string
	if t.Host != "/" {
		comps = strings.Split(t.Host[1:], "/")
	}
	var visit func(host, sp string) bool
	visit = func(host, sp string) bool {
		ents, err := os.ReadDir(host)
		if err != nil {
			return true
		}
		for _, d := range ents {
			if c.rep.Walked >= c.o.MaxWalk {
				c.note("%s was searched only in part for protected and credential files (walk budget of %d entries spent): only the policy engine refuses what patterns name in the rest", t.Target, c.o.MaxWalk)
				return false
			}
			c.rep.Walked++
			if d.Type()&os.ModeSymlink != 0 {
				continue // nothing can be mounted on a symlink; its target is judged where it lies
			}
			comps = append(comps, d.Name())
			h, s := host+"/"+d.Name(), sp+"/"+d.Name()
			if !c.match(comps, h, s, t, hide, ro) && d.IsDir() && !(gitSkip[d.Name()] && path.Base(host) == ".git") {
				if !visit(h, s) {
					return false
				}
			}
			comps = comps[:len(comps)-1]
		}
		return true
	}
	visit(t.Host, t.Target)
}

// match restricts h (components comps) if a pattern names it; true when
// what is below needs no more search.
func (c *compiler) match(comps []string, h, s string, t Tree, hide, ro []policy.PathEntry) bool {
	for _, e := range hide {
		if e.MatchComponents(comps, true) {
			if c.judge(h, s, t, true, false) {
				return true
			}
			break
		}
	}
	entry, whole := false, false
	for _, e := range ro {
		switch {
		case e.EntryOnly && e.MatchComponents(comps, false):
			entry = true
		case !e.EntryOnly && e.MatchComponents(comps, true):
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

// gitHooks makes sure a repository's hooks directory exists so it can be
// mounted read-only: without one, the sandbox could create .git/hooks and
// plant a hook that runs when someone uses the repository on the host.
// git treats an empty hooks directory like a missing one. It is created
// beneath the .git directory without following symlinks, owned like it.
func (c *compiler) gitHooks(gitDir, sp string) {
	created, err := mkdirOwned(gitDir, "hooks")
	if err != nil {
		c.note("%s/hooks could not be created to protect it (%v): the sandbox can create it; moat's own file operations refuse it", sp, err)
		return
	}
	if created {
		c.rep.Created = append(c.rep.Created, path.Join(gitDir, "hooks"))
	}
}
