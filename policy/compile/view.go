package compile

import (
	"path"
	"sort"
	"strings"

	"github.com/moat-sandbox/moat/sandbox"
)

// Tree is one host tree the sandbox sees.
type Tree struct {
	Host     string // host path ("" for the in-memory workspace)
	Target   string // sandbox path
	Writable bool
}

// View maps sandbox paths to host paths: the workspace, the binds and the
// system directories, which the sandbox sees at the same paths. Other
// sandbox paths (/tmp, the home, /dev, /proc) are the sandbox's own.
type View struct {
	trees []Tree // longest target first
}

// systemTrees are host directories every sandbox sees read-only at the
// same path (/etc filtered; what it hides is not there at all).
var systemTrees = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// NewView is the view of a spec (after Compile, to include its binds).
func NewView(spec *sandbox.Spec) *View {
	v := &View{}
	for _, d := range systemTrees {
		v.trees = append(v.trees, Tree{Host: d, Target: d})
	}
	v.trees = append(v.trees, Tree{Host: spec.Workspace, Target: sandbox.WorkspaceDir, Writable: true})
	for _, b := range spec.Binds {
		t := b.Target
		if t == "" {
			t = b.Source
		}
		v.trees = append(v.trees, Tree{Host: path.Clean(b.Source), Target: path.Clean(t), Writable: b.Writable})
	}
	sort.SliceStable(v.trees, func(i, j int) bool { return len(v.trees[i].Target) > len(v.trees[j].Target) })
	return v
}

// Trees lists the view's trees, longest target first.
func (v *View) Trees() []Tree { return append([]Tree(nil), v.trees...) }

// Host maps a clean absolute sandbox path to the policy's host path: the
// path on the host, or below sandbox.WorkspaceDir for an in-memory workspace.
// ok is false for the sandbox's own storage (/tmp, its home, /dev/shm,
// /proc, /dev), which holds nothing of the host.
func (v *View) Host(p string) (host string, ok bool) {
	p = path.Clean("/" + p)
	for _, t := range v.trees {
		rel, in := cut(p, t.Target)
		if !in {
			continue
		}
		base := t.Host
		if base == "" {
			base = sandbox.WorkspaceDir
		}
		return path.Join(base, rel), true
	}
	return "", false
}

// Sandbox maps a host path to where the sandbox sees it (the innermost
// tree holding it wins); ok is false when the sandbox does not see it.
func (v *View) Sandbox(host string) (p string, t Tree, ok bool) {
	best := -1
	for i, tr := range v.trees {
		if tr.Host == "" {
			continue
		}
		if _, in := cut(host, tr.Host); in && (best < 0 || len(tr.Host) > len(v.trees[best].Host)) {
			best = i
		}
	}
	if best < 0 {
		return "", Tree{}, false
	}
	t = v.trees[best]
	rel, _ := cut(host, t.Host)
	return path.Join(t.Target, rel), t, true
}

// cut returns p relative to dir when p is dir or below it.
func cut(p, dir string) (string, bool) {
	if p == dir {
		return "", true
	}
	if dir == "/" {
		return p[1:], true
	}
	if strings.HasPrefix(p, dir) && p[len(dir)] == '/' {
		return p[len(dir)+1:], true
	}
	return "", false
}
