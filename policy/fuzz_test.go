package policy

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// The seed corpora are in testdata/fuzz/Fuzz*/.

var fuzzPaths = [][]string{nil, {"ws"}, {"ws", "src", "a.go"}, {"home", "u", ".ssh", "id_rsa"}, {"a", "b", "c", "d"}, {"é", "*", "[x]"}}

func FuzzParseRule(f *testing.F) {
	f.Fuzz(func(t *testing.T, effect uint8, text string) {
		eff := Effect(effect%3) + Allow
		r, err := ParseRule(eff, text)
		if err != nil {
			if r != nil {
				t.Fatal("rule and error")
			}
			if !strings.Contains(err.Error(), ": ") {
				t.Fatalf("error without the rule: %q", err)
			}
			return
		}
		if r.Effect != eff || r.Text != strings.TrimSpace(text) || r.Pattern == "" {
			t.Fatalf("rule %+v from %q", r, text)
		}
		// The rule's text parses to the same rule.
		r2, err := ParseRule(eff, r.Text)
		if err != nil || r2.Kind != r.Kind || r2.Pattern != r.Pattern {
			t.Fatalf("reparse %q: %+v, %v", r.Text, r2, err)
		}
		switch r.Kind {
		case Exec:
			p := r.exec
			if p.text == "" || strings.Contains(p.text, "**") || strings.Contains(p.text, "  ") {
				t.Fatalf("exec pattern %q", p.text)
			}
			// A pattern without '*' matches exactly its own text.
			if !strings.Contains(p.text, "*") && !p.match(p.text) {
				t.Fatalf("%q does not match itself", p.text)
			}
			// Replacing each '*' by anything matches.
			if s := strings.ReplaceAll(p.text, "*", "x y"); !p.match(s) {
				t.Fatalf("%q does not match %q", p.text, s)
			}
			if !p.canStart(firstWord(strings.ReplaceAll(p.text, "*", "z"))) {
				t.Fatalf("%q cannot start with its own first word", p.text)
			}
			for _, s := range []string{"", "git push", text, r.Pattern} {
				p.match(s)
				p.canStart(s)
			}
		case Read, Write:
			a := r.path.bind("/home/u", "/ws")
			if !strings.HasPrefix(a.text, "/") && !strings.HasPrefix(a.text, "**/") {
				t.Fatalf("bound pattern %q", a.text)
			}
			for _, c := range fuzzPaths {
				a.match(c)
			}
			if a.literal && !a.any {
				if !a.match(splitPath(a.prefix)) {
					t.Fatalf("literal %q does not match its prefix %q", a.text, a.prefix)
				}
			}
			// A literal pattern matches its own path and everything below.
			lit := true
			for _, s := range a.segs {
				if s.glob != nil || s.dstar {
					lit = false
				}
			}
			if lit && !a.any {
				var comps []string
				for _, s := range a.segs {
					comps = append(comps, s.lit)
				}
				if !a.match(comps) || !a.match(append(comps, "below")) {
					t.Fatalf("%q does not match %q", a.text, comps)
				}
			}
		case Net:
			n := r.net
			for _, h := range []string{"github.com", "a.b.c", "1.2.3.4", "::1"} {
				n.match(h, strings.Contains(h, ":") || h[0] == '1')
			}
			if n.exact != "" && !n.match(n.exact, n.ip) {
				t.Fatalf("%q does not match itself", n.exact)
			}
		default:
			t.Fatalf("kind %v", r.Kind)
		}
	})
}

