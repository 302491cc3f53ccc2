package compile

import (
	"os"
	"path"
	"strings"

	"github.com/moat-sandbox/moat/sandbox"
)

// Git on the host reads configuration and programs from more places than
// .git/config and .git/hooks: a commondir file, the git directory a .git
// file names, config files and hooks of submodules and worktrees,
// info/attributes, objects/info/alternates, and the .git of every
// populated submodule (git status recurses into it). A sandbox that can
// write any of them can make the next git command a person runs in the
// workspace run its commands. So every .git the sandbox sees in a writable
// tree is read-only as a whole (the policy's ReadOnly entries), and
// gitRepo protects what a .git leads to beyond itself:
//
//   - a .git file (a submodule's or a linked worktree's) names the git
//     directory git uses: that directory is read-only too, where the
//     sandbox sees it;
//   - each gitlink (submodule) of the index whose directory has no .git
//     yet: a .git created there would be entered by git status on the
//     host, so the directory is read-only (created empty when missing,
//     as git leaves an uninitialized submodule);
//   - the directories between the worktree and each of these are pinned,
//     so none can be renamed away and rebuilt with a .git of the
//     sandbox's choosing.
//
// An allowlist of what a commit writes (objects, refs, the index, HEAD)
// cannot be enforced with mounts: git replaces those files by renaming
// lock files in .git itself, so .git would have to stay writable, and
// then any name can be created in it (commondir); and a writable index
// can declare a gitlink anywhere, whose .git the sandbox then creates.
// Commits are made on the host.

// gitRepo protects what the .git at host (seen at sp in tree t, read-only
// already) leads git to. Each .git is handled once.
func (c *compiler) gitRepo(host, sp string, t Tree) {
	if c.gitSeen == nil {
		c.gitSeen = map[string]bool{}
	}
	if c.gitSeen[host] {
		return
	}
	c.gitSeen[host] = true
	gitDir := host
	if isRegular(host) {
		dir, ok := c.gitFileTarget(host, sp)
		if !ok {
			return
		}
		gitDir = dir
	}
	links, err := readGitlinks(gitDir)
	if err != nil {
		c.note("%s: the index could not be read (%v): submodule directories without a .git are not protected, a .git created in one can make git on the host run the sandbox's commands", sp, err)
		return
	}
	worktree, wsp := path.Dir(host), path.Dir(sp)
	for _, l := range links {
		c.gitlink(worktree, wsp, l, t)
	}
}

// enclosingRepo protects, in a writable tree that lies inside a
// repository of the host (a workspace that is a directory of a project),
// the directories of that repository's submodules without a .git:
// git status at the repository's top would enter a .git created there.
func (c *compiler) enclosingRepo(t Tree) {
	for d := path.Dir(t.Host); ; d = path.Dir(d) {
		g := path.Join(d, ".git")
		if exists(g) {
			gitDir := g
			if isRegular(g) {
				b, err := readSmallRegular(g, maxGitFile)
				target, ok := gitFileDir(b, d)
				if err != nil || !ok {
					return
				}
				gitDir = target
			}
			c.note("%s is a directory of the repository %s: a .git the sandbox creates in it is a repository of its own, and git run there on the host reads its configuration", t.Target, d)
			links, err := readGitlinks(gitDir)
			if err != nil {
				c.note("%s: the index could not be read (%v): submodule directories in %s are not protected", g, err, t.Target)
				return
			}
			for _, l := range links {
				if within(path.Join(d, l), t.Host) && path.Join(d, l) != t.Host {
					rel, _ := cut(path.Join(d, l), t.Host)
					c.gitlink(t.Host, t.Target, rel, t)
				}
			}
			return
		}
		if d == "/" || d == "." {
			return
		}
	}
}

// gitFileTarget reads a .git file ("gitdir: DIR") and makes DIR read-only
// where the sandbox sees it. ok is false when there is nothing more to
// protect through it (DIR unseen by the sandbox, or unusable).
func (c *compiler) gitFileTarget(host, sp string) (string, bool) {
	b, err := readSmallRegular(host, maxGitFile)
	if err != nil {
		c.note("%s: not read (%v): the git directory it names is not protected", sp, err)
		return "", false
	}
	target, ok := gitFileDir(b, path.Dir(host))
	if !ok {
		return "", false // git refuses it too
	}
	tsp, tt, seen := c.view.Sandbox(target)
	if !seen || tt.Host == "" {
		return target, true // out of the sandbox's reach; its index still names gitlinks here
	}
	if !tt.Writable {
		return target, true
	}
	if !noSymlinks(tt.Host, target) || !isDir(target) {
		c.note("%s names %s, which is not a plain directory: not protected; git refuses a git directory it cannot use", sp, tsp)
		return "", false
	}
	c.pinParents(tt.Target, tsp)
	c.add(tsp, sandbox.ReadOnly)
	return target, true
}

