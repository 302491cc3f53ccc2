package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strings"
)

// Context says where a sandbox's paths are on the host.
type Context struct {
	// Workspace is the absolute host path of the project root: relative
	// patterns and relative request paths are anchored here.
	Workspace string `json:"workspace"`
	// Home is the absolute host path of the user's home: what ~ means.
	Home string `json:"home"`
	// Resolve makes the engine resolve symlinks on the host: Workspace,
	// Home and the roots once, when compiling, and every request path when
	// deciding.
	Resolve bool `json:"resolve,omitempty"`
	// ReadRoots and WriteRoots are host paths the caller binds into the
	// sandbox itself (moat run --ro and --rw, a create's binds): inside the
	// profile's ceiling like the workspace (WriteRoots are also readable),
	// while the built-in lists, the protected paths and every rule still
	// apply to what lies in them.
	ReadRoots  []string `json:"read_roots,omitempty"`
	WriteRoots []string `json:"write_roots,omitempty"`
	// NetAllow is the caller's own network allowlist (moat run
	// --allow-domain, a create's allow_domains): "example.com",
	// "*.example.com", "*", an IP address, or a CIDR prefix
	// ("10.0.0.0/8"); "domain:" and "cidr:" prefixes are accepted. Each
	// entry admits destinations like an allow Net rule of the user's file;
	// deny and ask rules of every layer still apply.
	NetAllow []string `json:"net_allow,omitempty"`
}

// NetEntryNamesAddress reports whether an allowlist entry (as
// NetAllowRule takes it) names IP addresses rather than host names: an
// address in any spelling inet_aton(3) accepts (127.1, 0x7f000001), an
// IPv6 address, or a CIDR range.
func NetEntryNamesAddress(entry string) (bool, error) {
	text, err := NetAllowRule(entry)
	if err != nil {
		return false, err
	}
	p, err := parseNetPattern(strings.TrimSuffix(strings.TrimPrefix(text, "Net("), ")"))
	if err != nil {
		return false, err
	}
	return p.ip || p.cidr.IsValid(), nil
}

// callerAllowlist is the File name of the rules made from Context.NetAllow.
const callerAllowlist = "allowlist"

// NetAllowRule parses one entry of a network allowlist (Context.NetAllow,
// moat run --allow-domain, --deny-domain) into the text of a Net rule:
// "*.github.com" → "Net(domain:*.github.com)", "10.0.0.0/8" →
// "Net(cidr:10.0.0.0/8)".
func NetAllowRule(entry string) (string, error) {
	e := strings.TrimSpace(entry)
	switch {
	case e == "":
		return "", errors.New("empty network entry")
	case strings.HasPrefix(e, "domain:") || strings.HasPrefix(e, "cidr:"):
	case strings.Contains(e, "/"):
		e = "cidr:" + e
	default:
		e = "domain:" + e
	}
	if _, err := parseNetPattern(e); err != nil {
		return "", fmt.Errorf("%q: %v", entry, err)
	}
	return "Net(" + e + ")", nil
}

// Effective is the compiled policy of all layers for one Context. It is
// immutable and safe for concurrent use.
type Effective struct {
	ctx      Context
	profile  Profile
	files    []*File
	rules    [Net + 1][]*bound
	wgrants  []*bound // allow Write rules of file layers, trusted only: extra writable roots
	ngrants  []*bound // allow Net rules of file layers: the allowlist
	srcs     []string // policy files (absolute): read-only with their parent directories
	protAnc  map[string]string
	bi       *builtins
	def      *Rule // the profile's default rule
	warnings []string
	order    int
	openNet  bool // the managed file permits network mode open
	// callerCIDRs are the ranges the managed file lets a caller's
	// allowlist name (allow_cidr_entries); managedName names that file.
	callerCIDRs []netip.Prefix
	managedName string
}

// bound is a rule compiled against the context.
type bound struct {
	r     *Rule
	p     *absPattern // Read, Write
	order int         // precedence: layer, file, position
}