func FuzzParseFile(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(Project, ".moat/policy.toml", data)
		if err != nil {
			if file != nil {
				t.Fatal("file and error")
			}
			list, ok := err.(ErrorList)
			if !ok || len(list) == 0 {
				t.Fatalf("error %T %v", err, err)
			}
			lines := 1 + strings.Count(string(data), "\n")
			for _, e := range list {
				if e.Line < 1 || e.Line > lines || e.File != ".moat/policy.toml" || e.Msg == "" {
					t.Fatalf("bad error %+v (%d lines)", e, lines)
				}
				if !strings.HasPrefix(e.Error(), "project .moat/policy.toml:") {
					t.Fatalf("error %q", e.Error())
				}
			}
			return
		}
		if file.Version != Version {
			t.Fatalf("version %d", file.Version)
		}
		lines := strings.Split(string(data), "\n")
		for i, r := range file.Rules {
			if r.Line < 1 || r.Line > len(lines) || r.Column < 1 || r.Layer != Project {
				t.Fatalf("rule %+v", r)
			}
			if i > 0 && r.seq <= file.Rules[i-1].seq {
				t.Fatalf("rules out of order")
			}
			// The rule's string starts on its line, at its column.
			line := lines[r.Line-1]
			if r.Column-1 > utf8.RuneCountInString(line) {
				t.Fatalf("column %d beyond line %q", r.Column, line)
			}
			rest := string([]rune(line)[r.Column-1:])
			if rest == "" || !strings.ContainsRune(`"'`, rune(rest[0])) {
				t.Fatalf("rule %q at %d:%d, line %q", r.Text, r.Line, r.Column, line)
			}
		}
		e, err := Compile(tctx, file)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []Request{ExecShell("git push"), ReadPath("/ws/a"), WritePath("/ws/.git/hooks/x"), NetHost("x.com")} {
			if d := e.Decide(q); d.Effect == None || d.Rule == nil {
				t.Fatalf("decision %+v", d)
			}
		}
		if d := e.Decide(WritePath("/ws/.git/hooks/x")); d.Effect != Deny {
			t.Fatalf("protected path not denied: %+v", d)
		}
	})
}

// FuzzDecide feeds arbitrary requests to a fixed policy: no panic, always
// a decision with a rule, invalid requests denied, and spellings of a path
// decided alike.
func FuzzDecide(f *testing.F) {
	files := []*File{
		layerFile(f, Managed, "", nil, nil, []string{"Exec(rm -rf /*)", "Read(~/.ssh/**)"}),
		layerFile(f, Project, Trusted, []string{"Write(~/.cache/**)", "Net(domain:*.github.com)", "Exec(npm run *)"}, []string{"Exec(git push*)"}, []string{"Read(*.secret)"}),
		layerFile(f, User, "", []string{"Net(domain:*)"}, []string{"Write(docs/**)"}, []string{"Net(domain:evil.com)"}),
	}
	e := mustCompile(f, tctx, files...)
	f.Fuzz(func(t *testing.T, kind uint8, s string) {
		var q Request
		switch kind % 5 {
		case 0:
			q = ExecShell(s)
		case 1:
			q = ExecArgv(strings.Fields(s)...)
		case 2:
			q = ReadPath(s)
		case 3:
			q = WritePath(s)
		default:
			q = NetHost(s)
		}
		d := e.Decide(q)
		if d.Effect < Allow || d.Effect > Deny || d.Rule == nil || d.Reason == "" {
			t.Fatalf("%v: decision %+v", q, d)
		}
		if d.Invalid && d.Effect != Deny {
			t.Fatalf("%v: invalid but %s", q, d.Effect)
		}
		if q.Kind == Read || q.Kind == Write {
			if strings.IndexByte(s, 0) >= 0 && d.Effect != Deny {
				t.Fatalf("NUL path %s", d.Effect)
			}
			if !d.Invalid {
				spellings := []string{s + "/", s + "/."}
				switch {
				case strings.HasPrefix(s, "/"):
					spellings = append(spellings, "/."+s, "/x/.."+s, "/"+s)
				case s == "~" || strings.HasPrefix(s, "~/"):
					spellings = append(spellings, "~/x/.."+s[1:], "~/."+s[1:])
				default:
					spellings = append(spellings, "./"+s, "x/../"+s, "/ws/"+s)
				}
				for _, sp := range spellings {
					q2 := q
					q2.Path = sp
					if d2 := e.Decide(q2); d2.Effect != d.Effect {
						t.Fatalf("%q: %s (%s), %q: %s (%s)", s, d.Effect, d.Reason, sp, d2.Effect, d2.Reason)
					}
				}
			}
		}
	})
}
