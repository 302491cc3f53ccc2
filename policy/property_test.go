package policy

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Hand-written generators with a fixed seed: the runs are reproducible.

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6d6f6174)) }

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

var (
	genComps    = []string{"src", "a", "b", ".ssh", ".git", "hooks", "config", "build", "x.pem", "id_rsa", "node_modules", "Secret", "secret", ".bashrc", "notes.txt", ".moat", "policy.toml", ".cache"}
	genSegs     = []string{"src", "a", "b", ".ssh", ".git", "build", "Secret", "secret", ".cache", "*", "**", "?", "a*", "*.pem", "[ab]", "[!a]*", "s*t"}
	genRoots    = []string{"/ws", "/home/u", "/etc", "/tmp", "/usr/lib", "/srv", "/"}
	genWords    = []string{"git", "push", "pull", "status", "npm", "run", "build", "rm", "-rf", "/", "ls", "origin", "curl", "make", "deploy"}
	genHosts    = []string{"x.com", "api.x.com", "a.api.x.com", "github.com", "api.github.com", "evil.com", "1.2.3.4", "10.0.0.1"}
	genNetPats  = []string{"x.com", "*.x.com", "*", "api.github.com", "*.github.com", "1.2.3.4", "evil.com"}
	genProfiles = []Profile{"", "", Untrusted, Trusted, Trusted}
)

func genPathPattern(r *rand.Rand) string {
	n := 1 + r.IntN(3)
	var segs []string
	for i := 0; i < n; i++ {
		segs = append(segs, pick(r, genSegs))
	}
	s := strings.Join(segs, "/")
	switch r.IntN(5) {
	case 0:
		return "~/" + s
	case 1:
		return pick(r, []string{"/ws/", "/etc/", "/srv/", "/tmp/", "/"}) + s
	case 2:
		if n == 1 {
			return s // base name at any depth
		}
		return s
	case 3:
		return "src/" + s
	default:
		return s + pick(r, []string{"", "/", "/**"})
	}
}

func genExecPattern(r *rand.Rand) string {
	n := 1 + r.IntN(3)
	var w []string
	for i := 0; i < n; i++ {
		w = append(w, pick(r, genWords))
	}
	s := strings.Join(w, " ")
	switch r.IntN(4) {
	case 0:
		s += "*"
	case 1:
		s += " *"
	case 2:
		if r.IntN(4) == 0 {
			s = "*"
		}
	}
	return s
}

func genRule(r *rand.Rand) string {
	switch r.IntN(4) {
	case 0:
		return "Exec(" + genExecPattern(r) + ")"
	case 1:
		return "Read(" + genPathPattern(r) + ")"
	case 2:
		return "Write(" + genPathPattern(r) + ")"
	default:
		return "Net(domain:" + pick(r, genNetPats) + ")"
	}
}

func genPath(r *rand.Rand) string {
	p := pick(r, genRoots)
	for i, n := 0, r.IntN(4); i < n; i++ {
		p = strings.TrimSuffix(p, "/") + "/" + pick(r, genComps)
	}
	return p
}

func genCommand(r *rand.Rand) string {
	n := 1 + r.IntN(4)
	var w []string
	for i := 0; i < n; i++ {
		w = append(w, pick(r, genWords))
	}
	return strings.Join(w, " ")
}

func genRequest(r *rand.Rand) Request {
	switch r.IntN(4) {
	case 0:
		return ExecShell(genCommand(r))
	case 1:
		return ReadPath(genPath(r))
	case 2:
		return WritePath(genPath(r))
	default:
		return NetHost(pick(r, genHosts))
	}
}

// genPolicy returns rule lists for the layers managed, project, user and
// per-call, and a profile for each file layer.
type genLayers struct {
	rules    [4][3][]string // layer, effect-1 (allow, ask, deny)
	profiles [3]Profile
}

func genPolicyLayers(r *rand.Rand, maxRules int) genLayers {
	var g genLayers
	for l := 0; l < 4; l++ {
		for i, n := 0, r.IntN(maxRules+1); i < n; i++ {
			e := r.IntN(3)
			g.rules[l][e] = append(g.rules[l][e], genRule(r))
		}
		if l < 3 {
			g.profiles[l] = pick(r, genProfiles)
		}
	}
	return g
}