// maxGitFile bounds what is read of a .git file.
const maxGitFile = 4096

// gitFileDir is the git directory a .git file's content b names ("gitdir:
// DIR", relative to dir, the file's directory), clean and absolute.
func gitFileDir(b []byte, dir string) (string, bool) {
	line, _, _ := strings.Cut(string(b), "\n")
	target, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "gitdir: ")
	if !ok || target == "" || strings.ContainsRune(target, 0) {
		return "", false
	}
	if !path.IsAbs(target) {
		target = path.Join(dir, target)
	}
	return path.Clean(target), true
}

// gitlink protects the directory of one submodule (rel, below the
// worktree) unless it has a .git, which the walk makes read-only.
func (c *compiler) gitlink(worktree, wsp, rel string, t Tree) {
	host, sp := worktree+"/"+rel, wsp+"/"+rel
	if !within(host, t.Host) || !noSymlinks(worktree, path.Dir(host)) {
		return // git does not enter a submodule through a symlink either
	}
	if exists(host + "/.git") {
		if noSymlinks(worktree, host+"/.git") {
			c.pinParents(wsp, sp)
			// The walk finds it as well, unless its budget ran out first.
			c.judge(host+"/.git", sp+"/.git", t, false, false)
		}
		return
	}
	if isSymlink(host) {
		return // git does not enter it
	}
	if isRegular(host) {
		// Not a directory now; read-only, it cannot be replaced by one.
		c.pinParents(wsp, sp)
		c.add(sp, sandbox.ReadOnly)
		return
	}
	if !c.mkdirs(worktree, rel) {
		c.note("%s (a submodule without a .git) could not be created to protect it: the sandbox can create a .git there", sp)
		return
	}
	c.pinParents(wsp, sp)
	c.add(sp, sandbox.ReadOnly)
}

// mkdirs creates the missing directories of rel below base, each owned
// like its parent, as git's checkout leaves an uninitialized submodule.
// False when one cannot be made (a file or a symlink is in the way).
func (c *compiler) mkdirs(base, rel string) bool {
	d := base
	for _, x := range strings.Split(rel, "/") {
		next := d + "/" + x
		switch {
		case isDir(next):
		case exists(next):
			return false
		case c.o.DryRun:
			c.rep.Created = append(c.rep.Created, next+" (would be created)")
		default:
			created, err := mkdirOwned(d, x)
			if err != nil {
				return false
			}
			if created {
				c.rep.Created = append(c.rep.Created, next)
			}
		}
		d = next
	}
	return true
}

// pinParents pins the directories strictly between top and p (sandbox
// paths), so none can be renamed or removed: a restriction moves with a
// renamed parent and frees its old name.
func (c *compiler) pinParents(top, p string) {
	rel, ok := cut(p, top)
	if !ok || rel == "" {
		return
	}
	d := top
	parts := strings.Split(rel, "/")
	for _, x := range parts[:len(parts)-1] {
		d += "/" + x
		c.add(d, sandbox.Pin)
	}
}

func lstatMode(p string) (os.FileMode, bool) {
	fi, err := os.Lstat(p)
	if err != nil {
		return 0, false
	}
	return fi.Mode(), true
}

func exists(p string) bool    { _, ok := lstatMode(p); return ok }
func isDir(p string) bool     { m, ok := lstatMode(p); return ok && m.IsDir() }
func isRegular(p string) bool { m, ok := lstatMode(p); return ok && m.IsRegular() }
func isSymlink(p string) bool { m, ok := lstatMode(p); return ok && m&os.ModeSymlink != 0 }

// noSymlinks says whether no component of p below root (both clean and
// absolute, p within root) is a symlink; missing components are not.
func noSymlinks(root, p string) bool {
	rel, ok := cut(p, root)
	if !ok {
		return false
	}
	d := root
	for _, x := range strings.Split(rel, "/") {
		if x == "" {
			continue
		}
		d += "/" + x
		if isSymlink(d) {
			return false
		}
	}
	return true
}
