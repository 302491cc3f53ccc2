package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/policy/shell"
)

// Limits on what one Exec request expands to.
const (
	maxExecDepth = 8    // nested sh -c / eval
	maxExecForms = 1024 // commands judged for one request
)

// execForm is one command judged for an Exec request.
type execForm struct {
	text      string // normalized words joined by single spaces, dynamic ones as written
	mtext     string // what rules are matched against: dynMark for each dynamic word
	name      string // normalized first word
	uncertain bool
	unknown   bool // which command runs is not known
	why       string
	src       cmdWords // what why is explained from, when explain is set
	explain   bool
}

// reason is why the form is not fully known, explained.
func (f *execForm) reason() string {
	if f.explain {
		f.why, f.explain = f.src.explain(f.name, f.unknown), false
	}
	return f.why
}

// dynMark stands, in an execForm's mtext, for a dynamic word with the
// space before it: nothing, or a space and any text (shell words hold no
// NUL byte).
const dynMark = '\x00'

// cmdWords is a command to judge: its words, which of them are dynamic,
// and how it is uncertain (see shell.Command).
type cmdWords struct {
	args       []string
	dyn        []string // nil, or per word: as written when dynamic, else ""
	unknowable bool
	appends    bool
	open       bool
	uncertain  bool
	why        string
}

func fromShell(c shell.Command) cmdWords {
	return cmdWords{args: c.Args, dyn: c.Dynamic, unknowable: c.Unknowable, appends: c.Appends, open: c.Open,
		uncertain: c.Uncertain, why: c.Reason}
}

func (cw cmdWords) dynamic(i int) bool { return cw.dyn != nil && cw.dyn[i] != "" }

// suffix is the command made of the words from i on.
func (cw cmdWords) suffix(i int) cmdWords {
	s := cmdWords{args: cw.args[i:], appends: cw.appends, open: cw.open}
	if cw.dyn != nil {
		s.dyn = cw.dyn[i:]
		for _, d := range s.dyn {
			s.uncertain = s.uncertain || d != ""
		}
	}
	if s.appends || s.open {
		s.uncertain = true
	}
	if s.uncertain {
		s.why = cw.why
	}
	return s
}

// wrappers run their arguments as a command (after options of their own):
// every suffix of their arguments is judged as a command too.
var wrappers = map[string]bool{
	"env": true, "command": true, "exec": true, "builtin": true, "nice": true,
	"nohup": true, "time": true, "timeout": true, "stdbuf": true, "setsid": true,
	"ionice": true, "chrt": true, "taskset": true, "sudo": true, "doas": true,
	"xargs": true, "find": true, "busybox": true, "unbuffer": true, "chronic": true,
	"caffeinate": true, "systemd-run": true, "flock": true, "watch": true,
	"parallel": true, "strace": true, "ltrace": true, "gdb": true, "valgrind": true,
	"unshare": true, "nsenter": true, "chroot": true, "prlimit": true, "runuser": true,
	"su": true, "script": true, "entr": true, "catchsegv": true, "faketime": true,
	"fakeroot": true, "proot": true, "firejail": true, "bwrap": true, "moat": true,
}

// shells run the argument after -c as a script; the wrappers that take a
// command string (watch, su -c, flock -c, script -c, parallel) too.
var shells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true,
	"ash": true, "fish": true, "yash": true, "posh": true, "rbash": true, "tcsh": true, "csh": true,
	"su": true, "runuser": true, "flock": true, "script": true,
}

// stringWrappers take whole command strings as arguments.
var stringWrappers = map[string]bool{"watch": true, "parallel": true, "eval": true}

// inherited is what a command string passes to the commands in it: when
// the string is not known, none of them is.
type inherited struct {
	unknown bool
	why     string
}

type execExpander struct {
	forms []execForm
	seen  map[string]int
	full  bool
}

