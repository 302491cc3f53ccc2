package policy

import (
	"fmt"
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
	text      string // normalized words joined by single spaces
	name      string // normalized first word
	uncertain bool
	unknown   bool // the command name is not known
	why       string
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

// knownName reports whether a command's first word is a plain name (no
// expansion or quoting left in it).
func knownName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "$`\"'*?[]{}~()<>|&;=\\ \t\n") && s != "." && s != ".."
}

// certainty says how far a command can be trusted.
type certainty struct {
	uncertain bool   // the command cannot be judged with confidence
	words     bool   // its words, the name included, are literal even so
	why       string // why it is uncertain
}

var certain = certainty{words: true}

// wordsCertain reports whether an Uncertain command's words are all
// literal: every reason given is one of those that policy/shell gives about
// the command as a whole (what xargs or find add, a shell reading standard
// input, options of su it could not read) rather than about a word. Any
// other reason, or reasons worded differently, make the words uncertain:
// a mistake here can only make a decision stricter.
func wordsCertain(c shell.Command) bool {
	if !c.Uncertain {
		return true
	}
	name := ""
	if len(c.Args) > 0 {
		name = c.Args[0]
	}
	for _, r := range strings.Split(c.Reason, "; ") {
		switch {
		case r == "xargs appends arguments it reads from its input":
		case r == "find runs it for each file found, substituting `{}`" && !strings.Contains(name, "{}"):
		case strings.HasSuffix(r, " reads commands from its standard input") && shells[strings.TrimSuffix(r, " reads commands from its standard input")]:
		case strings.HasPrefix(r, "the options of ") && strings.HasSuffix(r, " could not be read for sure") &&
			shells[strings.TrimSuffix(strings.TrimPrefix(r, "the options of "), " could not be read for sure")]:
		default:
			return false
		}
	}
	return true
}

func (p certainty) with(c shell.Command) certainty {
	if !c.Uncertain {
		return p
	}
	why := c.Reason
	if p.why != "" && why != p.why {
		why = p.why + "; " + why
	}
	return certainty{uncertain: true, words: p.words && wordsCertain(c), why: why}
}

type execExpander struct {
	forms []execForm
	seen  map[string]int
	full  bool
}

func (x *execExpander) add(f execForm) {
	if i, ok := x.seen[f.text]; ok && f.text != "" {
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
		x.seen[f.text] = len(x.forms)
	}
	x.forms = append(x.forms, f)
}

// script judges every command of a shell string.
func (x *execExpander) script(s string, depth int, c certainty) {
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
		x.argv(cmd.Args, depth, c.with(cmd), true)
	}
}

// argv judges one command and what it wraps.
func (x *execExpander) argv(args []string, depth int, c certainty, suffixes bool) {
	if len(args) == 0 {
		if c.uncertain {
			x.add(execForm{uncertain: true, unknown: true, why: c.why})
		}
		return
	}
	norm := shell.Normalize(args)
	if len(norm) == 0 {
		return
	}
	name := norm[0]
	text := joinWords(norm)
	if name == "" {
		text = joinWords(append([]string{"…"}, norm[1:]...))
	}
	f := execForm{text: text, name: name, uncertain: c.uncertain, why: c.why}
	if c.uncertain && (!c.words || !knownName(name)) {
		f.unknown = true
	}
	x.add(f)
	if x.full {
		return
	}
	if shells[name] {
		script := false
		for _, a := range args[1:] {
			if script {
				x.script(a, depth+1, c)
				continue
			}
			if len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.IndexByte(a, 'c') > 0 {
				script = true
			}
		}
	}
	if stringWrappers[name] {
		if name == "eval" {
			x.script(strings.Join(args[1:], " "), depth+1, c)
		} else {
			for _, a := range args[1:] {
				if !strings.HasPrefix(a, "-") {
					x.script(a, depth+1, c)
				}
			}
		}
	}
	if wrappers[name] && suffixes {
		for i := 1; i < len(args) && !x.full; i++ {
			x.argv(args[i:], depth, c, false)
		}
	}
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
		x.argv(r.Argv, 0, certain, true)
		x.script(shellQuote(r.Argv), 0, certain)
	default:
		if strings.TrimSpace(r.Command) == "" {
			return e.invalid(r, "empty command")
		}
		if strings.IndexByte(r.Command, 0) >= 0 {
			return e.invalid(r, "command contains a NUL byte")
		}
		x.script(r.Command, 0, certain)
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
	scope := "the Exec rules that could match a `" + f.name + "` command"
	if f.unknown {
		scope = "all Exec rules of the policy (the command's name is not known for sure)"
	}
	why := f.why
	if why == "" {
		why = "it cannot be parsed with confidence"
	}
	head := map[Effect]string{Deny: "denied: ", Ask: "needs approval: ", Allow: "allowed: "}[best.eff]
	d.Reason = fmt.Sprintf("%s%s cannot be judged with confidence (%s), so the strictest of %s decides: %s (%s)",
		head, what, why, scope, best.rule, best.rule.Source())
	return d
}

// judgeCommand matches one command against the Exec rules. A command that
// cannot be parsed with confidence gets the strictest of the rules that
// could match its name (all Exec rules when the name is unknown).
func (e *Effective) judgeCommand(f execForm) verdict {
	v := verdict{order: -1}
	for _, b := range e.rules[Exec] {
		switch {
		case f.unknown:
			v.add(b)
		case b.r.exec.match(f.text):
			v.add(b)
		case f.uncertain && b.r.exec.canStart(f.name):
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
