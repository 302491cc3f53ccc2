// Package display turns strings that a sandbox or an agent chose into text
// that is safe to show a person on one line of a terminal or a log: argv,
// commands, paths, host names, labels, error messages, approval requests.
//
// The threat is a sandboxed program that makes one thing display as
// another: escape sequences (ESC [2K, OSC 8 hyperlinks, OSC 52 clipboard
// writes), a carriage return that overwrites the line, a tab that shifts a
// table's columns, a newline that forges a second line, a bidi override
// that reverses what follows (rm -rf /‮), invisible characters that hide
// a difference, and strings long enough to push the rest of a line, or of
// a prompt, out of sight. The functions here:
//
//   - make every character that is not plainly visible visible: C0 controls,
//     DEL, C1 controls (U+0080–U+009F), and every Unicode character that is
//     not printable (strconv.IsPrint: format characters Cf such as the bidi
//     controls U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C and the
//     zero-width U+200B–U+200D, U+2060, U+FEFF; the separators U+2028 and
//     U+2029; spaces other than U+0020; private-use and unassigned code
//     points), plus the default-ignorable and variation-selector characters
//     that are printable but render as nothing (U+3164, U+FE0F, …). They are
//     written as escapes: \a \b \t \n \v \f \r, \xHH for other ASCII
//     controls and for each byte that is not valid UTF-8, \uHHHH and
//     \UHHHHHHHH for characters; a backslash is written \\, so that the
//     escapes are unambiguous;
//   - render an argv as POSIX shell words ([Argv]): a word that needs
//     quoting is quoted so that the line, pasted into bash, zsh or ksh,
//     gives back the same argv ('…' when it has no character to escape,
//     $'…' when it has), so that ["rm -rf /"] and ["rm", "-rf", "/"] never
//     display alike;
//   - cap the length: the escaped text is cut at a whole escape or
//     character once it would exceed the cap, and the marker …[+N bytes]
//     says how many bytes of the input are not shown. The ellipsis U+2026
//     is itself escaped wherever it occurs in a string, so that a marker is
//     always moat's own. The work is bounded by the cap, not by the input.
//
// What comes out contains no byte below 0x20, no 0x7f, no C1 control, no
// bidi or other format character, and no invalid UTF-8; different inputs
// (shown in full) give different outputs. Characters that merely look like
// others (homoglyphs: a Cyrillic а for a Latin a) are printable and shown as
// they are; shell quoting at least marks any argv word with a non-ASCII
// character.
//
// The output is plain text, not HTML: a web console must still escape it
// for HTML (html/template does). JSON output needs none of this beyond
// [JSON], which only keeps invisible characters out of the raw JSON text.
package display

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultMax is the cap of [String] and [Argv], in bytes of escaped text
// (the marker comes on top of it).
const DefaultMax = 1024

// PromptMax is a larger cap for what a person is asked to approve, where
// seeing more of the request matters more than the line's length.
const PromptMax = 16 << 10

// Ellipsis starts the marker of a cut string: "…[+N bytes]". It never
// occurs in escaped text otherwise.
const Ellipsis = "…"

const hexDigits = "0123456789abcdef"

// byteEscape[c] is \xHH for the byte c.
var byteEscape = func() (t [256]string) {
	for c := range t {
		t[c] = `\x` + hexDigits[c>>4:c>>4+1] + hexDigits[c&0xf:c&0xf+1]
	}
	return t
}()

// String returns s escaped for a terminal or a log line, cut at
// [DefaultMax] bytes.
func String(s string) string { return StringN(s, DefaultMax) }

// StringN is [String] with a cap of max bytes (max < 1 means
// [DefaultMax]).
func StringN(s string, max int) string {
	max = capOf(max)
	if len(s) <= max && plain(s) {
		return s
	}
	w := writer{max: max}
	w.b.Grow(min(len(s), max) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !w.put(unit(r, s[i:i+size], false)) {
			return w.cut(len(s) - i)
		}
		i += size
	}
	return w.b.String()
}

// Argv returns argv as one line of POSIX shell words, escaped, cut at
// [DefaultMax] bytes.
func Argv(argv []string) string { return ArgvN(argv, DefaultMax) }

