package shell

import (
	"slices"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// word is a shell word after quote removal, best-effort, with the reasons it
// is not certain.
type word struct {
	val     string
	reasons []string
	// For a word that is not certain:
	src   string // the word as written (cut to a readable length)
	split bool   // it may become several words, or none (an unquoted expansion, "$@", a glob)
	lit   int    // how many bytes of val are literal before the first expansion
}

// fixed reports whether the word is one word whose literal prefix is at
// least n bytes long: "--opt=$x" has a known option name.
func (wd word) fixed(n int) bool { return wd.certain() || !wd.split && wd.lit >= n }

func (wd word) certain() bool { return len(wd.reasons) == 0 }

// mode is the context a word is expanded in.
type mode int

const (
	modeArg     mode = iota // a command's argument: globs and braces expand
	modeNoGlob              // assignment values, here-strings, case words
	modeHeredoc             // the body of an unquoted here-document
)

// wordState accumulates one word.
type wordState struct {
	b          strings.Builder
	reasons    []string
	glob       bool
	bracket    int  // 1 + the offset in b of the first unquoted [, or 0
	assignLike bool // the word reads NAME=…, where bash expands =~ and :~
	dynAt      int  // 1 + the offset in b of the first expansion, or 0
	opaque     bool // a reason other than an expansion: nothing of it is literal
	split      bool // an expansion that word splitting (or "$@") can make several words
}

func (ws *wordState) reason(r string) {
	ws.reasons = appendReason(ws.reasons, r)
	ws.opaque = true
}

// evalWord removes quotes from wd and records what makes it uncertain. The
// commands of substitutions in it are reported on the way, since they run
// before the command the word belongs to.
func (w *walker) evalWord(c ctx, wd *syntax.Word, m mode) word {
	if wd == nil {
		return word{}
	}
	var ws wordState
	if m == modeArg && len(wd.Parts) > 0 {
		if l, ok := wd.Parts[0].(*syntax.Lit); ok {
			ws.assignLike = looksLikeAssignment(l.Value)
			if c.dialect == dialectZsh && len(l.Value) > 1 && l.Value[0] == '=' {
				ws.reason("zsh expands " + quoteShort(l.Value) + " to a program's path")
			}
		}
	}
	for i, part := range wd.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			if m == modeHeredoc {
				ws.b.WriteString(unescape(p.Value, "$`\\"))
				continue
			}
			ws.unquoted(p.Value, i == 0, i == len(wd.Parts)-1, m)
		case *syntax.SglQuoted:
			if !p.Dollar {
				ws.b.WriteString(p.Value)
				continue
			}
			s, rs := ansiC(p.Value)
			ws.b.WriteString(s)
			for _, r := range rs {
				ws.reason(r)
			}
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					ws.b.WriteString(unescape(l.Value, "$`\"\\"))
					continue
				}
				w.dynamic(c, &ws, q, true, m)
			}
		default:
			w.dynamic(c, &ws, part, false, m)
		}
	}
	out := word{val: ws.b.String(), reasons: ws.reasons}
	if m == modeArg {
		// A [ is a glob when a ] follows it; the first [ has the most after it.
		if ws.glob || ws.bracket > 0 && strings.IndexByte(out.val[ws.bracket:], ']') >= 0 {
			out.reasons = appendReason(out.reasons, "glob pattern "+quoteShort(out.val))
			ws.opaque, ws.split = true, true
		}
		if hasBraceExpansion(wd) {
			out.reasons = appendReason(out.reasons, "brace expansion "+quoteShort(out.val))
			ws.opaque, ws.split = true, true
		}
	}
	if !out.certain() {
		out.src = w.snippet(c, wd, 60)
		if out.src == "" {
			out.src = "…"
		}
		out.split = ws.split
		switch {
		case ws.opaque:
		case ws.dynAt > 0:
			out.lit = ws.dynAt - 1
		default:
			out.lit = len(out.val)
		}
	}
	return out
}

// dynamic handles a word part whose value is only known when the script
// runs: it adds nothing to the value, a reason, and the commands inside it.
// quoted says it is inside double quotes, where it is not split into words.
func (w *walker) dynamic(c ctx, ws *wordState, part syntax.WordPart, quoted bool, m mode) {
	src := w.snippet(c, part, 60)
	if ws.dynAt == 0 {
		ws.dynAt = ws.b.Len() + 1
	}
	if m == modeArg && !quoted {
		ws.split = true
	}
	r := ""
	switch p := part.(type) {
	case *syntax.ParamExp:
		r = "parameter expansion " + src
		if m == modeArg && (p.Param != nil && p.Param.Value == "@" || p.Index != nil || p.Names != 0) {
			ws.split = true // "$@", "${a[@]}", "${!p@}" are several words
		}
		w.scan(c, p)
	case *syntax.CmdSubst:
		r = "command substitution " + src
		w.stmts(w.enter(c), p.Stmts)
	case *syntax.ArithmExp:
		r = "arithmetic expansion " + src
		w.scan(c, p)
	case *syntax.ProcSubst:
		r = "process substitution " + src
		w.stmts(w.enter(c), p.Stmts)
	case *syntax.ExtGlob:
		ws.reason("extended glob " + src)
		ws.split = ws.split || m == modeArg
		if p.Pattern != nil {
			ws.b.WriteString(p.Op.String() + p.Pattern.Value + ")")
		}
		return
	default:
		ws.reason("shell expansion " + src)
		ws.split = ws.split || m == modeArg
		w.scan(c, p)
		return
	}
	ws.reasons = appendReason(ws.reasons, r)
}