// builtins are the built-in path lists bound to a context.
type builtins struct {
	never      []namedPattern // credentials and host secrets: neither read nor written
	credNames  []namedPattern // credential base names: never read (outside credExempt)
	credExempt []string
	sysRead    []string // untrusted: readable system directories
	runtime    []string // trusted: host directories a sandbox never sees
}

type namedPattern struct {
	name string
	p    *absPattern
	// coversWS: the entry holds the whole workspace; it then does not
	// apply inside the workspace (a warning says so).
	coversWS bool
}

// Built-in lists; the package documentation describes them.
var (
	// CredentialPaths are never readable nor writable (~ is Context.Home).
	CredentialPaths = []string{
		"~/.ssh", "~/.aws", "~/.config/gh", "~/.netrc", "~/.gnupg",
		"~/.docker/config.json", "~/.kube/config", "~/.git-credentials",
		"~/.npmrc", "~/.pypirc",
		"~/.config/gcloud", "~/.azure", "~/.password-store", "~/.local/share/keyrings",
		"~/.cargo/credentials", "~/.cargo/credentials.toml", "~/.vault-token",
	}
	// HostSecrets are never readable nor writable.
	HostSecrets = []string{
		"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
		"/etc/sudoers", "/etc/sudoers.d", "/etc/ssl/private", "/etc/ssh/ssh_host_*",
		"/var/lib/moat", "/run/moat",
	}
	// CredentialNames are base names never readable at any depth, except
	// under CredentialNameExempt.
	CredentialNames = []string{"*.pem", "*.key", "id_rsa*", "id_ed25519*", "id_ecdsa*", "*_token", ".env"}
	// CredentialNameExempt holds public certificates and packaged files.
	CredentialNameExempt = []string{
		"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
		"/etc/ssl/certs", "/etc/ca-certificates", "/etc/pki/ca-trust",
	}
	// SystemReadDirs are readable in the untrusted profile.
	SystemReadDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}
	// HostRuntimeDirs are not readable in the trusted profile (unless inside
	// the workspace or a writable root): the sandbox gets its own, and the
	// host's hold sockets, devices and other processes' data.
	HostRuntimeDirs = []string{"/proc", "/sys", "/dev", "/run", "/var/run", "/tmp", "/var/tmp"}
	// ShellRCFiles are read-only at any depth inside writable roots.
	ShellRCFiles = []string{
		".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
		".zshrc", ".zprofile", ".zshenv", ".zlogin", ".zlogout", ".inputrc",
	}
)

var rcFiles = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range ShellRCFiles {
		m[n] = true
	}
	return m
}()

// Standard locations of the policy files.
const (
	ManagedPath = "/etc/moat/policy.toml"
	ProjectPath = ".moat/policy.toml"        // relative to the workspace
	UserPath    = ".config/moat/policy.toml" // relative to the home
)

func (c Context) check() (Context, error) {
	for _, f := range []struct {
		name string
		p    *string
	}{{"workspace", &c.Workspace}, {"home", &c.Home}} {
		switch {
		case *f.p == "":
			return c, fmt.Errorf("policy: the %s is not set", f.name)
		case strings.IndexByte(*f.p, 0) >= 0:
			return c, fmt.Errorf("policy: the %s contains NUL", f.name)
		case !path.IsAbs(*f.p):
			return c, fmt.Errorf("policy: the %s %q is not an absolute path", f.name, *f.p)
		}
		*f.p = path.Clean(*f.p)
		if c.Resolve {
			r, err := resolvePath(*f.p, true)
			if err != nil {
				return c, fmt.Errorf("policy: resolving the %s: %w", f.name, err)
			}
			*f.p = r
		}
	}
	for _, n := range c.NetAllow {
		if _, err := NetAllowRule(n); err != nil {
			return c, fmt.Errorf("policy: network allowlist: %w", err)
		}
	}
	for _, roots := range []*[]string{&c.ReadRoots, &c.WriteRoots} {
		out := make([]string, 0, len(*roots))
		for _, p := range *roots {
			if p == "" || strings.IndexByte(p, 0) >= 0 || !path.IsAbs(p) {
				return c, fmt.Errorf("policy: root %q is not an absolute path", p)
			}
			p = path.Clean(p)
			if c.Resolve {
				r, err := resolvePath(p, true)
				if err != nil {
					return c, fmt.Errorf("policy: resolving the root %s: %w", p, err)
				}
				p = r
			}
			out = append(out, p)
		}
		*roots = out
	}
	return c, nil
}

