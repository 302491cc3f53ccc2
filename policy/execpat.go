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

// maxMatchStates bounds the work of couldMatch; past it, it answers true
// (which can only make a decision stricter).
const maxMatchStates = 1 << 20

// couldMatch reports whether some command that m stands for matches: m is
// a matching text in which dynMark stands for a dynamic word with the space
// before it (nothing, or a space followed by any text). It searches the
// pairs of positions in the pattern and in m, '*' and dynamic words taking
// any text: O(len(pattern) × len(m)).
func (p *execPattern) couldMatch(m string) bool {
	lit := m
	if i := strings.IndexByte(m, dynMark); i >= 0 {
		lit = m[:i]
	}
	if n := min(len(p.chunks[0]), len(lit)); p.chunks[0][:n] != lit[:n] {
		return false // the literal starts differ
	}
	pt := p.text
	lp, lm := len(pt), len(m)
	if (lp+1)*(lm+1)*2 > maxMatchStates {
		return true
	}
	// State (i, j, in): pt[i:] is left to match m[j:]; in says that the
	// dynamic word at m[j] has begun (its space is taken) and may take more.
	var buf [2048]bool
	var sbuf [64]int32
	n := (lp + 1) * (lm + 1) * 2
	var seen []bool
	if n <= len(buf) {
		seen = buf[:n]
	} else {
		seen = make([]bool, n)
	}
	stack := sbuf[:0]
	seen[0] = true
	stack = append(stack, 0)
	w := lm + 1
	for len(stack) > 0 {
		k := int(stack[len(stack)-1])
		stack = stack[:len(stack)-1]
		in := k&1 == 1
		i, j := (k>>1)/w, (k>>1)%w
		var next [3]int // states to visit, -1 for none
		next[0], next[1], next[2] = -1, -1, -1
		state := func(i, j int, in bool) int {
			k := (i*w + j) << 1
			if in {
				k |= 1
			}
			return k
		}
		switch {
		case in:
			next[0] = state(i, j+1, false) // the dynamic word ends
			if i < lp {
				next[1] = state(i+1, j, true) // it takes pt[i] (or matches along a '*')
			}
		case i == lp && j == lm:
			return true
		default:
			star := i < lp && pt[i] == '*'
			if star {
				next[0] = state(i+1, j, false) // the '*' ends
			}
			switch {
			case j < lm && m[j] == dynMark:
				next[1] = state(i, j+1, false) // the dynamic word is empty
				if star {
					next[2] = state(i, j, true) // the '*' takes its space
				} else if i < lp && pt[i] == ' ' {
					next[2] = state(i+1, j, true)
				}
			case j < lm && star:
				next[1] = state(i, j+1, false) // the '*' takes m[j]
			case j < lm && i < lp && pt[i] == m[j]:
				next[1] = state(i+1, j+1, false)
			}
		}
		for _, k := range next {
			if k >= 0 && !seen[k] {
				seen[k] = true
				stack = append(stack, int32(k))
			}
		}
	}
	return false
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
