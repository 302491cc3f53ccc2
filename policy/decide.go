package policy

import (
	"fmt"
	"net/netip"
	"path"
	"strings"

	"github.com/moat-sandbox/moat/display"
)

// Request is one thing an agent wants to do.
type Request struct {
	Kind Kind `json:"kind"`
	// Argv is a command to run as an argument vector (Exec). It is not
	// parsed by a shell, but wrappers such as env, sh -c and xargs are
	// still looked into.
	Argv []string `json:"argv,omitempty"`
	// Command is a shell command string (Exec); every command in it is
	// judged. Set Argv or Command, not both.
	Command string `json:"command,omitempty"`
	// Path is a host path (Read, Write): absolute, "~/..." (the home), or
	// relative to the workspace.
	Path string `json:"path,omitempty"`
	// Host is a host name or IP address, optionally with ":port" (Net).
	Host string `json:"host,omitempty"`
}

// ExecArgv is an Exec request for an argument vector.
func ExecArgv(argv ...string) Request {
	if argv == nil {
		argv = []string{}
	}
	return Request{Kind: Exec, Argv: argv}
}

// ExecShell is an Exec request for a shell command string.
func ExecShell(command string) Request { return Request{Kind: Exec, Command: command} }

// ReadPath is a Read request.
func ReadPath(p string) Request { return Request{Kind: Read, Path: p} }

// WritePath is a Write request.
func WritePath(p string) Request { return Request{Kind: Write, Path: p} }

// NetHost is a Net request.
func NetHost(host string) Request { return Request{Kind: Net, Host: host} }

// ParseRequest reads a request written like a rule: `Exec(git push origin)`
// (a shell string), `Read(~/.ssh/id_rsa)`, `Write(src/main.go)`,
// `Net(github.com:443)` (also `Net(domain:github.com)`).
func ParseRequest(s string) (Request, error) {
	t := strings.TrimSpace(s)
	open := strings.IndexByte(t, '(')
	if open < 0 || !strings.HasSuffix(t, ")") {
		return Request{}, fmt.Errorf("policy: want Kind(...), e.g. Exec(git push) or Read(~/.ssh/id_rsa): %q", s)
	}
	var k Kind
	if err := k.UnmarshalText([]byte(strings.TrimSpace(t[:open]))); err != nil {
		return Request{}, fmt.Errorf("policy: %w", err)
	}
	arg := strings.TrimSpace(t[open+1 : len(t)-1])
	switch k {
	case Exec:
		return ExecShell(arg), nil
	case Read:
		return ReadPath(arg), nil
	case Write:
		return WritePath(arg), nil
	default:
		return NetHost(strings.TrimPrefix(arg, "domain:")), nil
	}
}

// String writes the request like a rule: Exec(...), Read(...), ...
func (r Request) String() string {
	switch r.Kind {
	case Exec:
		if r.Argv != nil {
			// Shell words, so that ["rm -rf /"] and ["rm", "-rf", "/"]
			// never read alike; controls stay raw (display escapes them).
			return "Exec(" + display.Join(r.Argv) + ")"
		}
		return "Exec(" + r.Command + ")"
	case Read, Write:
		return r.Kind.String() + "(" + r.Path + ")"
	case Net:
		return "Net(" + r.Host + ")"
	}
	return fmt.Sprintf("Request(kind %d)", r.Kind)
}

