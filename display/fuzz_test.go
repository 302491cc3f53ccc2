package display

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDisplay checks the properties of String and Argv on any input: the
// output is safe to print (no control, C1, bidi or other invisible
// character, valid UTF-8), within the cap plus the marker, cut only when
// the input does not fit; String is injective; Argv reads back, as bash
// reads it, as the argv it shows, so that two different argvs never
// display alike. The seeds run under plain go test.
//
// The fuzz input is a string; \x00 splits it into a first argv and a
// second one (to compare displays), \x01 splits each argv into words.
func FuzzDisplay(f *testing.F) {
	for _, seed := range []string{
		"",
		"git\x01push\x01origin\x01main",
		"rm -rf /\x00rm\x01-rf\x01/",
		"rm\x01-rf\x01/\u202e\x00rm\x01-rf\x01/",
		"\x1b[2K\rls\x00ls",
		"\x1b]8;;https://evil.example/\x1b\\ok\x1b]8;;\x1b\\",
		"echo\x01it's\x01\x01a b\x00echo\x01'it'\\''s'",
		"a\u200bb\x00ab",
		"\xff\xfe\xc3\x00\u00ff\u00fe\u00c3",
		"\u0085\x00\xc2\x85",
		"…[+3 bytes]\x00…",
		"A=1\x01touch\x00time\x01ls",
		"\\x1b\x00\x1b",
		"x\u2028y\u3164z\ufe0f\U000e0041",
		strings.Repeat("\x1b[2K\u202e", 300),
	} {
		f.Add(seed, 64)
		f.Add(seed, 0)
	}
	f.Fuzz(func(t *testing.T, in string, max int) {
		if max < 0 {
			max = -max
		}
		max %= 4 * DefaultMax
		a, b, _ := strings.Cut(in, "\x00")
		capOK := func(what, out string, cut bool) {
			checkSafe(t, in, out)
			body, _, _ := strings.Cut(out, Ellipsis)
			if IsCut(out) != cut || len(body) > capOf(max) {
				t.Fatalf("%s: %q (cap %d, cut %v want %v)", what, out, capOf(max), IsCut(out), cut)
			}
		}

		// String: safe, capped, injective when shown in full.
		sa, sb := StringN(a, max), StringN(b, max)
		full := StringN(a, 4*len(a)+1)
		capOK("String", sa, len(full) > capOf(max))
		if !IsCut(sa) {
			if u := unescape(t, sa); u != a {
				t.Fatalf("String(%q) = %q reads back as %q", a, sa, u)
			}
		}
		if sa == sb && !IsCut(sa) && a != b {
			t.Fatalf("String(%q) == String(%q) == %q", a, b, sa)
		}

		// Argv: safe, capped, reads back in bash syntax, injective.
		var argvA, argvB []string
		if a != "" {
			argvA = strings.Split(a, "\x01")
		}
		if b != "" {
			argvB = strings.Split(b, "\x01")
		}
		da, db := ArgvN(argvA, max), ArgvN(argvB, max)
		checkSafe(t, a, da)
		if body, _, _ := strings.Cut(da, Ellipsis); len(body) > capOf(max) {
			t.Fatalf("Argv %q: %q passes the cap %d", argvA, da, capOf(max))
		}
		if !IsCut(da) {
			back, err := parseArgv(da)
			if err != nil || !equal(back, argvA) {
				t.Fatalf("Argv(%q) = %s reads back as %q (%v)", argvA, da, back, err)
			}
			// Join's words read back the same way (bytes kept).
			if j := Join(argvA); utf8.ValidString(a) { // the parser wants UTF-8; bash takes any byte
				if back, err := parseArgv(j); err != nil || !equal(back, argvA) {
					t.Fatalf("Join(%q) = %q reads back as %q (%v)", argvA, j, back, err)
				}
			}
		}
		if da == db && !IsCut(da) && !equal(argvA, argvB) {
			t.Fatalf("Argv(%q) == Argv(%q) == %s", argvA, argvB, da)
		}
		// Truncate keeps a prefix on a character boundary.
		if tr := Truncate(a, max); !strings.HasPrefix(a, strings.SplitN(tr, Ellipsis, 2)[0]) || (len(a) <= capOf(max)) != (tr == a) {
			t.Fatalf("Truncate(%q, %d) = %q", a, max, tr)
		}
		// JSON escapes keep the text valid UTF-8 with nothing hidden.
		if j := JSON([]byte(a)); utf8.Valid([]byte(a)) && !utf8.Valid(j) {
			t.Fatalf("JSON(%q) = %q", a, j)
		}
	})
}

// unescape reverses String's escapes (up to a marker).
func unescape(t *testing.T, s string) string {
	t.Helper()
	s, _, _ = strings.Cut(s, Ellipsis)
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 >= len(s) {
			t.Fatalf("%q ends in a backslash", s)
		}
		i++
		switch c := s[i]; c {
		case '\\':
			b.WriteByte('\\')
		case 'a', 'b', 't', 'n', 'v', 'f', 'r':
			b.WriteByte(map[byte]byte{'a': '\a', 'b': '\b', 't': '\t', 'n': '\n', 'v': '\v', 'f': '\f', 'r': '\r'}[c])
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			if i+1+n > len(s) {
				t.Fatalf("%q: short escape", s)
			}
			var v rune
			for _, h := range s[i+1 : i+1+n] {
				d := strings.IndexRune(hexDigits, h)
				if d < 0 {
					t.Fatalf("%q: bad escape", s)
				}
				v = v<<4 | rune(d)
			}
			if c == 'x' {
				b.WriteByte(byte(v))
			} else {
				b.WriteRune(v)
			}
			i += n
		default:
			t.Fatalf("%q: unknown escape \\%c", s, c)
		}
	}
	return b.String()
}
