package display

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf8"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// checkSafe fails when out holds a byte or character that a terminal
// would not show as itself.
func checkSafe(t testing.TB, in, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("%q -> %q: invalid UTF-8", in, out)
	}
	for i, r := range out {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || (hidden(r) && r != 0x2026) {
			t.Fatalf("%q -> %q: %U at %d", in, out, r, i)
		}
	}
}

func TestString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain text, with spaces & punctuation: <a href=x>", "plain text, with spaces & punctuation: <a href=x>"},
		// Homoglyph-free, non-ASCII text is shown as it is.
		{"café 日本語 Ωμέγα ✓ 🙂", "café 日本語 Ωμέγα ✓ 🙂"},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"\x1b]8;;https://evil.example/\x1b\\safe.example\x1b]8;;\x1b\\", `\x1b]8;;https://evil.example/\x1b\\safe.example\x1b]8;;\x1b\\`},
		{"\x1b]52;c;ZXZpbA==\a", `\x1b]52;c;ZXZpbA==\a`},
		{"rm -rf /tmp/evil\rls -l", `rm -rf /tmp/evil\rls -l`},
		{"a\tb\nc\vd\fe\bf\x00g\x7fh", `a\tb\nc\vd\fe\bf\x00g\x7fh`},
		{"rm -rf /\u202e", `rm -rf /\u202e`},
		{"\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u200e\u200f\u061c", `\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u200e\u200f\u061c`},
		{"a\u200bb\u200cc\u200dd\u2060e\ufefff\u00adg", `a\u200bb\u200cc\u200dd\u2060e\ufefff\u00adg`},
		{"line\u2028sep\u2029para\u0085nel\u009bcsi", `line\u2028sep\u2029para\u0085nel\u009bcsi`},
		{"nb\u00a0sp\u3000ideo", `nb\u00a0sp\u3000ideo`},
		{"hangul\u3164filler vs\ufe0f tag\U000e0041", `hangul\u3164filler vs\ufe0f tag\U000e0041`},
		{"bad \xff\xfe utf8 \xc3", `bad \xff\xfe utf8 \xc3`},
		{"\ufffd is a real replacement character", "\ufffd is a real replacement character"},
		{`back\slash \x1b`, `back\\slash \\x1b`},
		{"fake…[+3 bytes]", `fake\u2026[+3 bytes]`},
	} {
		got := String(c.in)
		if got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
		checkSafe(t, c.in, got)
		if IsCut(got) {
			t.Errorf("String(%q) = %q looks cut", c.in, got)
		}
	}
}

func TestArgv(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"git", "push", "origin", "main"}, "git push origin main"},
		{[]string{"rm -rf /"}, "'rm -rf /'"},
		{[]string{"rm", "-rf", "/"}, "rm -rf /"},
		{[]string{"echo", "it's", "", "a b", "$HOME", "*", "~", "#c", "x;y", "café"}, `echo 'it'\''s' '' 'a b' '$HOME' '*' '~' '#c' 'x;y' 'café'`},
		{[]string{"A=1", "touch", "B=2"}, "'A=1' touch B=2"},
		{[]string{"time", "ls", "time"}, "'time' ls time"},
		{[]string{"=ls"}, "'=ls'"},
		{[]string{"printf", "\x1b[2K\r", "ok"}, `printf $'\x1b[2K\r' ok`},
		{[]string{"rm", "-rf", "/\u202e"}, `rm -rf $'/\u202e'`},
		{[]string{"it's\n"}, `$'it\'s\n'`},
		{[]string{"a\\b", "c\\\td"}, `'a\b' $'c\\\td'`},
		{[]string{"\xff\xfe"}, `$'\xff\xfe'`},
		{[]string{"…"}, `$'\u2026'`},
		{[]string{"\U000e0041"}, `$'\U000e0041'`},
	} {
		got := Argv(c.in)
		if got != c.want {
			t.Errorf("Argv(%q) = %s, want %s", c.in, got, c.want)
		}
		checkSafe(t, strings.Join(c.in, " "), got)
		if back, err := parseArgv(got); err != nil || !equal(back, c.in) {
			t.Errorf("Argv(%q) = %s reads back as %q (%v)", c.in, got, back, err)
		}
	}
	// The words of Join are those of Argv, unescaped.
	if got := Join([]string{"printf", "\x1b[2K", "a b", "it's"}); got != "printf '\x1b[2K' 'a b' 'it'\\''s'" {
		t.Errorf("Join: %q", got)
	}
}

// TestArgvBash: what Argv shows, pasted into bash, gives the same argv.
func TestArgvBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	argvs := [][]string{
		{"rm -rf /"}, {"printf", "\x1b[2K\r", "ok"}, {"rm", "-rf", "/\u202e"}, {"it's\n", "", "a\\b", "c\\\td"},
		{"\xff\xfe", "…", "\u0085", "\U000e0041", "=x", "A=1", "~", "{a,b}", "*", "$(id)", "`id`", "!x"},
		{"café", "\u00a0", "\u3164", "-n", "--", "%1", "@x", "a:b,c.d/e-f+g_h"},
	}
	for _, argv := range argvs {
		line := Argv(append([]string{"printf"}, append([]string{`%s\0`}, argv...)...))
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", line)
		cmd.Env = []string{"LC_ALL=C.UTF-8", "PATH=/usr/bin:/bin"}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash -c %s: %v", line, err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if !equal(got, argv) {
			t.Errorf("bash read %s as %q, want %q", line, got, argv)
		}
	}
}