// Decision is the engine's answer to one request.
type Decision struct {
	Request Request `json:"request"`
	// Effect is Allow, Ask or Deny (never None).
	Effect Effect `json:"effect"`
	// Rule is the rule that decided: the first, by precedence (managed,
	// project, user, per-call, then file order), of the matching rules with
	// the winning effect; or a builtin rule (Layer Builtin) for a request
	// error, a protected path, the profile's ceiling, or its default.
	Rule *Rule `json:"rule"`
	// Reason says it in a sentence an agent can act on.
	Reason string `json:"reason"`
	// Invalid is set when the request itself was bad (denied).
	Invalid bool `json:"invalid,omitempty"`
	// Path is the path that decided (Read, Write): cleaned, and resolved
	// when the context resolves symlinks.
	Path string `json:"path,omitempty"`
	// Host is the normalized host (Net).
	Host string `json:"host,omitempty"`
	// Commands are the commands judged (Exec), in order: each command of a
	// shell string and what its wrappers run. Command is the one that
	// decided.
	Commands []CommandDecision `json:"commands,omitempty"`
	Command  string            `json:"command,omitempty"`
}

// CommandDecision is the decision on one command of an Exec request.
type CommandDecision struct {
	Command   string `json:"command"` // normalized words joined by single spaces
	Uncertain bool   `json:"uncertain,omitempty"`
	Why       string `json:"why,omitempty"` // why it is uncertain
	Effect    Effect `json:"effect"`
	Rule      *Rule  `json:"rule"`
}

// verdict accumulates matching rules: the most restrictive effect, and
// the first rule by precedence with that effect.
type verdict struct {
	eff   Effect
	rule  *Rule
	order int
}

func (v *verdict) add(b *bound) {
	e := b.r.Effect
	if e > v.eff || (e == v.eff && b.order < v.order) {
		v.eff, v.rule, v.order = e, b.r, b.order
	}
}

func builtin(eff Effect, text string) *Rule {
	return &Rule{Layer: Builtin, Effect: eff, Text: text}
}

func (e *Effective) invalid(r Request, format string, a ...any) Decision {
	msg := fmt.Sprintf(format, a...)
	return Decision{Request: r, Effect: Deny, Invalid: true, Rule: builtin(Deny, "invalid request: "+msg),
		Reason: "denied: invalid request: " + msg}
}

// Decide judges one request against the effective policy.
func (e *Effective) Decide(r Request) Decision {
	switch r.Kind {
	case Exec:
		return e.decideExec(r)
	case Read, Write:
		return e.decidePath(r)
	case Net:
		return e.decideNet(r)
	}
	return e.invalid(r, "unknown request kind %d", r.Kind)
}

// ruleReason describes a decision taken by a rule of a layer.
func ruleReason(eff Effect, what string, r *Rule) string {
	var head string
	switch eff {
	case Deny:
		head = "denied: "
	case Ask:
		head = "needs approval: "
	default:
		head = "allowed: "
	}
	return fmt.Sprintf("%s%s matches %s (%s)", head, what, r, r.Source())
}

// ---- paths ----

// anchorPath makes a request path absolute: "~" and "~/..." are in the
// home, other relative paths in the workspace.
func (e *Effective) anchorPath(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("empty path")
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("path contains a NUL byte")
	case p == "~" || strings.HasPrefix(p, "~/"):
		p = e.ctx.Home + p[1:]
	case !strings.HasPrefix(p, "/"):
		p = e.ctx.Workspace + "/" + p
	}
	if !path.IsAbs(p) {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	return p, nil
}

func (e *Effective) decidePath(r Request) Decision {
	raw, err := e.anchorPath(r.Path)
	if err != nil {
		return e.invalid(r, "%v", err)
	}
	if !e.ctx.Resolve {
		return e.judgePath(r, path.Clean(raw), "")
	}
	// The directory entry (what a rename, delete or atomic replace acts
	// on) and what it points to (what a read or write reaches): both must
	// pass.
	entry, err := resolvePath(raw, false)
	if err != nil {
		return e.invalid(r, "cannot resolve %s: %v", r.Path, err)
	}
	full, err := resolvePath(raw, true)
	if err != nil {
		return e.invalid(r, "cannot resolve %s: %v", r.Path, err)
	}
	lex := path.Clean(raw)
	note := func(p string) string {
		if p != lex {
			return " (" + r.Path + " resolves to " + p + ")"
		}
		return ""
	}
	d := e.judgePath(r, entry, note(entry))
	if full != entry {
		if d2 := e.judgePath(r, full, note(full)); d2.Effect > d.Effect {
			d = d2
		}
	}
	return d
}