func (x *execExpander) add(f execForm) {
	key := f.text
	if f.mtext != f.text {
		key += "\x01" + f.mtext
	}
	if i, ok := x.seen[key]; ok && f.text != "" {
		// Keep the most uncertain reading.
		if f.uncertain && !x.forms[i].uncertain || f.unknown && !x.forms[i].unknown {
			x.forms[i] = f
		}
		return
	}
	if len(x.forms) >= maxExecForms {
		if !x.full {
			x.full = true
			x.forms = append(x.forms, execForm{uncertain: true, unknown: true, why: "too many commands to judge"})
		}
		return
	}
	if f.text != "" {
		x.seen[key] = len(x.forms)
	}
	x.forms = append(x.forms, f)
}

// script judges every command of a shell string.
func (x *execExpander) script(s string, depth int, in inherited) {
	if depth > maxExecDepth {
		x.add(execForm{uncertain: true, unknown: true, why: "commands nested too deeply"})
		return
	}
	cmds, err := shell.Commands(s)
	if err != nil {
		x.add(execForm{uncertain: true, unknown: true, why: "the command string does not parse: " + err.Error()})
		return
	}
	for _, cmd := range cmds {
		cw := fromShell(cmd)
		if in.unknown {
			cw.unknowable, cw.uncertain = true, true
			cw.why = joinWhy(in.why, cw.why)
		}
		x.argv(cw, depth, true)
	}
}