func TestCap(t *testing.T) {
	huge := strings.Repeat("A", 1<<20)
	got := String(huge)
	if want := strings.Repeat("A", DefaultMax) + "…[+1047552 bytes]"; got != want {
		t.Fatalf("1 MiB: len %d, tail %q", len(got), got[len(got)-30:])
	}
	if !IsCut(got) {
		t.Error("not reported as cut")
	}
	// An escape is never cut in half: the escaped text stops before it.
	for max := 1; max < 12; max++ {
		got := StringN("ab\x1bcd\u202eef", max)
		body, _, _ := strings.Cut(got, Ellipsis)
		for _, bad := range []string{`\`, `\x`, `\x1`, `\u`, `\u2`, `\u20`, `\u202`} {
			if strings.HasSuffix(body, bad) && !strings.HasSuffix(body, `\x1b`) {
				t.Errorf("cap %d: %q cuts an escape", max, got)
			}
		}
		if len(body) > max {
			t.Errorf("cap %d: %q is longer", max, got)
		}
	}
	if got := StringN("ab\x1bcd", 4); got != "ab…[+3 bytes]" {
		t.Errorf("cut before an escape: %q", got)
	}
	if got := StringN("ab\x1bcd", 6); got != `ab\x1b…[+2 bytes]` {
		t.Errorf("cut after an escape: %q", got)
	}
	// Huge inputs with escapes, and argvs of huge words or many words.
	hostile := strings.Repeat("\x1b[2K\r\u202e\xff", 1<<18)
	for _, s := range []string{String(hostile), Argv([]string{"echo", hostile}), ArgvN([]string{hostile}, 100),
		Argv(strings.Split(strings.Repeat("x ", 1<<20), " "))} {
		checkSafe(t, "hostile", s)
		if len(s) > DefaultMax+32 || !IsCut(s) {
			t.Errorf("len %d cut %v: %q", len(s), IsCut(s), s[max(0, len(s)-40):])
		}
	}
	if got := ArgvN([]string{"echo", "hello world"}, 10); got != "echo 'hell…[+7 bytes]" {
		t.Errorf("argv cut: %q", got)
	}
	if got := ArgvN([]string{"echo", "hi", "there"}, 7); got != "echo hi…[+6 bytes]" {
		t.Errorf("argv cut between words: %q", got)
	}
	if got := Truncate("héllo", 2); got != "h…[+5 bytes]" {
		t.Errorf("Truncate: %q", got)
	}
	if got := Truncate("short", 0); got != "short" {
		t.Errorf("Truncate: %q", got)
	}
	// The work is bounded by the cap, not by the input.
	if n := testing.AllocsPerRun(5, func() { String(hostile) }); n > 3*DefaultMax {
		t.Errorf("%v allocations for a capped string", n)
	}
}

func TestJSON(t *testing.T) {
	v := map[string]string{"cmd": "\x1b[2K\r\u202erm\x7f\u0085\u200b<b>&\U000e0041\u2028 café…"}
	raw, _ := json.Marshal(v)
	if !bytes.Contains(raw, []byte("\u202e")) || !bytes.Contains(raw, []byte("\x7f")) {
		t.Fatalf("control: encoding/json keeps these raw: %q", raw)
	}
	got := JSON(raw)
	checkSafe(t, string(raw), string(got))
	if !bytes.Contains(got, []byte(`\u202e`)) || !bytes.Contains(got, []byte(`\udb40\udc41`)) || !bytes.Contains(got, []byte(`\u003cb\u003e`)) ||
		!bytes.Contains(got, []byte("café…")) {
		t.Errorf("JSON: %s", got)
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["cmd"] != v["cmd"] {
		t.Errorf("JSON changed the value: %q %v", back["cmd"], err)
	}
	if plain := []byte(`{"a":"b"}`); &JSON(plain)[0] != &plain[0] {
		t.Error("JSON copied a clean text")
	}
}

// parseArgv reads line as bash would read one simple command.
func parseArgv(line string) ([]string, error) {
	if line == "" {
		return nil, nil
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(line), "")
	if err != nil {
		return nil, err
	}
	if len(f.Stmts) != 1 {
		return nil, errNotSimple
	}
	call, ok := f.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || f.Stmts[0].Negated || len(f.Stmts[0].Redirs) > 0 {
		return nil, errNotSimple
	}
	var argv []string
	for _, w := range call.Args {
		for _, p := range w.Parts {
			switch p.(type) {
			case *syntax.Lit, *syntax.SglQuoted:
			default:
				return nil, errNotSimple // an expansion: not a literal word
			}
		}
		fields, err := expand.Fields(nil, w)
		if err != nil {
			return nil, err
		}
		if len(fields) != 1 {
			return nil, errNotSimple
		}
		argv = append(argv, fields[0])
	}
	return argv, nil
}

type parseError string

func (e parseError) Error() string { return string(e) }

const errNotSimple = parseError("not one simple command of literal words")

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
