package policy

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Version is the policy file format this package understands.
const Version = 1

// MaxFileSize is the largest policy file accepted, in bytes.
const MaxFileSize = 1 << 20

// Profile is a named ceiling on what a sandbox may do (see the package
// documentation). The zero value means "not declared".
type Profile string

const (
	// Untrusted: the workspace and the system's read-only directories; no
	// network. The default.
	Untrusted Profile = "untrusted"
	// Trusted: read most of the host, write the workspace and the targets of
	// allow Write rules, network to the allowlist of allow Net rules.
	Trusted Profile = "trusted"
)

// stricter reports whether a is a stricter profile than b.
func stricter(a, b Profile) bool {
	return a == Untrusted && b != Untrusted || a == Trusted && b == ""
}

// File is one parsed layer: a policy file, or the rules of one call.
type File struct {
	Layer   Layer   `json:"layer"`
	Name    string  `json:"name"`           // display name: ".moat/policy.toml", "~/.config/moat/policy.toml"
	Path    string  `json:"path,omitempty"` // absolute path it was read from; "" otherwise
	Version int     `json:"version,omitempty"`
	Profile Profile `json:"profile,omitempty"` // "" when the layer declares none
	// OpenNetwork (key open_network) permits network mode open: the
	// sandbox shares the host's network. Only the managed file's counts.
	OpenNetwork bool `json:"open_network,omitempty"`
	// AllowCIDREntries (key allow_cidr_entries) are the address ranges a
	// caller's own network allowlist (a create's or a network change's
	// allow_domains) may name: an IP or CIDR entry is accepted only
	// inside one of them. true means any address, false or absent none.
	// Only the managed file's counts.
	AllowCIDREntries []netip.Prefix `json:"allow_cidr_entries,omitempty"`
	Rules            []*Rule        `json:"rules"` // in file order
}

// ParseError is one problem in a policy file or in per-call rules.
type ParseError struct {
	Layer  Layer  `json:"layer"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`   // 1-based
	Column int    `json:"column,omitempty"` // 1-based, in characters; 0 if unknown
	Key    string `json:"key,omitempty"`    // "allow", "version", ...; "" for TOML syntax errors
	Index  int    `json:"index,omitempty"`  // per-call rules: position in the Key's list
	Msg    string `json:"message"`
}

