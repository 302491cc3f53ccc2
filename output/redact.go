package output

import (
	"bytes"
	"encoding/binary"
	"io"
	"sort"
	"strconv"
	"strings"
)

// MinSecretLen is the fewest bytes a secret must keep once its surrounding
// whitespace is trimmed for moat to accept it: every form of a secret is
// redacted wherever it occurs, and a shorter value would redact ordinary
// text (a secret "ab\n" would blank out every "ab"). The redactor itself
// redacts whatever it is given; callers taking secrets from users check
// this with CheckSecret.
const MinSecretLen = 4

// CheckSecret reports whether value is long enough to be redacted
// reliably (see MinSecretLen). The error never contains the value.
func CheckSecret(value []byte) error {
	if n := len(bytes.TrimSpace(value)); n < MinSecretLen {
		return &shortSecretError{n: n}
	}
	return nil
}

type shortSecretError struct{ n int }

func (e *shortSecretError) Error() string {
	return "holds " + strconv.Itoa(e.n) + " bytes besides surrounding whitespace; at least " + strconv.Itoa(MinSecretLen) +
		" are needed to redact it without blanking out ordinary output"
}

// Matcher finds every form of a set of secrets and replaces each
// occurrence with "[REDACTED:NAME]". The forms of a secret are the ways a
// value usually reaches an output (see Forms); all of them are matched
// ASCII case-insensitively, because moat itself case-folds some text it
// writes (the egress proxy lower-cases host names, which reach its 403
// body, its events and moat's refusal lines). At one position the longest
// form wins; matching then resumes after it.
//
// A Matcher is immutable and safe for concurrent use: RedactString and
// Redact serve one-shot text (events, log lines, error messages) and
// Writer the streams, all with the same forms and rules. A nil *Matcher
// redacts nothing.
type Matcher struct {
	pats   []pattern // longest first
	groups []group
	maxLen int
}

// group is the forms that share their first anchorLen bytes (the forms of
// one secret mostly do): the stream is searched once for the anchor, and
// each hit is checked against the group's forms, longest first.
type group struct {
	anchor []byte
	pats   []int // indices into Matcher.pats, longest first
	rare   byte  // the anchor's byte least likely in ordinary output
	off    int   // its offset in the anchor
}

// anchorLen is how many leading bytes a group's forms share.
const anchorLen = 8

type pattern struct {
	form   []byte // ASCII-lower-cased
	fail   []int32
	marker []byte
}

// Forms returns the forms of one secret value that are redacted: the value
// itself; the value with its surrounding whitespace trimmed (what `$(cat
// f)`, Python's .strip() and a pty's cat of a file ending in a newline
// print); its whitespace-separated fields joined by single spaces (an
// unquoted `echo $(cat f)` of a multi-line value); each of those with every
// "\n" as "\r\n" (what a pty's line discipline writes, ONLCR); and each of
// those through strings.ToLower where that changes more than ASCII letters
// (the proxy lower-cases host names with it). Empty forms are dropped and
// duplicates (after ASCII lower-casing) removed. Matching is ASCII
// case-insensitive on top of these.
func Forms(value []byte) [][]byte {
	var base [][]byte
	trimmed := bytes.TrimSpace(value)
	base = append(base, value, trimmed)
	if f := bytes.Fields(trimmed); len(f) > 1 {
		base = append(base, bytes.Join(f, []byte(" ")))
	}
	var withCR [][]byte
	for _, b := range base {
		withCR = append(withCR, b)
		if bytes.IndexByte(b, '\n') >= 0 {
			withCR = append(withCR, bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")))
		}
	}
	var all [][]byte
	for _, b := range withCR {
		all = append(all, b)
		if l := []byte(strings.ToLower(string(b))); !bytes.Equal(foldCopy(l), foldCopy(b)) {
			all = append(all, l)
		}
	}
	var out [][]byte
	seen := map[string]bool{}
	for _, f := range all {
		k := string(foldCopy(f))
		if len(f) == 0 || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, f)
	}
	return out
}