func (g genLayers) compile(t testing.TB, c Context) *Effective {
	t.Helper()
	var files []*File
	for l := Managed; l <= User; l++ {
		files = append(files, layerFile(t, l, g.profiles[l], g.rules[l][0], g.rules[l][1], g.rules[l][2]))
	}
	call, err := ParseCall(CallRules{Allow: g.rules[Call][0], Ask: g.rules[Call][1], Deny: g.rules[Call][2]})
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, call)
	return mustCompile(t, c, files...)
}

func (g genLayers) String() string {
	var b strings.Builder
	for l := Managed; l <= Call; l++ {
		p := Profile("")
		if l < Call {
			p = g.profiles[l]
		}
		fmt.Fprintf(&b, "%s(profile %q): allow %q ask %q deny %q; ", l, p, g.rules[l][0], g.rules[l][1], g.rules[l][2])
	}
	return b.String()
}

// TestPropertyLayering: adding rules can only narrow. A decision made by a
// deny rule (or by a built-in protection) stays deny whatever allow rules
// are added in any layer; adding a deny or ask rule anywhere, or any rule
// to the per-call layer, or an allow Exec/Read rule anywhere, never makes a
// decision less restrictive. (Allow Write and allow Net rules of the
// policy files are grants of the trusted profile: by design they can widen
// the ceiling, never past a deny rule or a built-in protection.)
func TestPropertyLayering(t *testing.T) {
	r := newRand(1)
	for iter := 0; iter < 1500; iter++ {
		g := genPolicyLayers(r, 6)
		base := g.compile(t, tctx)
		reqs := make([]Request, 20)
		before := make([]Decision, len(reqs))
		for i := range reqs {
			reqs[i] = genRequest(r)
			before[i] = base.Decide(reqs[i])
		}
		g2 := g
		layer := Layer(r.IntN(4))
		eff := r.IntN(3)
		rule := genRule(r)
		g2.rules[layer][eff] = append(append([]string(nil), g.rules[layer][eff]...), rule)
		if r.IntN(5) == 0 && layer < Call {
			g2.profiles[layer] = Untrusted
		}
		next := g2.compile(t, tctx)
		kind := Kind(0)
		switch {
		case strings.HasPrefix(rule, "Exec"):
			kind = Exec
		case strings.HasPrefix(rule, "Read"):
			kind = Read
		case strings.HasPrefix(rule, "Write"):
			kind = Write
		default:
			kind = Net
		}
		narrowing := Effect(eff+1) != Allow || layer == Call || kind == Exec || kind == Read
		for i, q := range reqs {
			d0, d1 := before[i], next.Decide(q)
			if d0.Effect == Deny && (d0.Rule.Layer != Builtin || !strings.HasPrefix(d0.Rule.Text, "profile trusted") && d0.Rule.Text != "not on the network allowlist") && d1.Effect != Deny {
				t.Fatalf("deny flipped by adding %s %s in %s:\n%v\nbefore: %s\nafter: %s\npolicy: %v", Effect(eff+1), rule, layer, q, d0.Reason, d1.Reason, g)
			}
			if narrowing && d1.Effect < d0.Effect {
				t.Fatalf("adding %s %s in %s loosened %v:\nbefore: %s\nafter: %s\npolicy: %v", Effect(eff+1), rule, layer, q, d0.Reason, d1.Reason, g)
			}
		}
	}
}

// TestPropertyDeciderMatches: the deciding rule of a rule decision matches
// the request and has the decision's effect, and no matching rule is more
// restrictive.
func TestPropertyDeciderMatches(t *testing.T) {
	r := newRand(2)
	for iter := 0; iter < 500; iter++ {
		g := genPolicyLayers(r, 8)
		e := g.compile(t, tctx)
		for i := 0; i < 20; i++ {
			q := genRequest(r)
			if q.Kind == Exec {
				continue
			}
			d := e.Decide(q)
			if d.Effect == None || d.Rule == nil {
				t.Fatalf("%v: empty decision %+v", q, d)
			}
			if d.Rule.Layer == Builtin {
				continue
			}
			if d.Rule.Effect != d.Effect {
				t.Fatalf("%v: effect %s by rule %s", q, d.Effect, d.Rule)
			}
			// Recompute by brute force.
			want, first := None, (*Rule)(nil)
			for _, b := range e.rules[q.Kind] {
				var m bool
				if q.Kind == Net {
					h, ip, _ := parseHostPort(q.Host)
					m = b.r.Effect == Allow && b.r.net.grants(h, ip) || b.r.Effect != Allow && b.r.net.match(h, ip)
				} else {
					m = b.p.match(splitPath(d.Path))
				}
				if m && b.r.Effect > want {
					want, first = b.r.Effect, b.r
				}
			}
			if want != d.Effect || first != d.Rule {
				t.Fatalf("%v: decided %s by %s, brute force %s by %v; policy %v", q, d.Effect, d.Rule.Source(), want, first, g)
			}
		}
	}
}

