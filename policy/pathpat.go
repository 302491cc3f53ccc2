package policy

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

type anchor uint8

const (
	anchorAbs       anchor = iota // "/..."
	anchorHome                    // "~" or "~/..."
	anchorWorkspace               // a relative pattern with a slash, or "./..."
	anchorAny                     // a base name without a slash: any depth
)

// pathPattern is a parsed Read/Write pattern, not yet bound to a Context.
type pathPattern struct {
	anchor anchor
	segs   []pseg
}

// pseg is one segment of a path pattern.
type pseg struct {
	raw   string // as written
	lit   string // the literal name when glob is nil and !dstar
	glob  []gtok
	dstar bool // "**": zero or more segments
}

type gkind uint8

const (
	gLit gkind = iota
	gOne
	gStar
	gClass
)

// gtok is one token of a segment glob.
type gtok struct {
	kind   gkind
	s      string // gLit
	ranges []rune // gClass: pairs lo, hi
	neg    bool   // gClass: [!...] or [^...]
}

const maxPathSegs = 256

// parsePathPattern parses a gitignore-style path pattern (see the package
// documentation).
func parsePathPattern(p string) (*pathPattern, error) {
	pp := &pathPattern{}
	rest := p
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		pp.anchor = anchorHome
		rest = strings.TrimPrefix(p[1:], "/")
	case strings.HasPrefix(p, "~"):
		return nil, errors.New("only ~/ (your home) is supported, not ~user; write the absolute path")
	case strings.HasPrefix(p, "/"):
		pp.anchor = anchorAbs
		rest = p[1:]
	case strings.HasPrefix(p, "./"):
		pp.anchor = anchorWorkspace
		rest = p[2:]
	default:
		if strings.Contains(strings.TrimSuffix(p, "/"), "/") {
			pp.anchor = anchorWorkspace
		} else {
			pp.anchor = anchorAny
		}
	}
	// A trailing slash means the directory and everything under it, which
	// every pattern already covers (a pattern matches a path or any of its
	// parents).
	if strings.HasSuffix(rest, "/") {
		rest = rest[:len(rest)-1]
	}
	if rest == "" {
		if pp.anchor == anchorAbs || pp.anchor == anchorHome {
			return pp, nil
		}
		return nil, errors.New("empty path")
	}
	parts := strings.Split(rest, "/")
	if len(parts) > maxPathSegs {
		return nil, fmt.Errorf("more than %d path segments", maxPathSegs)
	}
	for _, part := range parts {
		switch part {
		case "":
			return nil, errors.New("empty path segment (//)")
		case ".", "..":
			return nil, fmt.Errorf("%q segments are not allowed in patterns; write the path without them", part)
		}
		s, err := compileSeg(part)
		if err != nil {
			return nil, err
		}
		pp.segs = append(pp.segs, s)
	}
	return pp, nil
}