func (e *Effective) judgePath(r Request, p, note string) Decision {
	comps := splitPath(p)
	what := r.Kind.String() + " " + p + note
	deny := func(rule string, reason string) Decision {
		return Decision{Request: r, Effect: Deny, Rule: builtin(Deny, rule), Path: p, Reason: "denied: " + what + ": " + reason}
	}
	if r.Kind == Write {
		if rule, why, ok := e.protected(p, comps); ok {
			return deny(rule, why)
		}
	}
	if rule, why, ok := e.ceiling(r.Kind, p, comps); !ok {
		return deny(rule, why)
	}
	var v verdict
	for _, b := range e.rules[r.Kind] {
		if b.p.match(comps) {
			v.add(b)
		}
	}
	if v.eff == None {
		return Decision{Request: r, Effect: Allow, Rule: e.def, Path: p,
			Reason: "allowed: " + what + ": no rule matches and the " + string(e.profile) + " profile permits it"}
	}
	return Decision{Request: r, Effect: v.eff, Rule: v.rule, Path: p, Reason: ruleReason(v.eff, what, v.rule)}
}

// protected reports whether writing p is forbidden by the built-in list of
// read-only paths.
func (e *Effective) protected(p string, comps []string) (rule, why string, ok bool) {
	if why, ok := e.protAnc[p]; ok {
		return "builtin: policy files are read-only", why, true
	}
	for i, c := range comps {
		rest := comps[i+1:]
		switch c {
		case ".git":
			return "builtin: .git is read-only", "git on the host reads configuration and programs from .git (config, hooks, commondir, gitdir files, alternates, attributes, submodules' git directories): a repository's .git is read-only in the sandbox, so commits are made on the host", true
		case ".moat":
			if len(rest) == 0 {
				return "builtin: .moat is read-only", "the .moat directory holds the project policy and cannot be replaced, renamed or removed", true
			}
			if len(rest) == 1 && rest[0] == "policy.toml" {
				return "builtin: .moat/policy.toml is read-only", "policy files are read-only", true
			}
		}
	}
	if n := len(comps); n > 0 && rcFiles[comps[n-1]] {
		return "builtin: shell rc files are read-only", comps[n-1] + " is a shell startup file and is read-only", true
	}
	return "", "", false
}

// ceiling checks the profile's limits (and the built-in credential lists).
func (e *Effective) ceiling(k Kind, p string, comps []string) (rule, why string, ok bool) {
	bi := e.bi
	inWS := under(p, e.ctx.Workspace)
	for _, n := range bi.never {
		if n.p.match(comps) && !(n.coversWS && inWS) {
			return "builtin: credentials are neither readable nor writable: " + n.name,
				n.name + " holds credentials or host secrets", false
		}
	}
	if k == Read {
		for _, n := range bi.credNames {
			if n.p.match(comps) && !underAny(p, bi.credExempt) {
				return "builtin: credential files are not readable: " + n.name,
					"files named " + n.name + " hold credentials", false
			}
		}
	}
	if inWS || underAny(p, e.ctx.WriteRoots) || (k == Read && underAny(p, e.ctx.ReadRoots)) {
		return "", "", true
	}
	prof := "profile " + string(e.profile) + ": "
	if e.profile == Untrusted {
		if k == Read {
			if underAny(p, bi.sysRead) {
				return "", "", true
			}
			return prof + "reads only the workspace and system directories",
				"the untrusted profile reads only the workspace " + e.ctx.Workspace + " and " + strings.Join(bi.sysRead, ", "), false
		}
		return prof + "writes only the workspace",
			"the untrusted profile writes only the workspace " + e.ctx.Workspace, false
	}
	for _, g := range e.wgrants {
		if g.p.match(comps) {
			return "", "", true
		}
	}
	if k == Write {
		return prof + "writes only the workspace and allow Write targets",
			"the trusted profile writes only the workspace " + e.ctx.Workspace + " and the targets of allow Write rules of the policy files", false
	}
	for _, d := range bi.runtime {
		if under(p, d) {
			return prof + "host runtime directory " + d + " is not readable",
				"the host's " + d + " is not shown to sandboxes (they have their own)", false
		}
	}
	return "", "", true
}