// respell returns other spellings of an absolute path: ".", "..", "//",
// a trailing slash, relative to the workspace, "~/".
func respell(r *rand.Rand, p string) []string {
	comps := splitPath(p)
	var out []string
	join := func(parts []string) string { return "/" + strings.Join(parts, "/") }
	for i := 0; i <= len(comps); i++ {
		with := func(extra ...string) []string {
			x := append([]string{}, comps[:i]...)
			x = append(x, extra...)
			return append(x, comps[i:]...)
		}
		out = append(out, join(with(".")))
		out = append(out, join(with(pick(r, genComps), "..")))
		out = append(out, join(with("a", "b", "..", "..")))
		out = append(out, strings.Replace(join(with()), "/", "//", 1))
	}
	out = append(out, p+"/", p+"/.", p+"//", "//"+strings.TrimPrefix(p, "/"))
	if under(p, "/ws") && p != "/ws" {
		out = append(out, strings.TrimPrefix(p, "/ws/"), "./"+strings.TrimPrefix(p, "/ws/"), "src/../"+strings.TrimPrefix(p, "/ws/"))
	}
	if under(p, "/home/u") {
		out = append(out, "~"+strings.TrimPrefix(p, "/home/u"))
	}
	if p != "/" {
		out = append(out, "/.."+p, "/../.."+p)
	}
	return out
}

// TestPropertyPathSpellings: every spelling of a path gets the decision of
// the path (so a denied path stays denied), while a different case is a
// different path.
func TestPropertyPathSpellings(t *testing.T) {
	r := newRand(3)
	denied := 0
	for iter := 0; iter < 400; iter++ {
		g := genPolicyLayers(r, 8)
		e := g.compile(t, tctx)
		for i := 0; i < 10; i++ {
			p := genPath(r)
			for _, k := range []Kind{Read, Write} {
				d := e.Decide(Request{Kind: k, Path: p})
				if d.Effect == Deny {
					denied++
				}
				for _, s := range respell(r, p) {
					d2 := e.Decide(Request{Kind: k, Path: s})
					if d2.Effect != d.Effect || d2.Rule.Text != d.Rule.Text {
						t.Fatalf("%s %q: %s by %s, but %q: %s by %s", k, p, d.Effect, d.Rule, s, d2.Effect, d2.Rule)
					}
				}
			}
		}
	}
	if denied < 500 {
		t.Errorf("only %d denied paths exercised", denied)
	}
	// Case: a literal pattern matches exactly its spelling.
	for i := 0; i < 2000; i++ {
		p := genPath(r)
		pp, err := parsePathPattern(p)
		if err != nil {
			continue
		}
		a := pp.bind("/home/u", "/ws")
		if !a.match(splitPath(p)) {
			t.Fatalf("%q does not match itself", p)
		}
		if sw := swapCase(p); sw != p && a.match(splitPath(sw)) {
			t.Fatalf("%q matches %q", p, sw)
		}
	}
	f := layerFile(t, Project, "", nil, nil, []string{"Read(/ws/Secret)"})
	e := mustCompile(t, tctx, f)
	if e.Decide(ReadPath("/ws/Secret/x")).Effect != Deny || e.Decide(ReadPath("/ws/secret/x")).Effect != Allow || e.Decide(ReadPath("/ws/SECRET")).Effect != Allow {
		t.Error("case handling")
	}
}

func swapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 32
		case c >= 'A' && c <= 'Z':
			b[i] = c + 32
		}
	}
	return string(b)
}

