package policy

import (
	"errors"
	"strings"

	"github.com/moat-sandbox/moat/policy/shell"
)

// execPattern is a compiled Exec pattern: command words joined by single
// spaces where '*' matches any run of characters, spaces included.
type execPattern struct {
	text   string   // normalized pattern
	chunks []string // text split at '*' (len 1 when there is no star)
}

// compileExec normalizes an Exec pattern: runs of white space become one
// space, and the first word is replaced by its base name (as
// shell.Normalize does for commands), so `/usr/bin/git push` is `git push`.
func compileExec(pat string) (*execPattern, error) {
	s := collapseSpace(pat)
	first := firstWord(s)
	s = shell.BaseName(first) + s[len(first):]
	if s == "" {
		return nil, errors.New("empty pattern")
	}
	for strings.Contains(s, "**") {
		s = strings.ReplaceAll(s, "**", "*")
	}
	return &execPattern{text: s, chunks: strings.Split(s, "*")}, nil
}

// match reports whether the normalized command line s matches.
func (p *execPattern) match(s string) bool {
	if len(p.chunks) == 1 {
		return s == p.text
	}
	first, last := p.chunks[0], p.chunks[len(p.chunks)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	mid := s[len(first) : len(s)-len(last)]
	for _, c := range p.chunks[1 : len(p.chunks)-1] {
		i := strings.Index(mid, c)
		if i < 0 {
			return false
		}
		mid = mid[i+len(c):]
	}
	return true
}

// canStart reports whether the pattern could match some command whose first
// word is name: it matches name alone, or some "name ...".
func (p *execPattern) canStart(name string) bool {
	if p.match(name) {
		return true
	}
	s := name + " "
	if len(p.chunks) == 1 {
		return strings.HasPrefix(p.text, s)
	}
	c0 := p.chunks[0]
	return strings.HasPrefix(c0, s) || strings.HasPrefix(s, c0)
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// collapseSpace trims s and replaces every run of ASCII white space by one
// space.
func collapseSpace(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if isSpace(s[i]) && (s[i] != ' ' || i == 0 || i == len(s)-1 || s[i+1] == ' ') {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for i := 0; i < len(s); i++ {
		if isSpace(s[i]) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// joinWords joins command words with single spaces, collapsing white
// space inside words too.
func joinWords(words []string) string {
	n := 0
	for _, w := range words {
		n += len(w) + 1
	}
	var b strings.Builder
	b.Grow(n)
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	return collapseSpace(b.String())
}