func joinWhy(a, b string) string {
	switch {
	case a == "" || a == b:
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// render gives a command's display text and its matching text.
func render(words, dyn []string, open, appends bool) (text, mtext string) {
	if dyn == nil && !open && !appends {
		t := joinWords(words)
		return t, t
	}
	if open {
		return joinWords(words), words[0] + string(dynMark)
	}
	n := 0
	for i, w := range words {
		n += len(w) + 1
		if dyn != nil {
			n += len(dyn[i])
		}
	}
	buf := make([]byte, 0, 2*n+1)
	// The display text: dynamic words as written.
	for i, w := range words {
		if i > 0 {
			buf = append(buf, ' ')
		}
		if dyn != nil && dyn[i] != "" {
			w = dyn[i]
		}
		buf = append(buf, w...)
	}
	text = collapseSpace(string(buf))
	// The matching text: a dynamic word is dynMark, which stands for its
	// space too.
	buf = buf[:0]
	for i, w := range words {
		if dyn != nil && dyn[i] != "" {
			for len(buf) > 0 && isSpace(buf[len(buf)-1]) {
				buf = buf[:len(buf)-1]
			}
			buf = append(buf, dynMark)
			continue
		}
		if i > 0 {
			buf = append(buf, ' ')
		}
		buf = append(buf, w...)
	}
	if appends {
		for len(buf) > 0 && isSpace(buf[len(buf)-1]) {
			buf = buf[:len(buf)-1]
		}
		buf = append(buf, dynMark)
	}
	return text, collapseSpace(string(buf))
}

// explain says why a command is not fully known.
func (cw cmdWords) explain(name string, unknown bool) string {
	var parts []string
	if cw.dynamic(0) {
		parts = append(parts, "the command word is only known at run time (`"+cw.dyn[0]+"`)")
	} else if unknown && cw.why != "" {
		parts = append(parts, cw.why)
	}
	if !unknown {
		n := 0
		for i := 1; i < len(cw.args); i++ {
			if !cw.dynamic(i) {
				continue
			}
			if n == 0 {
				parts = append(parts, fmt.Sprintf("argument %d of `%s` is only known at run time (`%s`)", i, name, cw.dyn[i]))
			}
			n++
		}
		if n > 1 {
			parts[len(parts)-1] += fmt.Sprintf(" and %d more", n-1)
		}
		if cw.appends {
			parts = append(parts, "xargs appends arguments it reads from its input")
		}
		// Other reasons policy/shell gives (an alias, a wrapper's options).
		for _, r := range strings.Split(cw.why, "; ") {
			if r != "" && !wordReason(r) && !slices.Contains(parts, r) {
				parts = append(parts, r)
			}
		}
	}
	if len(parts) == 0 {
		return cw.why
	}
	return strings.Join(parts, "; ")
}

// wordReason reports whether a reason policy/shell gives is about a
// dynamic word, which explain already names.
func wordReason(r string) bool {
	for _, p := range []string{"parameter expansion ", "command substitution ", "arithmetic expansion ",
		"process substitution ", "glob pattern ", "brace expansion ", "tilde expansion", "extended glob ",
		"shell expansion ", "$'…'", "xargs appends arguments"} {
		if strings.HasPrefix(r, p) {
			return true
		}
	}
	return false
}

// argv judges one command and what it wraps.
func (x *execExpander) argv(cw cmdWords, depth int, suffixes bool) {
	args := cw.args
	if len(args) == 0 {
		if cw.uncertain {
			x.add(execForm{uncertain: true, unknown: true, why: cw.why})
		}
		return
	}
	norm := shell.Normalize(args)
	name := norm[0]
	unknown := cw.unknowable || cw.dynamic(0) || cw.uncertain && name == ""
	if cw.uncertain && !unknown && cw.dyn == nil && !cw.appends {
		cw.open = true // uncertain for a reason of its own: any command of that name
	}
	f := execForm{name: name, uncertain: cw.uncertain || unknown, unknown: unknown}
	f.text, f.mtext = render(norm, cw.dyn, cw.open && !unknown, cw.appends)
	if name == "" && !cw.dynamic(0) {
		f.text = joinWords(append([]string{"…"}, norm[1:]...))
	}
	if f.uncertain {
		f.why, f.src, f.explain = cw.why, cw, true // explained only when it decides
	}
	x.add(f)
	if x.full {
		return
	}
	inh := inherited{}
	if unknown {
		inh = inherited{unknown: true, why: f.reason()}
	}
	notKnown := func(why string) {
		x.add(execForm{text: f.text, name: name, uncertain: true, unknown: true, why: why})
	}
	if shells[name] {
		script := false
		for i := 1; i < len(args); i++ {
			a := args[i]
			if script {
				if cw.dynamic(i) {
					notKnown("the " + name + " -c string is only known at run time (`" + cw.dyn[i] + "`)")
				} else {
					x.script(a, depth+1, inh)
				}
				continue
			}
			if len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.IndexByte(a, 'c') > 0 {
				script = true
				if i+1 < len(args) && cw.dynamic(i+1) {
					notKnown("the " + name + " -c string is only known at run time (`" + cw.dyn[i+1] + "`)")
					i++
				}
			}
		}
	}
	if stringWrappers[name] {
		if name == "eval" {
			x.script(strings.Join(args[1:], " "), depth+1, inh)
		} else {
			for i, a := range args[1:] {
				if cw.dynamic(i + 1) {
					notKnown("a command string of " + name + " is only known at run time (`" + cw.dyn[i+1] + "`)")
				} else if !strings.HasPrefix(a, "-") {
					x.script(a, depth+1, inh)
				}
			}
		}
	}
	if wrappers[name] && suffixes {
		for i := 1; i < len(args) && !x.full; i++ {
			sub := cw.suffix(i)
			if cw.dynamic(i) {
				// policy/shell finds the command of the programs it knows;
				// for others, a dynamic word may be the command.
				if shell.Unwraps(name) || !cw.couldBeCommand(i) {
					continue
				}
				sub.unknowable, sub.uncertain = true, true
				sub.why = "the command " + name + " runs may be `" + cw.dyn[i] + "`, only known at run time"
			}
			if unknown {
				sub.unknowable, sub.uncertain, sub.why = true, true, joinWhy(f.reason(), sub.why)
			}
			x.argv(sub, depth, false)
		}
	}
}

// couldBeCommand reports whether the word i of a wrapper whose options are
// not known could be the command it runs: every word before it is an
// option or may be an option's argument.
func (cw cmdWords) couldBeCommand(i int) bool {
	for k := 1; k < i; k++ {
		a := cw.args[k]
		switch {
		case cw.dynamic(k), strings.HasPrefix(a, "-"):
		case k > 1 && !cw.dynamic(k-1) && strings.HasPrefix(cw.args[k-1], "-") && !strings.Contains(cw.args[k-1], "="):
		default:
			return false
		}
	}
	return true
}

func (e *Effective) decideExec(r Request) Decision {
	x := &execExpander{seen: map[string]int{}}
	switch {
	case r.Argv != nil && r.Command != "":
		return e.invalid(r, "an Exec request has an argv or a command string, not both")
	case r.Argv != nil:
		if len(r.Argv) == 0 || r.Argv[0] == "" {
			return e.invalid(r, "empty argv")
		}
		for _, a := range r.Argv {
			if strings.IndexByte(a, 0) >= 0 {
				return e.invalid(r, "argument contains a NUL byte")
			}
		}
		// The argv as it is, and as policy/shell reads it once quoted, so
		// that its wrappers are unwrapped the same way as in a string.
		x.argv(cmdWords{args: r.Argv}, 0, true)
		x.script(shellQuote(r.Argv), 0, inherited{})
	default:
		if strings.TrimSpace(r.Command) == "" {
			return e.invalid(r, "empty command")
		}
		if strings.IndexByte(r.Command, 0) >= 0 {
			return e.invalid(r, "command contains a NUL byte")
		}
		x.script(r.Command, 0, inherited{})
	}
	d := Decision{Request: r}
	best := verdict{order: -1}
	bestForm := -1
	for i, f := range x.forms {
		v := e.judgeCommand(f)
		cd := CommandDecision{Command: f.text, Uncertain: f.uncertain, Why: f.why, Effect: v.eff, Rule: v.rule}
		if v.eff == None {
			cd.Effect, cd.Rule = Allow, e.def
		}
		d.Commands = append(d.Commands, cd)
		if bestForm < 0 || v.eff > best.eff || (v.eff == best.eff && v.eff != None && v.order < best.order) {
			best, bestForm = v, i
		}
	}
	if bestForm < 0 {
		// Nothing to run (only comments, or an empty script).
		d.Effect, d.Rule = Allow, e.def
		d.Reason = "allowed: the command string runs no command"
		return d
	}
	f := x.forms[bestForm]
	if f.uncertain {
		d.Commands[bestForm].Why = f.reason()
	}
	d.Command = f.text
	what := "Exec `" + f.text + "`"
	switch {
	case f.text == "" && r.Argv != nil:
		what = "Exec of " + strconv.Quote(joinWords(r.Argv))
	case f.text == "":
		what = "Exec of " + strconv.Quote(r.Command)
	}
	if best.eff == None {
		d.Effect, d.Rule = Allow, e.def
		d.Reason = "allowed: no Exec rule matches any command and the " + string(e.profile) + " profile permits it"
		return d
	}
	d.Effect, d.Rule = best.eff, best.rule
	if !f.uncertain {
		d.Reason = ruleReason(best.eff, what, best.rule)
		return d
	}
	why := f.why
	if why == "" {
		why = "it cannot be parsed with confidence"
	}
	head := map[Effect]string{Deny: "denied: ", Ask: "needs approval: ", Allow: "allowed: "}[best.eff]
	if f.unknown {
		d.Reason = fmt.Sprintf("%s%s cannot be known before it runs (%s), so the strictest Exec rule of the policy applies: %s (%s)",
			head, what, why, best.rule, best.rule.Source())
		return d
	}
	d.Reason = fmt.Sprintf("%s%s is not fully known before it runs (%s); %s could match it (%s), and the strictest of the Exec rules that could match applies",
		head, what, why, best.rule, best.rule.Source())
	return d
}

// judgeCommand matches one command against the Exec rules. A command that
// is not fully known gets the strictest of the rules that could match it
// (all Exec rules when which command runs is not known).
func (e *Effective) judgeCommand(f execForm) verdict {
	v := verdict{order: -1}
	partial := strings.IndexByte(f.mtext, dynMark) >= 0
	for _, b := range e.rules[Exec] {
		switch {
		case f.unknown:
			v.add(b)
		case !partial:
			if b.r.exec.match(f.mtext) {
				v.add(b)
			}
		case b.r.exec.couldMatch(f.mtext):
			v.add(b)
		}
	}
	return v
}

// shellQuote writes an argv as a shell command line of single-quoted
// words.
func shellQuote(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(a, "'", `'\''`))
		b.WriteByte('\'')
	}
	return b.String()
}