// Error reads like "project .moat/policy.toml:7: ask: Exec(: unterminated
// pattern", or "per-call deny[0]: Exec(: unterminated pattern". Syntax
// errors also carry the column: "user ~/.config/moat/policy.toml:3:9: ...".
func (e *ParseError) Error() string {
	var b strings.Builder
	if e.Layer == Call && e.File == "" {
		b.WriteString("per-call")
		if _, list := effectKeys[e.Key]; list {
			fmt.Fprintf(&b, " %s[%d]", e.Key, e.Index)
		} else if e.Key != "" {
			b.WriteString(" " + e.Key)
		}
		b.WriteString(": ")
		b.WriteString(e.Msg)
		return b.String()
	}
	fmt.Fprintf(&b, "%s %s:%d", e.Layer, e.File, e.Line)
	if e.Key == "" && e.Column > 0 {
		fmt.Fprintf(&b, ":%d", e.Column)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in one parse; it is what Parse and
// ParseCall return as their error.
type ErrorList []*ParseError

func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap lets errors.As find each *ParseError.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// ErrInvalid is matched (errors.Is) by every error about an invalid policy.
var ErrInvalid = errors.New("invalid policy")

// Is makes errors.Is(err, ErrInvalid) true.
func (l ErrorList) Is(target error) bool { return target == ErrInvalid }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ParseError) Is(target error) bool { return target == ErrInvalid }

var effectKeys = map[string]Effect{"allow": Allow, "ask": Ask, "deny": Deny}

// Parse parses a policy file of the given layer. name is how errors and
// decisions name the file. All problems are reported, each with its line.
func Parse(layer Layer, name string, data []byte) (*File, error) {
	f := &File{Layer: layer, Name: name}
	var errs ErrorList
	add := func(off int, key, format string, a ...any) {
		line, col := position(data, off)
		errs = append(errs, &ParseError{Layer: layer, File: name, Line: line, Column: col, Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	if len(data) > MaxFileSize {
		add(0, "", "file larger than %d bytes", MaxFileSize)
		return nil, errs
	}
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, w := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && w <= 1 {
				break
			}
			off += w
		}
		add(off, "", "not valid UTF-8")
		return nil, errs
	}
	var p unstable.Parser
	p.Reset(data)
	seen := map[string]int{}
	haveVersion := false
	inTable := false
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			key, off := nodeKey(e)
			add(off, "", "unknown table [%s]: a policy file has only the keys version, profile, open_network, allow_cidr_entries, allow, ask and deny", clip(key, maxShown))
			inTable = true
		case unstable.KeyValue:
			if inTable {
				continue // reported with its table
			}
			key, off := nodeKey(e)
			if first, dup := seen[key]; dup {
				add(off, "", "key %s defined twice (first on line %d)", clip(key, maxShown), first)
				continue
			}
			line, _ := position(data, off)
			seen[key] = line
			v := e.Value()
			voff := off
			if v.Raw.Length > 0 {
				voff = int(v.Raw.Offset)
			}
			switch key {
			case "version":
				haveVersion = true
				if v.Kind != unstable.Integer {
					add(voff, key, "must be an integer: version = %d", Version)
					continue
				}
				n, err := strconv.ParseInt(strings.ReplaceAll(string(v.Data), "_", ""), 0, 64)
				switch {
				case err != nil:
					add(voff, key, "bad integer %s", quote(string(v.Data)))
				case n > Version:
					add(voff, key, "version %d is newer than this moat understands (version %d): upgrade moat", n, Version)
				case n != Version:
					add(voff, key, "unknown version %d (want %d)", n, Version)
				default:
					f.Version = int(n)
				}
			case "profile":
				if v.Kind != unstable.String {
					add(voff, key, `must be a string: "untrusted" or "trusted"`)
					continue
				}
				switch s := Profile(v.Data); s {
				case Untrusted, Trusted:
					f.Profile = s
				default:
					add(voff, key, `unknown profile %s (want "untrusted" or "trusted")`, quote(string(s)))
				}
			case "open_network":
				if v.Kind != unstable.Bool {
					add(voff, key, "must be true or false")
					continue
				}
				f.OpenNetwork = string(v.Data) == "true"
			case "allow_cidr_entries":
				switch v.Kind {
				case unstable.Bool:
					f.AllowCIDREntries = nil
					if string(v.Data) == "true" {
						f.AllowCIDREntries = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
					}
				case unstable.Array:
					for it := v.Children(); it.Next(); {
						n := it.Node()
						noff := voff
						if n.Raw.Length > 0 {
							noff = int(n.Raw.Offset)
						}
						if n.Kind != unstable.String {
							add(noff, key, "ranges are strings such as \"10.0.0.0/8\", not %s", strings.ToLower(n.Kind.String()))
							continue
						}
						pf, err := parseCIDR(string(n.Data))
						if err != nil {
							add(noff, key, "%s", clip(err.Error(), maxMessage))
							continue
						}
						f.AllowCIDREntries = append(f.AllowCIDREntries, pf)
					}
				default:
					add(voff, key, `must be true, false or an array of ranges, e.g. allow_cidr_entries = ["127.0.0.0/8"]`)
				}
			case "allow", "ask", "deny":
				if v.Kind != unstable.Array {
					add(voff, key, `must be an array of rule strings, e.g. %s = ["Exec(npm run *)"]`, key)
					continue
				}
				idx := 0
				for it := v.Children(); it.Next(); {
					n := it.Node()
					noff := voff
					if n.Raw.Length > 0 {
						noff = int(n.Raw.Offset)
					}
					if n.Kind != unstable.String {
						add(noff, key, "rules are strings, not %s", strings.ToLower(n.Kind.String()))
						idx++
						continue
					}
					r, err := ParseRule(effectKeys[key], string(n.Data))
					if err != nil {
						add(noff, key, "%s", clip(err.Error(), maxMessage))
						idx++
						continue
					}
					r.Layer, r.File, r.Index, r.seq = layer, name, idx, noff
					r.Line, r.Column = position(data, noff)
					f.Rules = append(f.Rules, r)
					idx++
				}
			default:
				add(off, "", "unknown key %s (a policy file has only version, profile, open_network, allow_cidr_entries, allow, ask and deny)", quote(key))
			}
		}
	}
	if err := p.Error(); err != nil {
		off := len(data)
		var pe *unstable.ParserError
		if errors.As(err, &pe) {
			off = highlightOffset(data, pe.Highlight)
		}
		add(off, "", "%s", clip(err.Error(), maxMessage))
		return nil, errs
	}
	if len(errs) == 0 {
		// The full decoder catches what the expression walk does not check
		// (for example invalid dates or integers).
		var m map[string]any
		if err := toml.Unmarshal(data, &m); err != nil {
			var de *toml.DecodeError
			if errors.As(err, &de) {
				row, col := de.Position()
				errs = append(errs, &ParseError{Layer: layer, File: name, Line: row, Column: col, Msg: clip(de.Error(), maxMessage)})
			} else {
				add(0, "", "%s", clip(err.Error(), maxMessage))
			}
		}
	}
	if len(errs) == 0 && !haveVersion {
		add(0, "", "version is required: add version = %d", Version)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	sortRules(f.Rules)
	return f, nil
}

// What errors show of a file's content: names and values from the file
// (which may be a workspace's, written by a sandbox) are escaped (no
// control or invisible character reaches a terminal or a log) and cut,
// keys and values at maxShown bytes, whole messages at maxMessage.
const (
	maxShown   = 40
	maxMessage = 300
)

// quote is a name or value from a file as errors show it: Go-quoted and
// cut at maxShown bytes.
func quote(s string) string {
	if len(s) <= maxShown {
		return strconv.Quote(s)
	}
	return strconv.Quote(cutUTF8(s, maxShown)) + fmt.Sprintf("…(%d bytes)", len(s))
}

// clip escapes what strconv.IsPrint does not accept (and backslashes
// before such escapes stay unambiguous enough for a message) and cuts s
// at max bytes.
func clip(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= max {
			fmt.Fprintf(&b, "…(%d bytes)", len(s))
			break
		}
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// cutUTF8 cuts s at most max bytes without splitting a character.
func cutUTF8(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max]
}

func sortRules(rs []*Rule) {
	// Insertion sort: files are small and mostly in order already.
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].seq < rs[j-1].seq; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// nodeKey returns the dotted key of a KeyValue or table and its offset.
func nodeKey(e *unstable.Node) (string, int) {
	var parts []string
	off := -1
	for it := e.Key(); it.Next(); {
		k := it.Node()
		if off < 0 {
			off = int(k.Raw.Offset)
		}
		parts = append(parts, string(k.Data))
	}
	if off < 0 {
		off = int(e.Raw.Offset)
	}
	return strings.Join(parts, "."), off
}

// highlightOffset finds where a parser error's highlight lies in data.
func highlightOffset(data, h []byte) int {
	if h == nil {
		return len(data)
	}
	off := cap(data) - cap(h)
	if off < 0 || off > len(data) {
		return len(data)
	}
	return off
}

// position turns a byte offset into a 1-based line and column (in
// characters).
func position(data []byte, off int) (line, col int) {
	if off > len(data) {
		off = len(data)
	}
	if off < 0 {
		off = 0
	}
	before := data[:off]
	line = 1 + bytes.Count(before, []byte{'\n'})
	start := bytes.LastIndexByte(before, '\n') + 1
	col = 1 + utf8.RuneCount(before[start:])
	return line, col
}

// CallRules are the rules given with one call. They form the lowest layer
// and can only narrow: their allow rules never widen the profile's ceiling
// (no extra writable roots, nothing added to the network allowlist).
type CallRules struct {
	Profile Profile  `json:"profile,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	Ask     []string `json:"ask,omitempty"`
	Deny    []string `json:"deny,omitempty"`
}

// ParseCall parses per-call rules into a File of layer Call.
func ParseCall(c CallRules) (*File, error) {
	f := &File{Layer: Call, Name: "per-call", Version: Version}
	var errs ErrorList
	switch c.Profile {
	case "", Untrusted:
		f.Profile = c.Profile
	case Trusted:
		errs = append(errs, &ParseError{Layer: Call, Key: "profile", Msg: `per-call rules can only narrow: the only profile they may declare is "untrusted"`})
	default:
		errs = append(errs, &ParseError{Layer: Call, Key: "profile", Msg: fmt.Sprintf("unknown profile %q (want \"untrusted\" or \"trusted\")", c.Profile)})
	}
	seq := 0
	for _, l := range []struct {
		key   string
		eff   Effect
		rules []string
	}{{"allow", Allow, c.Allow}, {"ask", Ask, c.Ask}, {"deny", Deny, c.Deny}} {
		for i, t := range l.rules {
			r, err := ParseRule(l.eff, t)
			if err != nil {
				errs = append(errs, &ParseError{Layer: Call, Key: l.key, Index: i, Msg: err.Error()})
				continue
			}
			r.Layer, r.Index, r.seq = Call, i, seq
			seq++
			f.Rules = append(f.Rules, r)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return f, nil
}