// grants says whether a layer may widen: the profile "trusted", writable
// roots (allow Write) and the network allowlist (allow Net) come only from
// the operator's managed file and the user's own file. The project file
// lives in the workspace, which may be a repository of unknown origin or
// an agent's earlier work, so, like per-call rules, it can only narrow.
func grants(l Layer) bool { return l == Managed || l == User }

// Compile combines layers into the effective policy for a context. Files
// may come in any order; they are ranked managed > project > user > call
// (files of the same layer keep their order). nil files are skipped.
func Compile(c Context, files ...*File) (*Effective, error) {
	return compile(c, nil, files)
}

func compile(c Context, srcs []string, files []*File) (*Effective, error) {
	c, err := c.check()
	if err != nil {
		return nil, err
	}
	e := &Effective{ctx: c, protAnc: map[string]string{}}
	e.bi = newBuiltins(c)
	var fs []*File
	for l := Managed; l <= Call; l++ {
		for _, f := range files {
			if f != nil && f.Layer == l {
				fs = append(fs, f)
			}
		}
	}
	for _, f := range files {
		if f == nil {
			continue
		}
		if err := f.check(); err != nil {
			return nil, err
		}
	}
	def := []string{ManagedPath, path.Join(c.Home, UserPath), path.Join(c.Workspace, ProjectPath)}
	for _, s := range append(def, srcs...) {
		e.protect(s)
	}
	for _, f := range fs {
		if f.Path != "" {
			e.protect(f.Path)
		}
		e.add(f)
	}
	for i, n := range c.NetAllow {
		text, _ := NetAllowRule(n) // checked by c.check
		r, err := ParseRule(Allow, text)
		if err != nil {
			return nil, err
		}
		r.Layer, r.File, r.Index, r.seq = Call, callerAllowlist, i, i
		b := &bound{r: r, order: e.order}
		e.order++
		e.rules[Net] = append(e.rules[Net], b)
		e.ngrants = append(e.ngrants, b)
	}
	e.finish()
	return e, nil
}

// protect makes a policy file and its parent directories read-only (a
// parent could otherwise be renamed away and replaced).
func (e *Effective) protect(p string) {
	if p == "" || !path.IsAbs(p) {
		return
	}
	p = path.Clean(p)
	if e.ctx.Resolve {
		if r, err := resolvePath(p, true); err == nil {
			p = r
		}
	}
	for _, s := range e.srcs {
		if s == p {
			return
		}
	}
	e.srcs = append(e.srcs, p)
	why := "policy file " + p + " is read-only"
	e.protAnc[p] = why
	for d := path.Dir(p); ; d = path.Dir(d) {
		if _, ok := e.protAnc[d]; !ok {
			e.protAnc[d] = "directory " + d + " holds the policy file " + p + " and cannot be changed itself"
		}
		if d == "/" {
			break
		}
	}
}

func (e *Effective) add(f *File) {
	e.files = append(e.files, f)
	if f.Layer == Managed {
		e.openNet = e.openNet || f.OpenNetwork
		e.callerCIDRs = append(e.callerCIDRs[:len(e.callerCIDRs):len(e.callerCIDRs)], f.AllowCIDREntries...)
		if e.managedName == "" {
			e.managedName = f.Path
			if e.managedName == "" {
				e.managedName = f.Name
			}
		}
	}
	// A project or per-call layer can only narrow: only its "untrusted"
	// counts.
	if f.Profile != "" && stricter(f.Profile, e.profile) && (grants(f.Layer) || f.Profile == Untrusted) {
		e.profile = f.Profile
	}
	for _, r := range f.Rules {
		b := &bound{r: r, order: e.order}
		e.order++
		if r.path != nil {
			b.p = r.path.bind(e.ctx.Home, e.ctx.Workspace)
		}
		e.rules[r.Kind] = append(e.rules[r.Kind], b)
		if r.Effect == Allow && grants(f.Layer) {
			switch {
			case r.Kind == Write && !b.p.any:
				e.wgrants = append(e.wgrants, b)
			case r.Kind == Net:
				e.ngrants = append(e.ngrants, b)
			}
		}
	}
}

