package policy

import (
	"errors"
	"strings"
	"testing"
)

var tctx = Context{Workspace: "/ws", Home: "/home/u"}

func mustParse(t testing.TB, layer Layer, name, src string) *File {
	t.Helper()
	f, err := Parse(layer, name, []byte(src))
	if err != nil {
		t.Fatalf("Parse %s: %v", name, err)
	}
	return f
}

func mustCompile(t testing.TB, c Context, files ...*File) *Effective {
	t.Helper()
	e, err := Compile(c, files...)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return e
}

// layerFile builds a policy file from rule lists.
func layerFile(t testing.TB, layer Layer, profile Profile, allow, ask, deny []string) *File {
	t.Helper()
	var b strings.Builder
	b.WriteString("version = 1\n")
	if profile != "" {
		b.WriteString("profile = \"" + string(profile) + "\"\n")
	}
	for _, l := range []struct {
		k string
		r []string
	}{{"allow", allow}, {"ask", ask}, {"deny", deny}} {
		if len(l.r) == 0 {
			continue
		}
		b.WriteString(l.k + " = [\n")
		for _, r := range l.r {
			b.WriteString("  '" + r + "',\n")
		}
		b.WriteString("]\n")
	}
	return mustParse(t, layer, layer.String()+".toml", b.String())
}

func TestParseRule(t *testing.T) {
	ok := []struct {
		in      string
		kind    Kind
		pattern string
	}{
		{"Exec(npm run *)", Exec, "npm run *"},
		{"  Exec( git   push* )  ", Exec, "git   push*"},
		{"Read(~/.ssh/**)", Read, "~/.ssh/**"},
		{"Write(src/**)", Write, "src/**"},
		{"Net(domain:*.github.com)", Net, "domain:*.github.com"},
		{"Net(domain:*)", Net, "domain:*"},
		{"Net(domain:127.0.0.1)", Net, "domain:127.0.0.1"},
		{"Net(domain:[::1])", Net, "domain:[::1]"},
		{"Exec(echo $(date))", Exec, "echo $(date)"},
		{"Read(*.pem)", Read, "*.pem"},
		{"Read(build/)", Read, "build/"},
		{"Read(/)", Read, "/"},
		{"Read(~)", Read, "~"},
		{"Read(./x)", Read, "./x"},
		{`Read(a\*b)`, Read, `a\*b`},
		{"Read([a-c]?x)", Read, "[a-c]?x"},
		{"Read([]]x)", Read, "[]]x"},
	}
	for _, c := range ok {
		r, err := ParseRule(Deny, c.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", c.in, err)
			continue
		}
		if r.Kind != c.kind || r.Pattern != c.pattern || r.Text != strings.TrimSpace(c.in) {
			t.Errorf("ParseRule(%q) = %v %q %q", c.in, r.Kind, r.Pattern, r.Text)
		}
	}
	bad := []struct{ in, msg string }{
		{"Exec(", "Exec(: unterminated pattern"},
		{"Exec(npm", "unterminated pattern"},
		{"Exec()", "empty pattern"},
		{"Exec(  )", "empty pattern"},
		{"exec(ls)", `did you mean Exec`},
		{"Run(ls)", "unknown kind"},
		{"ls", "want Kind(pattern)"},
		{"", "empty rule"},
		{"Exec(a) b", "after the closing parenthesis"},
		{"Read(~root/x)", "~user"},
		{"Read(a//b)", "empty path segment"},
		{"Read(a/../b)", `".." segments`},
		{"Read(/a/./b)", `"." segments`},
		{"Read(./)", "empty path"},
		{"Read([a-)", "unterminated [ class"},
		{"Read([z-a])", "bad range"},
		{`Read(a\)`, "trailing backslash"},
		{"Net(github.com)", "want domain:"},
		{"Net(domain:)", "empty host"},
		{"Net(domain:git*.com)", "only allowed as"},
		{"Net(domain:github.com:443)", "ports are not part"},
		{"Net(domain:bücher.de)", "punycode"},
		{"Net(domain:a b)", "bad character"},
		{"Net(domain:1.2.3.4.5)", "bad host name or IPv4"},
		{"Net(domain:*.1.2.3.4)", "cannot precede an IP"},
		{"Exec(a\x00b)", "control character"},
		{"Exec(a\tb)", "control character"},
		{"Exec(\xff)", "not valid UTF-8"},
		{"Exec(" + strings.Repeat("a", MaxRuleLen) + ")", "longer than"},
	}
	for _, c := range bad {
		_, err := ParseRule(Deny, c.in)
		if err == nil {
			t.Errorf("ParseRule(%q): no error", c.in)
			continue
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseRule(%q) = %q, want it to contain %q", c.in, err, c.msg)
		}
	}
	if _, err := ParseRule(None, "Exec(x)"); err == nil {
		t.Error("ParseRule with effect None: no error")
	}
}