// unquoted appends an unquoted literal, removing backslashes and noting
// globbing characters and tilde forms.
func (ws *wordState) unquoted(v string, first, last bool, m mode) {
	for i := 0; i < len(v); i++ {
		ch := v[i]
		if ch == '\\' {
			if i+1 < len(v) {
				i++
				if v[i] != '\n' {
					ws.b.WriteByte(v[i])
				}
			} else {
				ws.b.WriteByte(ch)
			}
			continue
		}
		switch ch {
		case '*', '?':
			if m == modeArg {
				ws.glob = true
			}
		case '[':
			if m == modeArg && ws.bracket == 0 {
				ws.bracket = ws.b.Len() + 1
			}
		case '~':
			if first && i == 0 {
				if tildeExpands(v[1:], last) {
					ws.reason("tilde expansion " + quoteShort(v))
				}
			} else if ws.assignLike && ws.b.Len() > 0 {
				if prev := ws.b.String()[ws.b.Len()-1]; prev == '=' || prev == ':' {
					ws.reason("tilde expansion in an assignment-like word")
				}
			}
		}
		ws.b.WriteByte(ch)
	}
}

// tildeExpands says whether a word starting with ~ followed by rest (the
// rest of its first, unquoted literal) is a tilde form other than a plain ~
// (~user, ~+, ~-, ~N). A prefix that goes on into quoted text is not
// expanded by the shell.
func tildeExpands(rest string, lastPart bool) bool {
	end := strings.IndexAny(rest, "/:")
	if end < 0 {
		if !lastPart {
			return false // the prefix goes on into quoted or expanded text
		}
		end = len(rest)
	}
	prefix := rest[:end]
	return prefix != "" && !strings.Contains(prefix, `\`)
}

func looksLikeAssignment(s string) bool {
	name, _, ok := strings.Cut(s, "=")
	name = strings.TrimSuffix(name, "+")
	if !ok || name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || i > 0 && ch >= '0' && ch <= '9' {
			continue
		}
		return false
	}
	return true
}

// hasBraceExpansion says whether bash would brace-expand the word.
func hasBraceExpansion(wd *syntax.Word) bool {
	cp := &syntax.Word{Parts: slices.Clone(wd.Parts)}
	if !syntax.SplitBraces(cp) {
		return false
	}
	return slices.ContainsFunc(cp.Parts, func(p syntax.WordPart) bool {
		_, ok := p.(*syntax.BraceExp)
		return ok
	})
}

// unescape removes the backslash before the characters in special (and a
// backslash-newline), as inside double quotes and here-documents.
func unescape(v, special string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			if v[i+1] == '\n' {
				i++
				continue
			}
			if strings.IndexByte(special, v[i+1]) >= 0 {
				i++
				b.WriteByte(v[i])
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// ansiC decodes the body of a $'…' string as bash does.
func ansiC(s string) (string, []string) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var reasons []string
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch != '\\' || i+1 == len(s) {
			b = append(b, ch)
			continue
		}
		i++
		switch e := s[i]; e {
		case 'a':
			b = append(b, 7)
		case 'b':
			b = append(b, 8)
		case 'e', 'E':
			b = append(b, 27)
		case 'f':
			b = append(b, 12)
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'v':
			b = append(b, 11)
		case '\\', '\'', '"', '?':
			b = append(b, e)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v, n := digits(s[i:], 3, 8)
			b = append(b, byte(v))
			i += n - 1
		case 'x':
			v, n := digits(s[i+1:], 2, 16)
			if n == 0 {
				b = append(b, '\\', e)
				continue
			}
			b = append(b, byte(v))
			i += n
		case 'u', 'U':
			most := 4
			if e == 'U' {
				most = 8
			}
			v, n := digits(s[i+1:], most, 16)
			if n == 0 {
				b = append(b, '\\', e)
				continue
			}
			if v >= 0x80 {
				reasons = appendReason(reasons, "$'…' with a \\"+string(e)+" escape depends on the locale")
			}
			b = utf8.AppendRune(b, rune(v))
			i += n
		case 'c':
			if i+1 < len(s) {
				i++
				b = append(b, s[i]&0x1f)
			} else {
				b = append(b, '\\', e)
			}
		default:
			b = append(b, '\\', e)
		}
	}
	if k := slices.Index(b, 0); k >= 0 {
		b = b[:k]
		reasons = appendReason(reasons, "$'…' with a NUL byte")
	}
	return string(b), reasons
}

// digits reads up to most digits of base from the start of s.
func digits(s string, most, base int) (v, n int) {
	for n < most && n < len(s) {
		d := -1
		switch ch := s[n]; {
		case ch >= '0' && ch <= '9':
			d = int(ch - '0')
		case ch >= 'a' && ch <= 'f':
			d = int(ch-'a') + 10
		case ch >= 'A' && ch <= 'F':
			d = int(ch-'A') + 10
		}
		if d < 0 || d >= base {
			break
		}
		v = v*base + d
		n++
	}
	return v, n
}

// maxReasons is how many distinct reasons are kept for one word or
// command; more are summed up as "…", which also keeps the work linear.
const maxReasons = 8

func appendReason(rs []string, r string) []string {
	switch {
	case len(rs) > maxReasons || slices.Contains(rs, r):
		return rs
	case len(rs) == maxReasons:
		return append(rs, "…")
	}
	return append(rs, r)
}

// quoteShort quotes s for a reason, cut to a readable length.
func quoteShort(s string) string {
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return "`" + s + "`"
}

// assignWord evaluates an assignment (for the commands in it) and renders it
// as the word a declaration builtin receives.
func (w *walker) assignWord(c ctx, a *syntax.Assign) word {
	if a.Naked && a.Name == nil {
		return w.evalWord(c, a.Value, modeArg)
	}
	var out word
	if a.Name != nil {
		out.val = a.Name.Value
	}
	if a.Index != nil {
		w.scan(c, a.Index)
		out.val += "[" + w.snippet(c, a.Index, 0) + "]"
		out.reasons = appendReason(out.reasons, "array subscript")
	}
	if a.Naked {
		return out
	}
	if a.Append {
		out.val += "+="
	} else {
		out.val += "="
	}
	if a.Value != nil {
		v := w.evalWord(c, a.Value, modeNoGlob)
		out.val += v.val
		for _, r := range v.reasons {
			out.reasons = appendReason(out.reasons, r)
		}
	}
	if a.Array != nil {
		w.scan(c, a.Array)
		out.val += w.snippet(c, a.Array, 0)
		out.reasons = appendReason(out.reasons, "array assignment")
	}
	return out
}

// stdin is what a command's standard input is, as far as reading a script
// from it goes.
type stdin struct {
	doc     bool   // a here-document or here-string
	body    string // its text
	reasons []string
}

// redirects evaluates redirections (for the commands in their words) and
// returns the standard input they set up.
func (w *walker) redirects(c ctx, rs []*syntax.Redirect) stdin {
	var in stdin
	for _, r := range rs {
		fd0 := r.N == nil || r.N.Value == "0"
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			body := w.heredoc(c, r)
			if fd0 {
				in = stdin{doc: true, body: body.val, reasons: body.reasons}
			}
		case syntax.WordHdoc:
			v := w.evalWord(c, r.Word, modeNoGlob)
			if fd0 {
				in = stdin{doc: true, body: v.val + "\n", reasons: v.reasons}
			}
		default:
			w.evalWord(c, r.Word, modeArg)
			if fd0 && (r.Op == syntax.RdrIn || r.Op == syntax.DplIn || r.Op == syntax.RdrInOut) {
				in = stdin{}
			}
		}
	}
	return in
}

// heredoc is the text of a here-document: literal when its delimiter is
// quoted, expanded otherwise.
func (w *walker) heredoc(c ctx, r *syntax.Redirect) word {
	if r.Hdoc == nil {
		return word{}
	}
	quoted := false
	if r.Word != nil {
		for _, p := range r.Word.Parts {
			if l, ok := p.(*syntax.Lit); !ok || strings.Contains(l.Value, `\`) {
				quoted = true
			}
		}
	}
	var out word
	if quoted && len(r.Hdoc.Parts) == 1 {
		if l, ok := r.Hdoc.Parts[0].(*syntax.Lit); ok {
			out.val = l.Value
		} else {
			out = w.evalWord(c, r.Hdoc, modeHeredoc)
		}
	} else {
		out = w.evalWord(c, r.Hdoc, modeHeredoc)
	}
	if r.Op == syntax.DashHdoc {
		lines := strings.SplitAfter(out.val, "\n")
		for i, l := range lines {
			lines[i] = strings.TrimLeft(l, "\t")
		}
		out.val = strings.Join(lines, "")
	}
	if !out.certain() {
		out.reasons = []string{"the here-document could not be known for sure (" + strings.Join(out.reasons, "; ") + ")"}
	}
	return out
}