func (e *Effective) finish() {
	if e.profile == "" {
		e.profile = Untrusted
	}
	e.def = &Rule{Layer: Builtin, Effect: Allow, Text: "profile " + string(e.profile) + ": default"}
	e.warnings = e.computeWarnings()
}

// With returns the policy with one more layer of per-call rules (from
// ParseCall). The receiver is unchanged.
func (e *Effective) With(call *File) (*Effective, error) {
	if call == nil {
		return e, nil
	}
	if call.Layer != Call {
		return nil, errors.New("policy: With takes per-call rules (layer per-call)")
	}
	if err := call.check(); err != nil {
		return nil, err
	}
	n := *e
	n.files = append([]*File(nil), e.files...)
	for k := range n.rules {
		n.rules[k] = e.rules[k][:len(e.rules[k]):len(e.rules[k])]
	}
	n.wgrants = e.wgrants[:len(e.wgrants):len(e.wgrants)]
	n.ngrants = e.ngrants[:len(e.ngrants):len(e.ngrants)]
	n.add(call)
	n.finish()
	return &n, nil
}

func newBuiltins(c Context) *builtins {
	b := &builtins{credExempt: CredentialNameExempt, sysRead: SystemReadDirs, runtime: HostRuntimeDirs}
	for _, s := range append(append([]string{}, CredentialPaths...), HostSecrets...) {
		pp, err := parsePathPattern(s)
		if err != nil {
			panic("policy: bad builtin pattern " + s + ": " + err.Error())
		}
		a := pp.bind(c.Home, c.Workspace)
		b.never = append(b.never, namedPattern{name: s, p: a, coversWS: a.match(splitPath(c.Workspace))})
	}
	for _, s := range CredentialNames {
		pp, err := parsePathPattern(s)
		if err != nil {
			panic("policy: bad builtin pattern " + s + ": " + err.Error())
		}
		b.credNames = append(b.credNames, namedPattern{name: s, p: pp.bind(c.Home, c.Workspace)})
	}
	return b
}

// Profile is the effective profile: the strictest any layer declares
// (untrusted when none does).
func (e *Effective) Profile() Profile { return e.profile }

// Context is the context the policy was compiled for (Workspace and Home
// resolved when Resolve is set).
func (e *Effective) Context() Context { return e.ctx }

// Files are the layers, in precedence order.
func (e *Effective) Files() []*File { return append([]*File(nil), e.files...) }

// Warnings are what the policy says but the engine or the host cannot do,
// or does differently than a reader may expect. Show them to the operator.
func (e *Effective) Warnings() []string { return append([]string(nil), e.warnings...) }

