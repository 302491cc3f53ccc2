package compile

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// Defaults of Options.
const (
	DefaultMaxWalk     = 5000
	DefaultMaxRestrict = 512
)

// Options tune Policy.
type Options struct {
	// MaxWalk bounds the directory entries visited while expanding
	// patterns, over all trees (default DefaultMaxWalk). Past it the rest
	// is not walked and Unenforced says so.
	MaxWalk int
	// MaxRestrict bounds the restrictions (mounts) added (default
	// DefaultMaxRestrict).
	MaxRestrict int
	// Hide are host paths hidden wherever the sandbox would see them,
	// whatever the policy says: the control plane's own data directory
	// (tokens, database, audit tape) when it is not under /var/lib/moat.
	Hide []string
	// DryRun changes nothing on the host (moat policy explain): a missing
	// submodule directory is reported as one that would be created.
	DryRun bool
}

// Report says what Policy did and what the kernel will not enforce.
type Report struct {
	Profile policy.Profile `json:"profile"`
	// Binds added to the spec (the trusted profile's host directories and
	// writable roots).
	Binds []sandbox.Bind `json:"binds,omitempty"`
	// Restrict added to the spec.
	Restrict []sandbox.Restriction `json:"restrict,omitempty"`
	// Unenforced lists, one line each, what only the policy engine
	// enforces (for the requests moat judges itself).
	Unenforced []string `json:"unenforced,omitempty"`
	// Walked counts the directory entries visited expanding patterns.
	Walked int `json:"walked"`
	// Created lists host entries Policy created so they could be
	// protected: the empty directory of a submodule that had none (as
	// git's checkout leaves an uninitialized one).
	Created []string `json:"created,omitempty"`
}

// ErrDenied is returned (wrapped in *DeniedError) when the spec itself asks
// for what the policy denies: a bind of a credential directory, a writable
// bind of a protected path.
var ErrDenied = errors.New("denied by policy")

// DeniedError says which part of a spec the policy refused and why.
type DeniedError struct {
	What     string // "--ro /root/.ssh"
	Decision policy.Decision
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s: %s by policy: %s", e.What, e.Decision.Effect, e.Decision.Reason)
}
func (e *DeniedError) Unwrap() error { return ErrDenied }

// Context is the policy context of a spec: its workspace (sandbox.WorkspaceDir
// for an in-memory one), the given home, and its binds as read and write
// roots; symlinks resolved on the host.
func Context(spec *sandbox.Spec, home string) policy.Context {
	c := policy.Context{Workspace: spec.Workspace, Home: home, Resolve: true}
	if c.Workspace == "" {
		c.Workspace = sandbox.WorkspaceDir
	}
	for _, b := range spec.Binds {
		if b.Writable {
			c.WriteRoots = append(c.WriteRoots, b.Source)
		} else {
			c.ReadRoots = append(c.ReadRoots, b.Source)
		}
	}
	return c
}