// TestPropertySymlinkSpellings: on a real tree, reaching a denied path
// through symlinks (absolute or relative, to the file or to a parent, with
// ".." after the link) is still denied.
func TestPropertySymlinkSpellings(t *testing.T) {
	root, c := tree(t)
	ws, home := c.Workspace, c.Home
	dirs := []string{ws + "/src", ws + "/.git/hooks", home + "/.ssh/keys", home + "/docs", root + "/other"}
	for _, d := range dirs {
		for _, n := range []string{"f1", "Secret", "id_rsa", ".bashrc"} {
			if err := os.WriteFile(filepath.Join(d, n), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := newRand(4)
	links := 0
	for iter := 0; iter < 60; iter++ {
		var rules []string
		for i := 0; i < 3; i++ {
			rules = append(rules, pick(r, []string{"Read(~/docs/**)", "Write(src/f1)", "Read(Secret)", "Write(" + root + "/other/**)", "Read(src/*)", "Write(~/docs/f1)"}))
		}
		f := layerFile(t, Project, pick(r, []Profile{Untrusted, Trusted}), []string{"Write(~/docs/**)"}, nil, rules)
		e := mustCompile(t, c, f)
		for i := 0; i < 10; i++ {
			dir := pick(r, dirs)
			target := filepath.Join(dir, pick(r, []string{"f1", "Secret", "id_rsa", ".bashrc", "new"}))
			k := pick(r, []Kind{Read, Write})
			d := e.Decide(Request{Kind: k, Path: target})
			if d.Effect == Allow {
				continue
			}
			// Link to the parent directory, absolute or relative.
			ln := filepath.Join(ws, fmt.Sprintf("l%d-%d", iter, i))
			tgt := dir
			if r.IntN(2) == 0 {
				rel, err := filepath.Rel(ws, dir)
				if err != nil {
					t.Fatal(err)
				}
				tgt = rel
			}
			symlink(t, tgt, ln)
			links++
			base := filepath.Base(target)
			spellings := []string{ln + "/" + base, ln + "/./" + base, ln + "//" + base, filepath.Base(ln) + "/" + base}
			if r.IntN(2) == 0 {
				// A link to a subdirectory followed by "..".
				sub := filepath.Join(dir, "sub")
				if err := os.MkdirAll(sub, 0o755); err == nil {
					ln2 := ln + "-sub"
					symlink(t, sub, ln2)
					spellings = append(spellings, ln2+"/../"+base)
				}
			}
			// A link to the file itself (for reads: what it reaches).
			if _, err := os.Stat(target); err == nil && k == Read {
				ln3 := ln + "-file"
				symlink(t, target, ln3)
				spellings = append(spellings, ln3)
			}
			for _, s := range spellings {
				d2 := e.Decide(Request{Kind: k, Path: s})
				if d2.Effect < d.Effect {
					t.Fatalf("%s %s: %s (%s), but via %s: %s (%s)", k, target, d.Effect, d.Reason, s, d2.Effect, d2.Reason)
				}
			}
		}
	}
	if links < 100 {
		t.Errorf("only %d links exercised", links)
	}
}

// commandSpellings returns other spellings of a command line made of plain
// words.
func commandSpellings(r *rand.Rand, words []string) []string {
	q := func(w string) string {
		switch r.IntN(3) {
		case 0:
			return "'" + w + "'"
		case 1:
			return `"` + w + `"`
		}
		return w
	}
	plain := strings.Join(words, " ")
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, q(w))
	}
	qs := strings.Join(quoted, " ")
	rest := strings.Join(words[1:], " ")
	out := []string{
		plain,
		qs,
		strings.Join(words, "   "),
		"\t" + strings.Join(words, " \t ") + "  ",
		"env " + plain,
		"env -i FOO=1 " + qs,
		"/usr/bin/env " + plain,
		"command " + plain,
		"command -p " + plain,
		"exec " + plain,
		"nohup " + plain,
		"nice -n 5 " + plain,
		"timeout 10 " + plain,
		"sudo -u root " + plain,
		"sh -c '" + plain + "'",
		"bash -c '" + plain + "'",
		`bash -c "` + plain + `"`,
		"bash -lc '" + plain + "'",
		"/bin/sh -c '" + plain + "'",
		`sh -c "bash -c '` + plain + `'"`,
		"env sh -c '" + plain + "'",
		"true && " + plain,
		"true; " + plain,
		"false || " + plain,
		"echo x | " + plain,
		"cd /tmp && " + q(words[0]) + " " + rest,
		"eval '" + plain + "'",
	}
	if !strings.Contains(words[0], "/") {
		out = append(out, "/usr/bin/"+plain, "/bin/../usr/bin/"+plain, "./"+plain, "../x/"+qs)
	}
	return out
}

// TestPropertyCommandSpellings: every spelling of a denied (or asked)
// command gets at least that decision.
func TestPropertyCommandSpellings(t *testing.T) {
	r := newRand(5)
	checked := 0
	for iter := 0; iter < 400; iter++ {
		var deny, ask, allow []string
		for i := 0; i < 1+r.IntN(4); i++ {
			switch r.IntN(3) {
			case 0:
				deny = append(deny, "Exec("+genExecPattern(r)+")")
			case 1:
				ask = append(ask, "Exec("+genExecPattern(r)+")")
			default:
				allow = append(allow, "Exec("+genExecPattern(r)+")")
			}
		}
		f := layerFile(t, Layer(r.IntN(3)), "", allow, ask, deny)
		e := mustCompile(t, tctx, f)
		for i := 0; i < 10; i++ {
			words := strings.Fields(genCommand(r))
			d := e.Decide(ExecArgv(words...))
			if d.Effect == Allow {
				continue
			}
			for _, s := range commandSpellings(r, words) {
				checked++
				d2 := e.Decide(ExecShell(s))
				if d2.Effect < d.Effect {
					t.Fatalf("%q: %s (%s) but %q: %s (%s)", strings.Join(words, " "), d.Effect, d.Reason, s, d2.Effect, d2.Reason)
				}
			}
		}
	}
	if checked < 1000 {
		t.Errorf("only %d spellings checked", checked)
	}
}

// TestPropertyUncertain: a command whose command word is an expansion
// never gets allow when a deny or ask Exec rule exists, and a command with
// an expansion is never judged more leniently than any concrete value of
// the expansion (one word, several, or none).
func TestPropertyUncertain(t *testing.T) {
	r := newRand(6)
	checked := 0
	for iter := 0; iter < 400; iter++ {
		var allow, ask, deny []string
		for i := 0; i < 1+r.IntN(5); i++ {
			p := "Exec(" + genExecPattern(r) + ")"
			switch r.IntN(3) {
			case 0:
				deny = append(deny, p)
			case 1:
				ask = append(ask, p)
			default:
				allow = append(allow, p)
			}
		}
		e := mustCompile(t, tctx, layerFile(t, Project, "", allow, ask, deny))
		restrictive := func(first string) bool {
			for _, b := range e.rules[Exec] {
				if b.r.Effect != Allow && first == "" {
					return true
				}
			}
			return false
		}
		for i := 0; i < 10; i++ {
			words := strings.Fields(genCommand(r))
			at := r.IntN(len(words))
			uw := append([]string{}, words...)
			uw[at] = pick(r, []string{"$X", "${X}", "$(cmd)", "`cmd`", "$X" + words[at]})
			d := e.Decide(ExecShell(strings.Join(uw, " ")))
			first := ""
			if at != 0 {
				first = words[0]
			}
			if d.Effect == Allow && restrictive(first) {
				t.Fatalf("%q: allowed (%s) though a deny/ask rule could match (ask %q, deny %q)", strings.Join(uw, " "), d.Reason, ask, deny)
			}
			for j := 0; j < 5; j++ {
				cw := append([]string{}, words...)
				cw[at] = pick(r, genWords)
				if j == 0 && at > 0 {
					cw[at] = "" // the expansion is empty
				}
				if r.IntN(3) == 0 {
					cw[at] += " " + pick(r, genWords)
				}
				dc := e.Decide(ExecArgv(strings.Fields(strings.Join(cw, " "))...))
				checked++
				if dc.Effect > d.Effect {
					t.Fatalf("%q: %s (%s), but the concrete %q: %s (%s)", strings.Join(uw, " "), d.Effect, d.Reason, strings.Join(cw, " "), dc.Effect, dc.Reason)
				}
			}
		}
	}
	if checked < 1000 {
		t.Errorf("only %d checked", checked)
	}
}