func TestParseFileErrors(t *testing.T) {
	src := `# project policy
version = 1
allow = [
  "Exec(npm run *)",
  "Write(src/**)",
]
ask = ["Exec(git push*)",
       "Exec(",
]
`
	_, err := Parse(Project, ".moat/policy.toml", []byte(src))
	if err == nil || err.Error() != "project .moat/policy.toml:8: ask: Exec(: unterminated pattern" {
		t.Fatalf("err = %v", err)
	}
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 8 || pe.Column != 8 || pe.Key != "ask" {
		t.Fatalf("ParseError = %+v", pe)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("not ErrInvalid")
	}
	cases := []struct{ src, want string }{
		{"version = 1\nallow = [\"Exec(x)\"]\nfoo = 1\n", `x:3:1: unknown key "foo"`},
		{"version = 1\n[allow]\nx = 1\n", "x:2:2: unknown table [allow]"},
		{"version = 1\na.b = 1\n", `x:2:1: unknown key "a.b"`},
		{"version = 2\n", "x:1: version: version 2 is newer than this moat understands (version 1): upgrade moat"},
		{"version = 0\n", "x:1: version: unknown version 0"},
		{"version = '1'\n", "x:1: version: must be an integer"},
		{"allow = []\n", "x:1:1: version is required"},
		{"", "x:1:1: version is required"},
		{"version = 1\nprofile = \"root\"\n", `x:2: profile: unknown profile "root"`},
		{"version = 1\nprofile = 1\n", `x:2: profile: must be a string`},
		{"version = 1\ndeny = \"Exec(x)\"\n", "x:2: deny: must be an array"},
		{"version = 1\ndeny = [\n 1,\n]\n", "x:3: deny: rules are strings, not integer"},
		{"version = 1\ndeny = [[\"Exec(x)\"]]\n", "x:2: deny: rules are strings, not array"},
		{"version = 1\ndeny = []\ndeny = []\n", "x:3:1: key deny defined twice (first on line 2)"},
		{"version = 1\ndeny = [\"Exec(x)\"\n", "x:2:18: array is incomplete"},
		{"version = 1\nallow = [\"Read(a//b)\", \"Net(x)\"]\n", "x:2: allow: Read(a//b): empty path segment (//)\nuser x:2: allow: Net(x): want domain:"},
		{"version = 1 2\n", "x:1:"},
		{"version = 1\n\xff = 1\n", "x:2:1: not valid UTF-8"},
		{"version = 1\nallow = [ '''Exec(\nx)''' ]\n", `x:2: allow: Exec(\nx): control character`},
	}
	for _, c := range cases {
		_, err := Parse(User, "x", []byte(c.src))
		if err == nil {
			t.Errorf("Parse(%q): no error", c.src)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %q, want %q", c.src, err, c.want)
		}
		if !strings.HasPrefix(err.Error(), "user x:") {
			t.Errorf("Parse(%q) = %q: does not name the file", c.src, err)
		}
	}
}

