package policy

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Effect is what a rule or a decision says about a request. The order of
// the constants is the order of restrictiveness: None < Allow < Ask < Deny.
type Effect uint8

const (
	// None: no rule matched (only inside the engine; a Decision is never None).
	None Effect = iota
	// Allow: the request may go ahead.
	Allow
	// Ask: the request needs a person's approval.
	Ask
	// Deny: the request is refused.
	Deny
)

var effectNames = [...]string{None: "none", Allow: "allow", Ask: "ask", Deny: "deny"}

func (e Effect) String() string {
	if int(e) < len(effectNames) {
		return effectNames[e]
	}
	return fmt.Sprintf("effect(%d)", uint8(e))
}

// MarshalText writes the effect's name ("allow", "ask", "deny", "none").
func (e Effect) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText reads an effect's name.
func (e *Effect) UnmarshalText(b []byte) error {
	v, err := ParseEffect(string(b))
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// ParseEffect reads "allow", "ask", "deny" (or "none").
func ParseEffect(s string) (Effect, error) {
	for i, n := range effectNames {
		if s == n {
			return Effect(i), nil
		}
	}
	return None, fmt.Errorf("unknown effect %q (want allow, ask or deny)", s)
}

// Kind is the kind of request a rule is about.
type Kind uint8

const (
	// Exec: running a command (an argv, or a shell string that is parsed).
	Exec Kind = iota + 1
	// Read: reading a file or listing a directory.
	Read
	// Write: any change to a directory entry or its content: create, write,
	// truncate, delete, rename (both names), chmod, mkdir, link, symlink.
	Write
	// Net: a connection to a host.
	Net
)

var kindNames = [...]string{Exec: "Exec", Read: "Read", Write: "Write", Net: "Net"}

func (k Kind) String() string {
	if k >= Exec && k <= Net {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText writes the kind's name ("Exec", "Read", "Write", "Net").
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i := Exec; i <= Net; i++ {
		if string(b) == kindNames[i] {
			*k = i
			return nil
		}
	}
	return fmt.Errorf("unknown request kind %q (want Exec, Read, Write or Net)", b)
}

// Layer is where a rule comes from. The order of the constants is the order
// of precedence used to name the deciding rule: managed, project, user, call.
type Layer uint8

const (
	// Managed: the operator's file, /etc/moat/policy.toml.
	Managed Layer = iota
	// Project: the workspace's file, <workspace>/.moat/policy.toml.
	Project
	// User: the user's file, ~/.config/moat/policy.toml.
	User
	// Call: rules given with one call (CallRules); they can only narrow.
	Call
	// Builtin: moat's own protections and the profile's ceiling and default.
	Builtin
)

var layerNames = [...]string{Managed: "managed", Project: "project", User: "user", Call: "per-call", Builtin: "builtin"}

func (l Layer) String() string {
	if int(l) < len(layerNames) {
		return layerNames[l]
	}
	return fmt.Sprintf("layer(%d)", uint8(l))
}

// MarshalText writes the layer's name.
func (l Layer) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads a layer's name ("call" is accepted for "per-call").
func (l *Layer) UnmarshalText(b []byte) error {
	if string(b) == "call" {
		*l = Call
		return nil
	}
	for i, n := range layerNames {
		if string(b) == n {
			*l = Layer(i)
			return nil
		}
	}
	return fmt.Errorf("unknown layer %q", b)
}

// Rule is one parsed rule. Rules are immutable once parsed; a Decision
// points at the rule that decided it.
type Rule struct {
	Effect  Effect `json:"effect"`
	Kind    Kind   `json:"kind,omitempty"`
	Pattern string `json:"pattern,omitempty"` // between the parentheses, trimmed
	Text    string `json:"text"`              // the rule as written (trimmed), or a builtin's description
	Layer   Layer  `json:"layer"`
	File    string `json:"file,omitempty"`   // display name of the file ("" for per-call and builtin rules)
	Line    int    `json:"line,omitempty"`   // 1-based line of the rule's string in File; 0 if none
	Column  int    `json:"column,omitempty"` // 1-based column (in characters) of that string
	Index   int    `json:"index"`            // 0-based position in its allow/ask/deny list

	exec *execPattern
	path *pathPattern
	net  *netPattern
	seq  int // position in the file (byte offset) or list, for precedence
}

// String is the rule with its effect, e.g. `deny Exec(git push*)`; a
// builtin rule is its description.
func (r *Rule) String() string {
	if r.Layer == Builtin {
		return r.Text
	}
	return r.Effect.String() + " " + r.Text
}

// Source says where the rule comes from: "project .moat/policy.toml:7",
// "per-call deny[1]" or "builtin".
func (r *Rule) Source() string {
	switch {
	case r.Layer == Builtin:
		return "builtin"
	case r.Layer == Call && r.File == "":
		return fmt.Sprintf("per-call %s[%d]", r.Effect, r.Index)
	case r.Line > 0:
		return fmt.Sprintf("%s %s:%d", r.Layer, r.File, r.Line)
	default:
		return fmt.Sprintf("%s %s %s[%d]", r.Layer, r.File, r.Effect, r.Index)
	}
}

// RuleError is a rule that does not parse: its text and what is wrong.
type RuleError struct {
	Text string
	Msg  string
}

func (e *RuleError) Error() string { return e.Text + ": " + e.Msg }

// MaxRuleLen is the longest rule accepted, in bytes.
const MaxRuleLen = 4096

// ParseRule parses one rule such as `Exec(npm run *)`, `Read(~/.ssh/**)`,
// `Write(src/**)` or `Net(domain:*.github.com)`. The returned rule has the
// given effect and no source; Parse and ParseCall fill in the source.
func ParseRule(effect Effect, text string) (*Rule, error) {
	if effect < Allow || effect > Deny {
		return nil, &RuleError{Text: text, Msg: "effect must be allow, ask or deny"}
	}
	t := strings.TrimSpace(text)
	fail := func(format string, a ...any) (*Rule, error) {
		return nil, &RuleError{Text: t, Msg: fmt.Sprintf(format, a...)}
	}
	if len(t) > MaxRuleLen {
		t = t[:64] + "…"
		return fail("rule longer than %d bytes", MaxRuleLen)
	}
	if !utf8.ValidString(t) {
		return fail("not valid UTF-8")
	}
	for _, c := range t {
		if unicode.IsControl(c) || c == utf8.RuneError {
			return fail("control character %q in rule", c)
		}
	}
	if t == "" {
		return fail("empty rule")
	}
	open := strings.IndexByte(t, '(')
	if open < 0 {
		return fail("want Kind(pattern), e.g. Exec(npm run *), Read(~/.ssh/**), Write(src/**), Net(domain:*.github.com)")
	}
	name := strings.TrimSpace(t[:open])
	var kind Kind
	switch name {
	case "Exec":
		kind = Exec
	case "Read":
		kind = Read
	case "Write":
		kind = Write
	case "Net":
		kind = Net
	default:
		for k := Exec; k <= Net; k++ {
			if strings.EqualFold(name, kindNames[k]) {
				return fail("unknown kind %q (did you mean %s?)", name, kindNames[k])
			}
		}
		return fail("unknown kind %q (want Exec, Read, Write or Net)", name)
	}
	if !strings.HasSuffix(t, ")") {
		if strings.LastIndexByte(t, ')') > open {
			return fail("unexpected text after the closing parenthesis")
		}
		return fail("unterminated pattern")
	}
	pat := strings.TrimSpace(t[open+1 : len(t)-1])
	if pat == "" {
		return fail("empty pattern")
	}
	r := &Rule{Effect: effect, Kind: kind, Pattern: pat, Text: t}
	var err error
	switch kind {
	case Exec:
		r.exec, err = compileExec(pat)
	case Read, Write:
		r.path, err = parsePathPattern(pat)
	case Net:
		r.net, err = parseNetPattern(pat)
	}
	if err != nil {
		return fail("%s", err.Error())
	}
	return r, nil
}

// firstWord returns the text up to the first space.
func firstWord(s string) string {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		return s[:i]
	}
	return s
}