// ArgvN is [Argv] with a cap of max bytes (max < 1 means [DefaultMax]).
//
// A word made only of ASCII letters, digits and _ @ + = : , . / - is shown
// as it is (the first word also quoted when it has a = or is a reserved
// word of the shell, which would not run as a command); another word with
// nothing to escape is single-quoted; a word with something to escape is
// $'…'-quoted, as bash, zsh and ksh read it:
//
//	git push origin main
//	echo 'rm -rf /' 'it'\''s' '' 'café'
//	printf $'\x1b[2K\r' $'rm -rf /\u202e'
//
// An empty argv is shown as the empty string.
func ArgvN(argv []string, max int) string {
	max = capOf(max)
	w := writer{max: max}
	for n, word := range argv {
		rest := func(done int) int { // input bytes not shown
			left := len(word) - done
			for _, later := range argv[n+1:] {
				left += 1 + len(later)
			}
			return left
		}
		if n > 0 && !w.put(" ") {
			return w.cut(rest(0) + 1)
		}
		// Only as much of the word as can be shown decides its quoting:
		// the work is bounded by the cap, and a prefix's quoting is right
		// for the prefix.
		look := word
		if room := max - w.b.Len() + 1; len(look) > room {
			look = look[:room]
		}
		style := quoting(look, n == 0)
		switch style {
		case bare:
			for i := range len(word) {
				if !w.put(word[i : i+1]) {
					return w.cut(rest(i))
				}
			}
			continue
		case single:
			if !w.put("'") {
				return w.cut(rest(0))
			}
		case dollar:
			if !w.put("$'") {
				return w.cut(rest(0))
			}
		}
		for i := 0; i < len(word); {
			r, size := utf8.DecodeRuneInString(word[i:])
			var u string
			switch {
			case style == single && r == '\'':
				u = `'\''`
			case style == single:
				u = word[i : i+size]
			default:
				u = unit(r, word[i:i+size], true)
			}
			if !w.put(u) {
				return w.cut(rest(i))
			}
			i += size
		}
		if !w.put("'") {
			return w.cut(rest(len(word)))
		}
	}
	return w.b.String()
}

// Join returns argv as one string of POSIX shell words that a shell reads
// back as argv, quoting with '…' only: the characters of the words stay
// as they are, controls included. It is for text that is stored or passed
// on (a request's text) and later shown through [String]; it is not safe to
// print as it is. Words are quoted as by [Argv].
func Join(argv []string) string {
	var b strings.Builder
	for n, word := range argv {
		if n > 0 {
			b.WriteByte(' ')
		}
		if quoting(word, n == 0) == bare {
			b.WriteString(word)
			continue
		}
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(word, "'", `'\''`))
		b.WriteByte('\'')
	}
	return b.String()
}

// Truncate cuts s to at most max bytes (max < 1 means [DefaultMax]) at a
// character boundary and adds the marker; it escapes nothing. It is for
// values given to a writer that escapes by itself (log/slog's
// TextHandler quotes every value with a control or invisible character).
func Truncate(s string, max int) string {
	max = capOf(max)
	if len(s) <= max {
		return s
	}
	end := max
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + marker(len(s)-end)
}

// IsCut reports whether out, a result of this package, was cut.
func IsCut(out string) bool { return strings.Contains(out, Ellipsis+"[+") }

// JSON returns the JSON text j with each character that [String] would
// escape for being invisible (DEL, C1 controls, format, separator and
// other non-printable characters) written as a \u escape, so that the JSON
// means the same but shows no terminal control or bidi override when it is
// printed. encoding/json already escapes the C0 controls (and <, >, &,
// U+2028, U+2029) and never writes such characters outside strings.
func JSON(j []byte) []byte {
	i := 0
	for i < len(j) {
		r, size := utf8.DecodeRune(j[i:])
		if (r == utf8.RuneError && size == 1) || (r >= 0x7f && r != 0x2026 && hidden(r)) {
			break
		}
		i += size
	}
	if i == len(j) {
		return j
	}
	out := make([]byte, 0, len(j)+32)
	out = append(out, j[:i]...)
	for i < len(j) {
		r, size := utf8.DecodeRune(j[i:])
		if r == utf8.RuneError && size == 1 {
			out = append(out, `\ufffd`...)
		} else if r >= 0x7f && r != 0x2026 && hidden(r) {
			if r > 0xffff {
				r1, r2 := utf16Pair(r)
				out = appendU4(out, r1)
				out = appendU4(out, r2)
			} else {
				out = appendU4(out, r)
			}
		} else {
			out = append(out, j[i:i+size]...)
		}
		i += size
	}
	return out
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}