func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if under(p, d) {
			return true
		}
	}
	return false
}

// ---- network ----

func (e *Effective) decideNet(r Request) Decision {
	host, ip, err := parseHostPort(r.Host)
	if err != nil {
		return e.invalid(r, "%v", err)
	}
	what := "Net " + host
	granted := false
	for _, g := range e.ngrants {
		if g.r.net.grants(host, ip) {
			granted = true
			break
		}
	}
	if !granted {
		why := "it is not on the network allowlist (the sandbox's allowlist and the allow Net rules of the managed and user policy files)"
		if ip {
			why = "a raw IP address is on the allowlist only if an allow Net rule names it"
		}
		return Decision{Request: r, Effect: Deny, Host: host,
			Rule:   builtin(Deny, "not on the network allowlist"),
			Reason: "denied: " + what + ": " + why}
	}
	var v verdict
	for _, b := range e.rules[Net] {
		// An allow rule counts where it grants (domain:* admits no raw IP).
		if b.r.Effect == Allow && b.r.net.grants(host, ip) || b.r.Effect != Allow && b.r.net.match(host, ip) {
			v.add(b)
		}
	}
	return Decision{Request: r, Effect: v.eff, Rule: v.rule, Host: host, Reason: ruleReason(v.eff, what, v.rule)}
}

// DecideAddr judges an address the egress proxy is about to dial (an
// answer of its DNS lookup, or a raw IP destination already allowed by
// Decide). special says it is internal (loopback, private, link-local,
// metadata, the host's own...): such an address is allowed only by an
// allow cidr: rule of the allowlist covering it. An address covered by a
// deny cidr: rule is refused; one covered by an ask cidr: rule (and no
// deny) is Ask: the caller decides whether it can be asked (a raw IP
// destination already approved by Decide) or must be refused (an answer
// of a name's lookup). The result is Allow, Ask or Deny.
func (e *Effective) DecideAddr(a netip.Addr, special bool) Decision {
	a = a.Unmap()
	r := Request{Kind: Net, Host: a.String()}
	var v verdict
	for _, b := range e.rules[Net] {
		if b.r.Effect != Allow && b.r.net.containsAddr(a) {
			v.add(b)
		}
	}
	if v.rule != nil {
		return Decision{Request: r, Effect: v.eff, Rule: v.rule, Host: r.Host, Reason: ruleReason(v.eff, "address "+r.Host, v.rule)}
	}
	if !special {
		return Decision{Request: r, Effect: Allow, Rule: e.def, Host: r.Host, Reason: "allowed: address " + r.Host + " is public"}
	}
	for _, g := range e.ngrants {
		if g.r.net.containsAddr(a) {
			return Decision{Request: r, Effect: Allow, Rule: g.r, Host: r.Host, Reason: ruleReason(Allow, "address "+r.Host, g.r)}
		}
	}
	return Decision{Request: r, Effect: Deny, Host: r.Host,
		Rule:   builtin(Deny, InternalAddressRule),
		Reason: "denied: address " + r.Host + " is internal (loopback, private, link-local, metadata or the host's own); only an allow cidr: entry naming it admits it"}
}

// InternalAddressRule is the text of the built-in rule DecideAddr refuses
// an internal address with.
const InternalAddressRule = "internal address"

// OpenNetwork reports whether the operator's managed policy file permits
// network mode open (open_network = true).
func (e *Effective) OpenNetwork() bool { return e.openNet }