// compileSeg compiles one segment: '*' (any run of characters but '/'),
// '?' (one character), '[...]' (a class, '!' or '^' negates, a-z ranges),
// '\' escapes the next character; "**" alone is any number of segments.
func compileSeg(s string) (pseg, error) {
	if s == "**" {
		return pseg{raw: s, dstar: true}, nil
	}
	var toks []gtok
	var lit strings.Builder
	glob := false
	flush := func() {
		if lit.Len() > 0 {
			toks = append(toks, gtok{kind: gLit, s: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch c {
		case '\\':
			if i+1 >= len(s) {
				return pseg{}, errors.New(`trailing backslash`)
			}
			_, w := utf8.DecodeRuneInString(s[i+1:])
			lit.WriteString(s[i+1 : i+1+w])
			i += 1 + w
		case '*':
			flush()
			glob = true
			if len(toks) == 0 || toks[len(toks)-1].kind != gStar {
				toks = append(toks, gtok{kind: gStar})
			}
			i++
		case '?':
			flush()
			glob = true
			toks = append(toks, gtok{kind: gOne})
			i++
		case '[':
			flush()
			glob = true
			t, n, err := compileClass(s[i:])
			if err != nil {
				return pseg{}, err
			}
			toks = append(toks, t)
			i += n
		default:
			lit.WriteByte(c)
			i++
		}
	}
	if !glob {
		return pseg{raw: s, lit: lit.String()}, nil
	}
	flush()
	return pseg{raw: s, glob: toks}, nil
}

// compileClass compiles a class starting at s[0] == '[' and returns the
// number of bytes it used.
func compileClass(s string) (gtok, int, error) {
	t := gtok{kind: gClass}
	i := 1
	if i < len(s) && (s[i] == '!' || s[i] == '^') {
		t.neg = true
		i++
	}
	first := true
	for {
		if i >= len(s) {
			return t, 0, errors.New("unterminated [ class")
		}
		if s[i] == ']' && !first {
			return t, i + 1, nil
		}
		first = false
		lo, n, err := classChar(s[i:])
		if err != nil {
			return t, 0, err
		}
		i += n
		hi := lo
		if i+1 < len(s) && s[i] == '-' && s[i+1] != ']' {
			hi, n, err = classChar(s[i+1:])
			if err != nil {
				return t, 0, err
			}
			i += 1 + n
			if hi < lo {
				return t, 0, fmt.Errorf("bad range %c-%c in [ class", lo, hi)
			}
		}
		t.ranges = append(t.ranges, lo, hi)
	}
}

func classChar(s string) (rune, int, error) {
	n := 0
	if s[0] == '\\' {
		if len(s) < 2 {
			return 0, 0, errors.New("unterminated [ class")
		}
		n = 1
	}
	r, w := utf8.DecodeRuneInString(s[n:])
	return r, n + w, nil
}

func (t *gtok) classMatch(r rune) bool {
	in := false
	for i := 0; i+1 < len(t.ranges); i += 2 {
		if t.ranges[i] <= r && r <= t.ranges[i+1] {
			in = true
			break
		}
	}
	return in != t.neg
}

// matchName matches one path component against a segment.
func (s *pseg) matchName(name string) bool {
	if s.dstar {
		return true
	}
	if s.glob == nil {
		return s.lit == name
	}
	return matchGlob(s.glob, name)
}

func matchGlob(toks []gtok, name string) bool {
	ti, ni := 0, 0
	starT, starN := -1, 0
	for {
		if ti < len(toks) {
			t := &toks[ti]
			switch t.kind {
			case gStar:
				starT, starN = ti, ni
				ti++
				continue
			case gLit:
				if strings.HasPrefix(name[ni:], t.s) {
					ti++
					ni += len(t.s)
					continue
				}
			case gOne:
				if ni < len(name) {
					_, w := utf8.DecodeRuneInString(name[ni:])
					ni += w
					ti++
					continue
				}
			case gClass:
				if ni < len(name) {
					r, w := utf8.DecodeRuneInString(name[ni:])
					if t.classMatch(r) {
						ni += w
						ti++
						continue
					}
				}
			}
		} else if ni == len(name) {
			return true
		}
		if starT < 0 || starN >= len(name) {
			return false
		}
		_, w := utf8.DecodeRuneInString(name[starN:])
		starN += w
		ti, ni = starT+1, starN
	}
}

// absPattern is a path pattern bound to absolute paths.
type absPattern struct {
	any     bool   // base-name pattern: matches when any component matches seg
	seg     pseg   // for any
	segs    []pseg // absolute segments (for !any)
	prefix  string // the literal directory the pattern starts with ("/" if none; "" for any)
	literal bool   // the pattern is exactly prefix (plus an optional trailing **)
	text    string // display form: "/home/u/.ssh/**" or "**/*.pem"
}

// bind anchors a parsed pattern at home or the workspace.
func (p *pathPattern) bind(home, workspace string) *absPattern {
	a := &absPattern{}
	if p.anchor == anchorAny {
		a.any = true
		a.seg = p.segs[0]
		a.text = "**/" + a.seg.raw
		return a
	}
	var base string
	switch p.anchor {
	case anchorHome:
		base = home
	case anchorWorkspace:
		base = workspace
	default:
		base = "/"
	}
	for _, c := range splitPath(base) {
		a.segs = append(a.segs, pseg{raw: escapeLit(c), lit: c})
	}
	a.segs = append(a.segs, p.segs...)
	a.finish()
	return a
}

func (a *absPattern) finish() {
	var pre, txt strings.Builder
	n := 0
	for n < len(a.segs) && a.segs[n].glob == nil && !a.segs[n].dstar {
		pre.WriteString("/")
		pre.WriteString(a.segs[n].lit)
		n++
	}
	for _, s := range a.segs {
		txt.WriteString("/")
		txt.WriteString(s.raw)
	}
	a.prefix = pre.String()
	if a.prefix == "" {
		a.prefix = "/"
	}
	a.text = txt.String()
	if a.text == "" {
		a.text = "/"
	}
	a.literal = n == len(a.segs) || (n == len(a.segs)-1 && a.segs[n].dstar)
}

// below is the pattern root/rel..., with root and each component of rel
// literal except "**" (any number of components): the runtime's "at any
// depth" forms of the protected names.
func below(root string, rel ...string) *absPattern {
	a := &absPattern{}
	for _, c := range splitPath(root) {
		a.segs = append(a.segs, pseg{raw: escapeLit(c), lit: c})
	}
	for _, r := range rel {
		for _, c := range strings.Split(r, "/") {
			if c == "**" {
				a.segs = append(a.segs, pseg{raw: c, dstar: true})
			} else {
				a.segs = append(a.segs, pseg{raw: escapeLit(c), lit: c})
			}
		}
	}
	a.finish()
	return a
}

func escapeLit(s string) string {
	if !strings.ContainsAny(s, `*?[\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// match reports whether the pattern matches the path with the given
// components or one of its parent directories.
func (a *absPattern) match(comps []string) bool { return a.matchAt(comps, true) }

// matchAt matches the path itself, or (below) also a path under a match.
func (a *absPattern) matchAt(comps []string, below bool) bool {
	if a.any {
		if a.seg.dstar {
			return true
		}
		if !below {
			return len(comps) > 0 && a.seg.matchName(comps[len(comps)-1])
		}
		for _, c := range comps {
			if a.seg.matchName(c) {
				return true
			}
		}
		return false
	}
	p := a.segs
	pi, ci := 0, 0
	starP, starC := -1, 0
	for ci < len(comps) {
		if pi == len(p) && below {
			return true // the rest is below a matched directory
		}
		if pi == len(p) {
			if starP < 0 {
				return false
			}
			starC++
			pi, ci = starP+1, starC
			continue
		}
		if p[pi].dstar {
			starP, starC = pi, ci
			pi++
			continue
		}
		if p[pi].matchName(comps[ci]) {
			pi++
			ci++
			continue
		}
		if starP < 0 {
			return false
		}
		starC++
		pi, ci = starP+1, starC
	}
	for pi < len(p) && p[pi].dstar {
		pi++
	}
	return pi == len(p)
}

// under reports whether the path (components) is dir or below it; dir is
// an absolute clean path.
func under(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || (strings.HasPrefix(p, dir) && p[len(dir)] == '/')
}

// splitPath splits a clean absolute path into its components.
func splitPath(p string) []string {
	if p == "/" || p == "" {
		return nil
	}
	return strings.Split(p[1:], "/")
}