// NewMatcher compiles secrets (name to value); empty values are ignored.
// It returns nil when there is nothing to redact.
func NewMatcher(secrets map[string][]byte) *Matcher {
	names := make([]string, 0, len(secrets))
	for name, v := range secrets {
		if len(v) > 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	m := &Matcher{}
	seen := map[string]bool{}
	for _, name := range names {
		marker := []byte("[REDACTED:" + name + "]")
		for _, f := range Forms(secrets[name]) {
			f = foldCopy(f)
			if seen[string(f)] {
				continue // another secret's form; the first name keeps it
			}
			seen[string(f)] = true
			m.pats = append(m.pats, pattern{form: f, fail: failure(f), marker: marker})
			m.maxLen = max(m.maxLen, len(f))
		}
	}
	// Longest first: at one position, the longest form wins.
	sort.SliceStable(m.pats, func(i, j int) bool { return len(m.pats[i].form) > len(m.pats[j].form) })
	byAnchor := map[string]int{}
	for k, p := range m.pats {
		a := p.form[:min(len(p.form), anchorLen)]
		g, ok := byAnchor[string(a)]
		if !ok {
			g = len(m.groups)
			byAnchor[string(a)] = g
			off := rarest(a)
			m.groups = append(m.groups, group{anchor: a, rare: a[off], off: off})
		}
		m.groups[g].pats = append(m.groups[g].pats, k)
	}
	return m
}

// failure is the KMP failure function of p: fail[k] is the length of the
// longest proper prefix of p[:k+1] that is also its suffix.
func failure(p []byte) []int32 {
	f := make([]int32, len(p))
	k := int32(0)
	for i := 1; i < len(p); i++ {
		for k > 0 && p[i] != p[k] {
			k = f[k-1]
		}
		if p[i] == p[k] {
			k++
		}
		f[i] = k
	}
	return f
}

// RedactString returns s with every form of every secret replaced.
func (m *Matcher) RedactString(s string) string {
	if m == nil || s == "" {
		return s
	}
	out, _ := m.scan(nil, []byte(s), nil, nil, true)
	return string(out)
}

// Redact returns b with every form of every secret replaced, in a new
// slice (b is not modified).
func (m *Matcher) Redact(b []byte) []byte {
	if m == nil {
		return append([]byte(nil), b...)
	}
	out, _ := m.scan(nil, b, nil, nil, true)
	return out
}

// Writer returns a streaming redactor in front of w (w itself when m is
// nil).
func (m *Matcher) Writer(w io.Writer) io.Writer {
	if m == nil {
		return w
	}
	return &Redactor{m: m, w: w}
}

// Redactor replaces secret values in a stream with "[REDACTED:NAME]"
// before it reaches w. Between writes it holds back only a tail that is
// the start of some form of a secret (at most the longest form minus one
// byte), so a value split across writes is still caught and other output
// is not delayed; Flush writes the held-back bytes at the end of the
// stream. Its output is the same however the stream is split. It is not
// safe for concurrent use (one stream, one copier).
type Redactor struct {
	m       *Matcher
	w       io.Writer
	pending []byte
	folded  []byte
	next    []int
	out     []byte
}

// NewRedactor returns w itself when there is nothing to redact.
func NewRedactor(w io.Writer, secrets map[string][]byte) io.Writer {
	return NewMatcher(secrets).Writer(w)
}

// Write redacts p (with what was held back) and passes on all but a tail
// that could still be the start of a secret.
func (r *Redactor) Write(p []byte) (int, error) {
	r.pending = append(r.pending, p...)
	return len(p), r.process(false)
}

// Flush passes on what is held back; call it at the end of the stream.
func (r *Redactor) Flush() error { return r.process(true) }

func (r *Redactor) process(final bool) error {
	r.folded = append(r.folded[:0], r.pending...)
	out, used := r.m.scan(r.out[:0], r.pending, r.folded, &r.next, final)
	r.pending = append(r.pending[:0], r.pending[used:]...)
	r.out = out
	if len(out) == 0 {
		return nil
	}
	_, err := r.w.Write(out)
	return err
}

// scan appends data, redacted, to out and returns how many bytes of data
// it consumed. Unless final, it stops before a tail that could still grow
// into a match with more data; a match is taken only where no longer or
// earlier one could still complete, so the output never depends on how a
// stream is split. folded, if not nil, is a copy of data to lower-case in
// place; next, if not nil, is scratch space.
func (m *Matcher) scan(out, data, folded []byte, next *[]int, final bool) ([]byte, int) {
	if folded == nil {
		folded = append([]byte(nil), data...)
	}
	foldASCII(folded)
	// nx[g] is where group g's next match starts (-2: not searched yet,
	// -1: none left), nk[g] which form it is.
	var buf []int
	if next != nil {
		buf = (*next)[:0]
	}
	for range m.groups {
		buf = append(buf, -2)
	}
	buf = append(buf, make([]int, len(m.groups))...)
	if next != nil {
		*next = buf
	}
	nx, nk := buf[:len(m.groups)], buf[len(m.groups):]
	hold := len(data)
	if !final {
		hold = m.holdStart(folded, 0)
	}
	i := 0
	for i < hold {
		at, k := -1, -1
		for g := range m.groups {
			if nx[g] == -1 {
				continue // no more occurrences
			}
			if nx[g] < i { // never searched, or overtaken by a match
				nx[g], nk[g] = m.find(&m.groups[g], folded, i)
				if nx[g] < 0 {
					continue
				}
			}
			// Ties: the longer form wins.
			if at < 0 || nx[g] < at || nx[g] == at && len(m.pats[nk[g]].form) > len(m.pats[k].form) {
				at, k = nx[g], nk[g]
			}
		}
		if at < 0 || at >= hold {
			break
		}
		out = append(out, data[i:at]...)
		out = append(out, m.pats[k].marker...)
		i = at + len(m.pats[k].form)
		if i > hold {
			hold = m.holdStart(folded, i)
		}
	}
	out = append(out, data[i:hold]...)
	return out, hold
}

// find returns the first match of one of g's forms in folded at or after
// i, the longest form at the first position: (-1, -1) when there is none.
// Anchor hits that are no match cost a comparison each; once those
// comparisons outweigh the bytes skipped (a periodic secret in a periodic
// stream), it searches for each form by itself, which stays linear.
func (m *Matcher) find(g *group, folded []byte, i int) (int, int) {
	from, budget := i, 64+2*len(m.pats[g.pats[0]].form)
	misses, brute := 0, false
	for {
		var at int
		if brute {
			x := bytes.Index(folded[i:], g.anchor)
			if x < 0 {
				return -1, -1
			}
			at = i + x
		} else {
			if i+g.off >= len(folded) {
				return -1, -1
			}
			x := bytes.IndexByte(folded[i+g.off:], g.rare)
			if x < 0 {
				return -1, -1
			}
			at = i + x
			if !bytes.HasPrefix(folded[at:], g.anchor) {
				// The rare byte is common here: let bytes.Index
				// search for the whole anchor instead.
				misses++
				brute = misses > 4+(at-from)>>6
				i = at + 1
				continue
			}
		}
		for _, k := range g.pats {
			f := m.pats[k].form
			if bytes.HasPrefix(folded[at:], f) {
				return at, k
			}
			budget -= len(f)
		}
		i = at + 1
		if budget+2*(i-from) < 0 {
			break
		}
	}
	best, bk := -1, -1
	for _, k := range g.pats {
		if x := bytes.Index(folded[i:], m.pats[k].form); x >= 0 && (best < 0 || i+x < best) {
			best, bk = i+x, k
		}
	}
	return best, bk
}

// rarest returns the offset of the byte of a that is least common in
// ordinary output (text, code, logs), by a rough rank: the search for a
// group's anchor stops at each occurrence of that byte.
func rarest(a []byte) int {
	best := 0
	for k := range a {
		if byteRank(a[k]) < byteRank(a[best]) {
			best = k
		}
	}
	return best
}

func byteRank(c byte) int {
	switch {
	case c == ' ' || c == '\n' || c == 'e' || c == 't' || c == 'a' || c == 'o' || c == 'i' || c == 'n' || c == 's' || c == 'r':
		return 9
	case c == 'q' || c == 'z' || c == 'x' || c == 'j' || c == 'k' || c == 'v':
		return 5
	case 'a' <= c && c <= 'z' || c == '\t' || c == '0' || c == '1':
		return 7
	case '2' <= c && c <= '9' || strings.IndexByte(".,/-_:;\"'()=", c) >= 0:
		return 6
	case c >= 0x80 || c < ' ' && c != '\r':
		return 3
	}
	return 4 // other punctuation, and \r
}

// holdStart returns where the longest tail of folded[from:] begins that
// is a proper prefix of some form (len(folded) when there is none).
func (m *Matcher) holdStart(folded []byte, from int) int {
	keep := 0
	for _, p := range m.pats {
		start := max(from, len(folded)-(len(p.form)-1))
		if len(folded)-start <= keep {
			continue // cannot beat what another form holds
		}
		q := int32(0)
		for _, c := range folded[start:] {
			for q > 0 && p.form[q] != c {
				q = p.fail[q-1]
			}
			if p.form[q] == c {
				q++
			}
			if int(q) == len(p.form) {
				q = p.fail[q-1]
			}
		}
		keep = max(keep, int(q))
	}
	return len(folded) - keep
}

// foldCopy returns b ASCII-lower-cased in a new slice.
func foldCopy(b []byte) []byte {
	c := append([]byte(nil), b...)
	foldASCII(c)
	return c
}

// foldASCII lower-cases the ASCII letters of b in place, eight bytes at a
// time.
func foldASCII(b []byte) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		low := x &^ highs
		// High bit of each byte: >= 'A', then > 'Z', both on 7-bit bytes.
		geA := low + ones*(0x80-'A')
		gtZ := low + ones*(0x80-'Z'-1)
		upper := (geA &^ gtZ) &^ x & highs
		binary.LittleEndian.PutUint64(b[i:], x|upper>>2)
	}
	for ; i < len(b); i++ {
		if c := b[i]; 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
}