func (e *Effective) computeWarnings() []string {
	var w []string
	ws, home := e.ctx.Workspace, e.ctx.Home
	if ws == "/" || under(home, ws) {
		w = append(w, fmt.Sprintf("the workspace %s contains the home %s: the whole home is writable; only the built-in lists keep credentials and rc files safe", ws, home))
	}
	for _, n := range e.bi.never {
		if n.coversWS {
			w = append(w, fmt.Sprintf("the workspace %s lies inside %s, which is otherwise never readable nor writable: inside the workspace it is", ws, n.name))
		}
	}
	hasExec := false
	for _, b := range e.rules[Exec] {
		if b.r.Effect != Allow {
			hasExec = true
		}
	}
	if hasExec {
		w = append(w, "Exec rules judge each command moat is asked to run (an argv, or every command of a shell string, including those inside sh -c, env, xargs and similar wrappers); they do not see what those programs run in turn (scripts, make, a shell reading stdin): the OS sandbox is what bounds those")
	}
	for _, f := range e.files {
		if f.Layer != Managed && len(f.AllowCIDREntries) > 0 {
			w = append(w, fmt.Sprintf("%s %s sets allow_cidr_entries: ignored, only the managed file can let callers name addresses", f.Layer, f.Name))
		}
		if f.Layer == Project && f.Profile == Trusted {
			w = append(w, fmt.Sprintf("project %s declares profile \"trusted\": ignored, the project layer can only narrow (declare it in the user or managed file)", f.Name))
		}
	}
	for _, b := range e.rules[Write] {
		r := b.r
		if r.Effect != Allow || r.Layer == Call {
			continue
		}
		if r.Layer == Project {
			if b.p.any || !under(b.p.prefix, ws) {
				w = append(w, fmt.Sprintf("%s (%s): the project layer cannot add writable roots", r, r.Source()))
			}
			continue
		}
		outside := b.p.any || !under(b.p.prefix, ws)
		switch {
		case !outside:
		case e.profile == Untrusted:
			w = append(w, fmt.Sprintf("%s (%s) reaches outside the workspace, which the untrusted profile never makes writable; declare profile = \"trusted\" to grant it", r, r.Source()))
		case b.p.any:
			w = append(w, fmt.Sprintf("%s (%s) names a base name at any depth: it grants nothing outside the workspace; anchor it (~/..., /...)", r, r.Source()))
		case !b.p.literal:
			w = append(w, fmt.Sprintf("%s (%s): the sandbox can only make %s writable as a whole; the pattern itself is enforced by the policy engine alone", r, r.Source(), b.p.prefix))
		}
		if !b.p.any && e.profile == Trusted {
			for _, d := range append(append([]string{}, HostRuntimeDirs...), SystemReadDirs...) {
				if under(b.p.prefix, d) || under(d, b.p.prefix) {
					w = append(w, fmt.Sprintf("%s (%s) makes the system directory %s writable", r, r.Source(), d))
					break
				}
			}
		}
	}
	for _, k := range []Kind{Read, Write} {
		for _, b := range e.rules[k] {
			if r := b.r; r.Effect != Allow && (b.p.any || !b.p.literal) {
				w = append(w, fmt.Sprintf("%s (%s) is a pattern, not a literal path: the sandbox can enforce it only where the runtime expands it (Roots lists it with literal=false); otherwise only requests judged by the policy engine are refused", r, r.Source()))
			}
		}
	}
	for _, b := range e.rules[Net] {
		r := b.r
		if r.Effect == Allow && r.Layer == Call && r.File != callerAllowlist {
			w = append(w, fmt.Sprintf("%s (%s): per-call rules cannot add to the network allowlist (give the sandbox an allowlist: moat run --allow-domain, a create's allow_domains)", r, r.Source()))
		}
		if r.Effect == Allow && r.Layer == Project {
			w = append(w, fmt.Sprintf("%s (%s): the project layer cannot add to the network allowlist", r, r.Source()))
		}
	}
	for _, b := range e.rules[Write] {
		r := b.r
		if r.Effect == Allow && r.Layer == Call && !b.p.any && !under(b.p.prefix, ws) {
			w = append(w, fmt.Sprintf("%s (%s): per-call rules cannot add writable roots", r, r.Source()))
		}
	}
	return w
}

// check makes sure a File is one that Parse or ParseCall could have made.
func (f *File) check() error {
	if f.Layer > Call {
		return fmt.Errorf("policy: file %s has layer %s", f.Name, f.Layer)
	}
	switch f.Profile {
	case "", Untrusted, Trusted:
	default:
		return fmt.Errorf("policy: file %s: unknown profile %q", f.Name, f.Profile)
	}
	for _, r := range f.Rules {
		ok := r != nil && r.Effect >= Allow && r.Effect <= Deny
		if ok {
			switch r.Kind {
			case Exec:
				ok = r.exec != nil
			case Read, Write:
				ok = r.path != nil
			case Net:
				ok = r.net != nil
			default:
				ok = false
			}
		}
		if !ok {
			return fmt.Errorf("policy: file %s holds a rule that was not made by ParseRule", f.Name)
		}
	}
	return nil
}
