package admit

import (
	"path"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/compile"
	"github.com/moat-sandbox/moat/sandbox"
)

// Layers says where a front door's policy files are and whose home the
// policy speaks of. The project layer comes from each spec's workspace.
type Layers struct {
	// Home is the home of the policy's context (~ in rules, the
	// credential paths under it).
	Home string
	// Managed and User are the operator's and the user's files ("" for
	// none).
	Managed string
	User    string
}

// DefaultLayers are moat run's: /etc/moat/policy.toml and
// <home>/.config/moat/policy.toml (none without a home).
func DefaultLayers(home string) Layers {
	l := Layers{Home: home, Managed: policy.ManagedPath}
	if home != "" {
		l.User = path.Join(home, policy.UserPath)
	}
	return l
}

// Sources are the policy files of spec: the managed and user files, and
// the project file of spec's host workspace (none for an in-memory one).
func (l Layers) Sources(spec *sandbox.Spec) policy.Sources {
	src := policy.Sources{Managed: l.Managed, User: l.User}
	if spec.Workspace != "" {
		src.Project = path.Join(path.Clean(spec.Workspace), policy.ProjectPath)
	}
	return src
}

// Policy is the policy of one admission: the file layers loaded for a
// spec's context.
type Policy struct {
	Context policy.Context
	Sources policy.Sources
	// Watcher holds the layers and re-reads them when they change (the
	// daemon); Current is what they were at Load.
	Watcher *policy.Watcher
}

// Current is the file layers' policy now (as last loaded).
func (p *Policy) Current() *policy.Effective { return p.Watcher.Current() }

// LoadError is a policy that did not load.
type LoadError struct {
	Err error
	// Project is the error of the workspace's own file when that file is
	// invalid: the caller's fault, where an error of the managed or user
	// file is the operator's.
	Project error
}

func (e *LoadError) Error() string { return e.Err.Error() }
func (e *LoadError) Unwrap() error { return e.Err }

// Load loads the policy layers of spec, which must be valid
// (Spec.Validate) with absolute host paths. netAllow is a caller's
// network allowlist compiled into the context (moat run --allow-domain;
// the daemon adds a sandbox's with WithNetAllow instead, so that
// sandbox.network can replace it). An invalid file is a *LoadError.
func (l Layers) Load(spec *sandbox.Spec, netAllow []string) (*Policy, error) {
	pc := compile.Context(spec, l.Home)
	pc.NetAllow = netAllow
	src := l.Sources(spec)
	w, err := policy.NewWatcher(pc, src)
	if err != nil {
		le := &LoadError{Err: err}
		if src.Project != "" {
			// The caller's own file alone, read again without following
			// a link or blocking.
			if _, perr := policy.LoadFile(pc, policy.Project, src.Project); perr != nil {
				le.Project = perr
			}
		}
		return nil, le
	}
	return &Policy{Context: pc, Sources: src, Watcher: w}, nil
}

// Rules parses per-call rules: moat run's --profile untrusted, --allow,
// --ask and --deny; a create's or an exec's policy. name, when not "",
// names them in their source ("per-call sandbox deny[0]").
func Rules(c policy.CallRules, name string) (*policy.File, error) {
	f, err := policy.ParseCall(c)
	if err != nil {
		return nil, err
	}
	if name != "" {
		for _, r := range f.Rules {
			r.File = name
		}
	}
	return f, nil
}

// Narrow is eff with rules (from Rules or ParseNetwork) added in order as
// per-call layers, which can only narrow; nil ones are skipped.
func Narrow(eff *policy.Effective, rules ...*policy.File) (*policy.Effective, error) {
	for _, r := range rules {
		var err error
		if eff, err = eff.With(r); err != nil {
			return nil, err
		}
	}
	return eff, nil
}

// Exec is the request of a command: its argv, or sh as a shell line when
// it is not "".
func Exec(args []string, sh string) policy.Request {
	if sh != "" {
		return policy.ExecShell(sh)
	}
	return policy.ExecArgv(args...)
}

// Decide decides req with eff narrowed by a call's own rules (nil for
// none). An ask is the front door's to answer.
func Decide(eff *policy.Effective, call *policy.File, req policy.Request) (policy.Decision, error) {
	eff, err := Narrow(eff, call)
	if err != nil {
		return policy.Decision{}, err
	}
	return eff.Decide(req), nil
}

// Compile compiles eff into a copy of spec (compile.Compile): the binds,
// hidden, read-only and pinned paths the kernel enforces, and a report of
// what only the engine does. hide are host paths hidden whatever the
// policy says (the daemon's data directory). A bind the policy refuses is
// an *compile.DeniedError.
func Compile(eff *policy.Effective, spec *sandbox.Spec, hide []string) (*sandbox.Spec, *compile.Report, error) {
	return compile.Policy(eff, spec, compile.Options{Hide: hide})
}
