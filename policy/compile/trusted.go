package compile

import (
	"os"
	"path"
	"slices"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// notShown are host directories of "/" the trusted profile does not bind:
// the sandbox has its own (or they hold nothing to read).
var notShown = []string{"/workspace", "/lost+found", "/boot"}

// trustedBinds shows the host to a trusted sandbox: every directory of "/"
// read-only (each of /home's separately: the sandbox has its own
// /home/sandbox), except the system directories the runtime binds anyway,
// the host's runtime directories and what the policy does not let it
// read; the home on its own (so its files map to the sandbox user); and
// the writable roots of allow Write rules.
func (c *compiler) trustedBinds() {
	taken := map[string]bool{sandbox.WorkspaceDir: true}
	for _, b := range c.spec.Binds {
		t := b.Target
		if t == "" {
			t = b.Source
		}
		taken[path.Clean(t)] = true
	}
	mi := readMountinfo()
	bind := func(p string, writable bool) {
		if taken[p] {
			return
		}
		if !mi.idmappable(p) {
			c.note("%s is not shown: its filesystem (or one mounted below it) does not support idmapped mounts", p)
			return
		}
		taken[p] = true
		b := sandbox.Bind{Source: p, Target: p, Writable: writable}
		c.spec.Binds = append(c.spec.Binds, b)
		c.rep.Binds = append(c.rep.Binds, b)
	}
	var dirs []string
	for _, name := range listDirs("/") {
		p := "/" + name
		switch {
		case slices.Contains(systemTrees, p), slices.Contains(policy.HostRuntimeDirs, p), slices.Contains(notShown, p):
		case p == "/home":
			for _, u := range listDirs("/home") {
				if u != "sandbox" {
					dirs = append(dirs, path.Join(p, u))
				}
			}
		default:
			dirs = append(dirs, p)
		}
	}
	home := c.eff.Context().Home
	for _, p := range dirs {
		if c.eff.Decide(policy.ReadPath(p)).Effect == policy.Allow {
			bind(p, false)
		}
	}
	// The home bound on its own maps its owner's files to the sandbox user.
	if st, err := os.Stat(home); err == nil && st.IsDir() && !slices.Contains(dirs, home) && c.eff.Decide(policy.ReadPath(home)).Effect == policy.Allow {
		for _, b := range c.rep.Binds {
			if within(home, b.Source) {
				bind(home, false)
				break
			}
		}
	}
	ws := c.eff.Context().Workspace
	for _, e := range c.roots.Writable {
		if e.Path == "" || e.Path == ws || slices.Contains(c.eff.Context().WriteRoots, e.Path) {
			continue
		}
		st, err := os.Stat(e.Path)
		if err != nil || !st.IsDir() {
			c.note("writable root %s (%s) does not exist or is not a directory: not bound", e.Path, e.Source)
			continue
		}
		if !e.Literal {
			c.note("%s is writable as a whole in the sandbox: the pattern %s (%s) is enforced by the policy engine only", e.Path, e.Pattern, e.Source)
		}
		if c.eff.Decide(policy.WritePath(e.Path)).Effect != policy.Allow && e.Literal {
			c.note("writable root %s is refused by another rule: not bound writable", e.Path)
			continue
		}
		delete(taken, e.Path) // a writable root replaces a read-only bind of itself
		for i, b := range c.spec.Binds {
			if b.Target == e.Path && !b.Writable {
				c.spec.Binds = slices.Delete(c.spec.Binds, i, i+1)
				break
			}
		}
		for i, b := range c.rep.Binds {
			if b.Target == e.Path && !b.Writable {
				c.rep.Binds = slices.Delete(c.rep.Binds, i, i+1)
				break
			}
		}
		bind(e.Path, true)
	}
}

// listDirs lists the directories (not symlinks) of dir, sorted.
func listDirs(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}