func TestParseFileOK(t *testing.T) {
	src := `version = 1
profile = "trusted"
# rules
allow = ["Exec(npm run *)", "Write(src/**)",
  'Net(domain:*.github.com)']
ask = [
  "Exec(git push*)", # comment
]
deny = [ """Read(~/.ssh/**)""" ]
`
	f := mustParse(t, Project, ".moat/policy.toml", src)
	if f.Version != 1 || f.Profile != Trusted || len(f.Rules) != 5 {
		t.Fatalf("file = %+v", f)
	}
	want := []struct {
		text      string
		eff       Effect
		line, col int
	}{
		{"Exec(npm run *)", Allow, 4, 10},
		{"Write(src/**)", Allow, 4, 29},
		{"Net(domain:*.github.com)", Allow, 5, 3},
		{"Exec(git push*)", Ask, 7, 3},
		{"Read(~/.ssh/**)", Deny, 9, 10},
	}
	for i, w := range want {
		r := f.Rules[i]
		if r.Text != w.text || r.Effect != w.eff || r.Line != w.line || r.Column != w.col || r.Layer != Project || r.File != ".moat/policy.toml" {
			t.Errorf("rule %d = %+v, want %+v", i, r, w)
		}
	}
	if s := f.Rules[3].Source(); s != "project .moat/policy.toml:7" {
		t.Errorf("Source = %q", s)
	}
	if s := f.Rules[3].String(); s != "ask Exec(git push*)" {
		t.Errorf("String = %q", s)
	}
}

func TestParseCall(t *testing.T) {
	f, err := ParseCall(CallRules{Deny: []string{"Exec(rm *)"}, Ask: []string{"Read(x/**)"}})
	if err != nil || len(f.Rules) != 2 || f.Layer != Call {
		t.Fatalf("ParseCall = %+v, %v", f, err)
	}
	if s := f.Rules[1].Source(); s != "per-call deny[0]" {
		t.Errorf("Source = %q", s)
	}
	_, err = ParseCall(CallRules{Profile: "x", Deny: []string{"Exec(ok)", "Exec("}})
	if err == nil || err.Error() != "per-call profile: unknown profile \"x\" (want \"untrusted\" or \"trusted\")\nper-call deny[1]: Exec(: unterminated pattern" {
		t.Fatalf("err = %v", err)
	}
}

func TestExecPattern(t *testing.T) {
	cases := []struct {
		pat, cmd string
		want     bool
	}{
		{"git push*", "git push", true},
		{"git push*", "git push origin main", true},
		{"git push*", "git pushx", true},
		{"git push*", "git pul", false},
		{"git push*", "git", false},
		{"git push *", "git push", false},
		{"git push *", "git push origin", true},
		{"npm run *", "npm run build", true},
		{"*", "anything at all", true},
		{"rm -rf /*", "rm -rf /", true},
		{"rm -rf /*", "rm -rf /home", true},
		{"rm -rf /*", "rm -rf ./x", false},
		{"/usr/bin/git push", "git push", true},
		{"git  push", "git push", true},
		{"a?b", "a?b", true},
		{"a?b", "axb", false},
		{"a[b]", "ab", false},
		{"*push*", "git push", true},
		{"g*t p*h", "git push", true},
		{"g*t p*h", "git pull", false},
		{"a*a", "a", false},
		{"a**b", "axxb", true},
		{"Git push", "git push", false},
	}
	for _, c := range cases {
		p, err := compileExec(c.pat)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.match(c.cmd); got != c.want {
			t.Errorf("%q matches %q = %v", c.pat, c.cmd, got)
		}
	}
	starts := []struct {
		pat, name string
		want      bool
	}{
		{"git push*", "git", true},
		{"git push*", "gi", false},
		{"git", "git", true},
		{"git", "gitx", false},
		{"*", "x", true},
		{"gi*", "git", true},
		{"g*h", "git", true},
		{"npm run *", "git", false},
		{"git-lfs push", "git", false},
		{"rm *", "rm", true},
	}
	for _, c := range starts {
		p, _ := compileExec(c.pat)
		if got := p.canStart(c.name); got != c.want {
			t.Errorf("%q canStart %q = %v", c.pat, c.name, got)
		}
	}
}

