package policy

import (
	"path"
	"strings"
)

// PathEntry is one path or pattern of Roots.
type PathEntry struct {
	// Path is the literal directory or file the entry starts at (the
	// pattern's longest literal prefix); "" for a base name at any depth.
	Path string `json:"path"`
	// Pattern is the whole absolute pattern: "/home/u/.ssh",
	// "/ws/**/.git", "**/*.pem" (any depth, anywhere).
	Pattern string `json:"pattern"`
	// Literal: Pattern is exactly Path and everything below it, so a mount
	// (or a Landlock rule) can enforce it; otherwise only the policy engine
	// can, unless the runtime expands the pattern itself.
	Literal bool `json:"literal"`
	// EntryOnly: only the directory entry Path itself is meant (it must
	// not be renamed, removed or replaced), not what is below it.
	EntryOnly bool `json:"entry_only,omitempty"`
	// Effect is Allow for roots, Deny or Ask for restrictions (an ask rule
	// cannot be asked at the OS level: treat it as deny there).
	Effect Effect `json:"effect"`
	// Source says why: "profile trusted", "builtin: ...", or a rule and
	// where it comes from.
	Source string `json:"source"`

	pat *absPattern
}

// Match says whether the entry's pattern covers the clean absolute path p
// (p itself or one of its parent directories matches, as in gitignore).
func (e PathEntry) Match(p string) bool {
	if e.pat == nil {
		return false
	}
	return e.pat.match(splitPath(path.Clean(p)))
}

// MatchComponents is Match (below true) or MatchExact (below false) for a
// path given as its components ("/a/b" is ["a", "b"]), for callers that
// walk trees and keep them.
func (e PathEntry) MatchComponents(comps []string, below bool) bool {
	return e.pat != nil && e.pat.matchAt(comps, below)
}

// Last describes the pattern's last segment other than "**": name is its
// literal text when it has no wildcard (lit true), and match tests a
// component against it. A path the pattern matches exactly ends with a
// component that segment matches. any is true when there is no such
// segment ("/**"): every path can match.
func (e PathEntry) Last() (name string, lit bool, match func(string) bool, any bool) {
	if e.pat == nil {
		return "", false, nil, true
	}
	var seg *pseg
	if e.pat.any {
		seg = &e.pat.seg
	} else {
		for i := len(e.pat.segs) - 1; i >= 0; i-- {
			if !e.pat.segs[i].dstar {
				seg = &e.pat.segs[i]
				break
			}
		}
	}
	if seg == nil || seg.dstar {
		return "", false, nil, true
	}
	return seg.lit, seg.glob == nil, seg.matchName, false
}

// MatchExact says whether the pattern matches the clean absolute path p
// itself (not because it lies below a match).
func (e PathEntry) MatchExact(p string) bool {
	return e.pat != nil && e.pat.matchAt(splitPath(path.Clean(p)), false)
}

// Roots are the path lists a runtime needs to build the sandbox's view of
// the host filesystem.
type Roots struct {
	Profile Profile `json:"profile"`
	// Readable trees. In the trusted profile this is "/": the host minus
	// DenyRead.
	Readable []PathEntry `json:"readable"`
	// Writable trees (also readable): the workspace, and in the trusted
	// profile the targets of allow Write rules of the policy files.
	Writable []PathEntry `json:"writable"`
	// DenyRead must not be readable even inside Readable or Writable:
	// built-in credentials and host secrets, credential base names, host
	// runtime directories (trusted), and deny/ask Read rules.
	DenyRead []PathEntry `json:"deny_read"`
	// ReadOnly must not be writable inside Writable roots: every .git
	// (whole), shell rc files, policy files (with their parent directories
	// as entries), credentials, and deny/ask Write rules. Entries exist
	// whether or not the path exists yet: a runtime must also stop the
	// sandbox from creating them.
	ReadOnly []PathEntry `json:"read_only"`
	// NetAllow is the network allowlist ("github.com", "*.github.com",
	// "*", "cidr:10.0.0.0/8"; IP addresses only when named): the
	// caller's and the managed and user files'. The egress proxy enforces
	// it for a sandbox in network mode proxy.
	NetAllow []string `json:"net_allow"`
}

func entryOf(a *absPattern, eff Effect, src string) PathEntry {
	if a.any {
		return PathEntry{Pattern: a.text, Effect: eff, Source: src, pat: a}
	}
	return PathEntry{Path: a.prefix, Pattern: a.text, Literal: a.literal, Effect: eff, Source: src, pat: a}
}

func ruleSource(r *Rule) string { return r.String() + " (" + r.Source() + ")" }