// Policy checks spec against eff and returns a copy of spec with the
// policy compiled in (binds and restrictions), and a report. eff must have
// been compiled for Context(spec, home). The spec's own binds must be
// allowed by the policy (a deny or ask is a *DeniedError: an operator's
// setup is not something to ask about).
func Policy(eff *policy.Effective, spec *sandbox.Spec, o Options) (*sandbox.Spec, *Report, error) {
	if o.MaxWalk <= 0 {
		o.MaxWalk = DefaultMaxWalk
	}
	if o.MaxRestrict <= 0 {
		o.MaxRestrict = DefaultMaxRestrict
	}
	// The paths are checked before anything maps them: the view and the
	// restrictions work on clean absolute paths only.
	if err := spec.Validate(); err != nil {
		return nil, nil, err
	}
	for _, h := range o.Hide {
		// The operator's setting, not the caller's input: not ErrInvalidSpec.
		if !path.IsAbs(h) || strings.IndexByte(h, 0) >= 0 {
			return nil, nil, fmt.Errorf("compile: hidden path %s is not an absolute path", sandbox.Quote(h, 80))
		}
	}
	for _, b := range spec.Binds {
		req, what := policy.ReadPath(b.Source), "--ro "+b.Source
		if b.Writable {
			req, what = policy.WritePath(b.Source), "--rw "+b.Source
		}
		// A symlink is never bound (the runtime opens the source without
		// following it): say so before the policy judges where it points.
		if fi, err := os.Lstat(b.Source); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, nil, fmt.Errorf("%w: %s is a symlink; bind the path it points to", sandbox.ErrInvalidSpec, what)
		}
		if d := eff.Decide(req); d.Effect != policy.Allow {
			return nil, nil, &DeniedError{What: what, Decision: d}
		}
	}
	out := *spec
	out.Binds = append([]sandbox.Bind(nil), spec.Binds...)
	out.Restrict = append([]sandbox.Restriction(nil), spec.Restrict...)
	c := &compiler{eff: eff, roots: eff.Roots(), o: o, rep: &Report{Profile: eff.Profile()}, spec: &out, seen: map[string]bool{}}
	for _, r := range out.Restrict {
		c.seen[r.Path] = true
	}
	if c.roots.Profile == policy.Trusted {
		c.trustedBinds()
	}
	c.view = NewView(&out)
	for _, h := range o.Hide {
		c.hideAlways(path.Clean(h))
	}
	c.restrict()
	if hasExecLimits(eff) {
		c.note("Exec rules are checked on the commands moat runs, not on what those run in turn")
	}
	sort.SliceStable(out.Restrict, func(i, j int) bool {
		a, b := out.Restrict[i].Path, out.Restrict[j].Path
		if da, db := strings.Count(a, "/"), strings.Count(b, "/"); da != db {
			return da < db
		}
		return a < b
	})
	return &out, c.rep, nil
}

type compiler struct {
	eff   *policy.Effective
	roots policy.Roots
	o     Options
	rep   *Report
	spec  *sandbox.Spec
	view  *View
	seen  map[string]bool // restricted sandbox paths
	full  bool            // MaxRestrict reached
	// gitSeen holds the .git entries gitRepo has handled.
	gitSeen map[string]bool
}

func (c *compiler) note(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	for _, u := range c.rep.Unenforced {
		if u == s {
			return
		}
	}
	c.rep.Unenforced = append(c.rep.Unenforced, s)
}

func (c *compiler) add(p string, m sandbox.RestrictMode) {
	if c.seen[p] {
		return
	}
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		c.note("%s cannot be restricted: not a clean absolute path below /", sandbox.Quote(p, 80))
		return
	}
	// Nothing to add below a hidden or read-only path. The walk up ends
	// for any input: path.Dir reaches "/" from an absolute path and "."
	// from anything else.
	for q := path.Dir(p); ; q = path.Dir(q) {
		for _, r := range c.spec.Restrict {
			if r.Path == q && (r.Mode == sandbox.Hide || (r.Mode == sandbox.ReadOnly && m != sandbox.Hide)) {
				return
			}
		}
		if q == "/" || q == "." || q == "" {
			break
		}
	}
	if len(c.rep.Restrict) >= c.o.MaxRestrict {
		if !c.full {
			c.full = true
			c.note("more than %d paths to restrict: the rest (from %s on) are enforced by the policy engine only", c.o.MaxRestrict, p)
		}
		return
	}
	c.seen[p] = true
	r := sandbox.Restriction{Path: p, Mode: m}
	c.spec.Restrict = append(c.spec.Restrict, r)
	c.rep.Restrict = append(c.rep.Restrict, r)
}

// hideAlways hides a host path where the sandbox sees it, or every tree
// the sandbox sees inside it.
func (c *compiler) hideAlways(h string) {
	if sp, t, ok := c.view.Sandbox(h); ok && t.Host != "" {
		if _, err := os.Lstat(h); err == nil && sp != t.Target {
			c.add(sp, sandbox.Hide)
			return
		}
	}
	for _, t := range c.view.Trees() {
		if t.Host != "" && within(t.Host, h) {
			c.add(t.Target, sandbox.Hide)
		}
	}
}

// hasExecLimits says whether any layer has a deny or ask Exec rule.
func hasExecLimits(eff *policy.Effective) bool {
	for _, f := range eff.Files() {
		for _, r := range f.Rules {
			if r.Kind == policy.Exec && r.Effect != policy.Allow {
				return true
			}
		}
	}
	return false
}