func TestPathPattern(t *testing.T) {
	cases := []struct {
		pat, path string
		want      bool
	}{
		{"~/.ssh/**", "/home/u/.ssh", true},
		{"~/.ssh/**", "/home/u/.ssh/id_rsa", true},
		{"~/.ssh/**", "/home/u/.sshx", false},
		{"~/.ssh", "/home/u/.ssh/a/b", true},
		{"~/.ssh/", "/home/u/.ssh/a", true},
		{"~/.SSH", "/home/u/.ssh/a", false},
		{"src/**", "/ws/src/a/b.go", true},
		{"src/**", "/ws/src", true},
		{"src/**", "/ws/srcx", false},
		{"src/*.go", "/ws/src/a.go", true},
		{"src/*.go", "/ws/src/x/a.go", false},
		{"src/**/*.go", "/ws/src/x/y/a.go", true},
		{"src/**/*.go", "/ws/src/a.go", true},
		{"*.pem", "/a/b/c.pem", true},
		{"*.pem", "/c.pem", true},
		{"*.pem", "/a/c.pem/inner", true},
		{"*.pem", "/a/c.pemx", false},
		{"id_rsa*", "/x/id_rsa.pub", true},
		{"build/", "/ws/a/build/x", true},
		{"build/", "/elsewhere/build", true},
		{"/etc/*", "/etc/passwd", true},
		{"/etc/*", "/etc", false},
		{"/", "/anything", true},
		{"~", "/home/u", true},
		{"~", "/home", false},
		{"/a/?", "/a/bc", false},
		{"/a/?", "/a/é", true},
		{"/a/[!x]", "/a/y", true},
		{"/a/[!x]", "/a/x", false},
		{"/a/[a-c]d", "/a/bd", true},
		{`/a/\*`, "/a/*", true},
		{`/a/\*`, "/a/b", false},
		{"/a/**/b/**/c", "/a/x/b/y/z/c", true},
		{"/a/**/b/**/c", "/a/b/c", true},
		{"/a/**/b/**/c", "/a/x/c", false},
		{"**", "/", true},
		{"/x**y", "/xaby", true},
		{"./y", "/ws/y", true},
	}
	for _, c := range cases {
		pp, err := parsePathPattern(c.pat)
		if err != nil {
			t.Fatalf("%q: %v", c.pat, err)
		}
		a := pp.bind("/home/u", "/ws")
		if got := a.match(splitPath(c.path)); got != c.want {
			t.Errorf("%q matches %q = %v (bound %q)", c.pat, c.path, got, a.text)
		}
	}
}

func TestHosts(t *testing.T) {
	cases := []struct {
		in, host string
		ip       bool
	}{
		{"GitHub.com", "github.com", false},
		{"github.com.", "github.com", false},
		{"github.com:443", "github.com", false},
		{"127.0.0.1", "127.0.0.1", true},
		{"0x7f.1", "127.0.0.1", true},
		{"2130706433", "127.0.0.1", true},
		{"0177.0.0.01", "127.0.0.1", true},
		{"[::1]:80", "::1", true},
		{"::ffff:127.0.0.1", "127.0.0.1", true},
		{"[::FFFF:7f00:1]", "127.0.0.1", true},
	}
	for _, c := range cases {
		h, ip, err := parseHostPort(c.in)
		if err != nil || h != c.host || ip != c.ip {
			t.Errorf("parseHostPort(%q) = %q %v %v", c.in, h, ip, err)
		}
	}
	for _, bad := range []string{"", "a b", "a..b", "x:99999", "x:", "bücher.de", "[::1", "1.2.3.4.5", "fe80::1%eth0", "256.1.1.1.1", "a/b", "a@b"} {
		if h, _, err := parseHostPort(bad); err == nil {
			t.Errorf("parseHostPort(%q) = %q, want error", bad, h)
		}
	}
}