// Roots returns the path lists the runtime needs (see Roots).
func (e *Effective) Roots() Roots {
	ws := e.ctx.Workspace
	ro := Roots{Profile: e.profile}
	prof := "profile " + string(e.profile)
	lit := func(p string, eff Effect, src string) PathEntry {
		return entryOf(below(p), eff, src)
	}
	if e.profile == Untrusted {
		ro.Readable = append(ro.Readable, lit(ws, Allow, prof+": workspace"))
		for _, d := range e.bi.sysRead {
			ro.Readable = append(ro.Readable, lit(d, Allow, prof+": system directory"))
		}
	} else {
		ro.Readable = append(ro.Readable, lit("/", Allow, prof+": the host, less DenyRead"))
	}
	for _, r := range e.ctx.ReadRoots {
		if e.profile == Untrusted {
			ro.Readable = append(ro.Readable, lit(r, Allow, "bound read-only by the caller"))
		}
	}
	ro.Writable = append(ro.Writable, lit(ws, Allow, prof+": workspace"))
	roots := []string{ws}
	for _, r := range e.ctx.WriteRoots {
		ro.Writable = append(ro.Writable, lit(r, Allow, "bound writable by the caller"))
		roots = append(roots, r)
	}
	if e.profile == Trusted {
		for _, g := range e.wgrants {
			if under(g.p.prefix, ws) {
				continue
			}
			ro.Writable = append(ro.Writable, entryOf(g.p, Allow, ruleSource(g.r)))
			roots = append(roots, g.p.prefix)
		}
	}
	for _, g := range e.ngrants {
		ro.NetAllow = append(ro.NetAllow, g.r.net.String())
	}
	for _, n := range e.bi.never {
		ro.DenyRead = append(ro.DenyRead, entryOf(n.p, Deny, "builtin: credentials and host secrets"))
	}
	for _, n := range e.bi.credNames {
		ro.DenyRead = append(ro.DenyRead, entryOf(n.p, Deny, "builtin: credential file names (except under "+strings.Join(e.bi.credExempt, ", ")+")"))
	}
	if e.profile == Trusted {
		for _, d := range e.bi.runtime {
			ro.DenyRead = append(ro.DenyRead, lit(d, Deny, prof+": host runtime directory (the sandbox gets its own)"))
		}
	}
	for _, b := range e.rules[Read] {
		if b.r.Effect != Allow {
			ro.DenyRead = append(ro.DenyRead, entryOf(b.p, b.r.Effect, ruleSource(b.r)))
		}
	}
	for _, r := range roots {
		for _, p := range []struct{ rel, why string }{
			{".git", "builtin: .git (git reads configuration and programs from it)"},
			{".moat", "builtin: the .moat entry"}, {ProjectPath, "builtin: policy file"},
		} {
			entry := path.Base(p.rel) == ".moat"
			top := entryOf(below(r, p.rel), Deny, p.why)
			top.EntryOnly = entry
			deep := entryOf(below(r, "**", p.rel), Deny, p.why+" at any depth")
			deep.EntryOnly = entry
			ro.ReadOnly = append(ro.ReadOnly, top, deep)
		}
		for _, rc := range ShellRCFiles {
			ro.ReadOnly = append(ro.ReadOnly, lit(path.Join(r, rc), Deny, "builtin: shell rc file"))
			ro.ReadOnly = append(ro.ReadOnly, entryOf(below(r, "**", rc), Deny, "builtin: shell rc file at any depth"))
		}
		for _, s := range e.srcs {
			for p := s; ; p = path.Dir(p) {
				if under(p, r) {
					pe := entryOf(below(p), Deny, "builtin: policy file "+s)
					pe.EntryOnly = p != s
					ro.ReadOnly = append(ro.ReadOnly, pe)
				}
				if p == "/" || p == r {
					break
				}
			}
		}
		for _, n := range e.bi.never {
			if n.p.any || under(n.p.prefix, r) || under(r, n.p.prefix) {
				ro.ReadOnly = append(ro.ReadOnly, entryOf(n.p, Deny, "builtin: credentials and host secrets"))
			}
		}
	}
	for _, b := range e.rules[Write] {
		if b.r.Effect != Allow {
			ro.ReadOnly = append(ro.ReadOnly, entryOf(b.p, b.r.Effect, ruleSource(b.r)))
		}
	}
	ro.ReadOnly = dedupEntries(ro.ReadOnly)
	return ro
}

func dedupEntries(in []PathEntry) []PathEntry {
	seen := map[PathEntry]bool{}
	out := in[:0]
	for _, x := range in {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// LayerSummary describes one layer of an Explanation.
type LayerSummary struct {
	Layer   Layer   `json:"layer"`
	Name    string  `json:"name"`
	Path    string  `json:"path,omitempty"`
	Profile Profile `json:"profile,omitempty"`
	Rules   int     `json:"rules"`
}

// Explanation is everything `moat policy explain` shows.
type Explanation struct {
	Profile   Profile        `json:"profile"`
	Context   Context        `json:"context"`
	Layers    []LayerSummary `json:"layers"`
	Decisions []Decision     `json:"decisions"`
	Roots     Roots          `json:"roots"`
	Protected []string       `json:"protected"`
	Warnings  []string       `json:"warnings"`
}

// Explain decides every request and describes the effective policy.
func (e *Effective) Explain(reqs ...Request) *Explanation {
	x := &Explanation{Profile: e.profile, Context: e.ctx, Roots: e.Roots(), Warnings: e.Warnings()}
	for _, f := range e.files {
		x.Layers = append(x.Layers, LayerSummary{Layer: f.Layer, Name: f.Name, Path: f.Path, Profile: f.Profile, Rules: len(f.Rules)})
	}
	for _, r := range reqs {
		x.Decisions = append(x.Decisions, e.Decide(r))
	}
	x.Protected = []string{
		".git at any depth, whole (config, hooks, commondir, info, objects/info/alternates, modules, worktrees, the index), the git directory a .git file names, and the directories of submodules that have no .git yet: read-only; git inside reads the repository, commits are made on the host",
		".moat (the entry) and .moat/policy.toml at any depth: read-only",
		"shell rc files at any depth: " + strings.Join(ShellRCFiles, ", ") + ": read-only",
		"the policy files " + strings.Join(e.srcs, ", ") + ": read-only, and their parent directories cannot be renamed or removed",
		"credentials and host secrets: " + strings.Join(CredentialPaths, ", ") + ", " + strings.Join(HostSecrets, ", ") + ": neither readable nor writable",
		"credential file names at any depth (except under " + strings.Join(CredentialNameExempt, ", ") + "): " + strings.Join(CredentialNames, ", ") + ": not readable",
	}
	return x
}