func appendU4(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}

func capOf(max int) int {
	if max < 1 {
		return DefaultMax
	}
	return max
}

func marker(n int) string { return Ellipsis + "[+" + strconv.Itoa(n) + " bytes]" }

// writer builds a capped output from whole units.
type writer struct {
	b   strings.Builder
	max int
}

// put appends u unless that would pass the cap.
func (w *writer) put(u string) bool {
	if w.b.Len()+len(u) > w.max {
		return false
	}
	w.b.WriteString(u)
	return true
}

// cut ends the output with the marker for n bytes of input not shown.
func (w *writer) cut(n int) string {
	w.b.WriteString(marker(n))
	return w.b.String()
}

// hidden reports whether the valid rune r is shown as an escape rather
// than as itself (the backslash aside).
func hidden(r rune) bool {
	if r < 0x80 {
		return r < 0x20 || r == 0x7f
	}
	return r == 0x2026 || !strconv.IsPrint(r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) ||
		unicode.Is(unicode.Variation_Selector, r) ||
		unicode.Is(unicode.Bidi_Control, r) || unicode.Is(unicode.Join_Control, r)
}

// plain reports whether s is shown as it is by String.
func plain(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			if c < 0x20 || c == 0x7f || c == '\\' {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || hidden(r) {
			return false
		}
		i += size
	}
	return true
}

// unit is how the rune r, encoded as src (one byte when it is not valid
// UTF-8), is shown: itself or its escape. inQuote also escapes ' (for
// $'…').
func unit(r rune, src string, inQuote bool) string {
	if r == utf8.RuneError && len(src) == 1 {
		return byteEscape[src[0]]
	}
	switch r {
	case '\\':
		return `\\`
	case '\'':
		if inQuote {
			return `\'`
		}
		return "'"
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\t':
		return `\t`
	case '\n':
		return `\n`
	case '\v':
		return `\v`
	case '\f':
		return `\f`
	case '\r':
		return `\r`
	}
	if !hidden(r) {
		return src
	}
	switch {
	case r < 0x80:
		return byteEscape[r]
	case r <= 0xffff:
		return string(appendU4(nil, r))
	default:
		b := []byte(`\U`)
		for shift := 28; shift >= 0; shift -= 4 {
			b = append(b, hexDigits[r>>shift&0xf])
		}
		return string(b)
	}
}

type quoteStyle int

const (
	bare quoteStyle = iota
	single
	dollar
)

// reserved are the words a shell reads as syntax, not as a command, in
// the first position.
var reserved = map[string]bool{
	"!": true, "{": true, "}": true, "[[": true, "]]": true, "case": true, "coproc": true, "do": true,
	"done": true, "elif": true, "else": true, "esac": true, "fi": true, "for": true, "function": true,
	"if": true, "in": true, "select": true, "then": true, "time": true, "until": true, "while": true,
}

// quoting is how the word is quoted: bare, '…' or $'…'.
func quoting(word string, first bool) quoteStyle {
	style := bare
	if word == "" || (first && reserved[word]) || word[0] == '=' {
		style = single
	}
	for i := 0; i < len(word); {
		c := word[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '_', c == '@', c == '+', c == ':', c == ',', c == '.', c == '/', c == '-':
			i++
			continue
		case c == '=':
			if first {
				style = single
			}
			i++
			continue
		case c < 0x20 || c == 0x7f:
			return dollar
		case c < 0x80:
			style = single
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(word[i:])
		if (r == utf8.RuneError && size == 1) || hidden(r) {
			return dollar
		}
		style = single
		i += size
	}
	return style
}
