package shell

import (
	"strings"
)

// plan is what a command leads to besides itself.
type plan struct {
	self    []string   // reasons the command itself is Uncertain
	inner   []innerCmd // commands it runs (wrappers)
	scripts []script   // command strings it runs (shells, eval, trap, alias)
}

// innerCmd is a command a wrapper runs.
type innerCmd struct {
	words   []word
	extra   []string // reasons it is Uncertain beyond its own words
	replace string   // text the wrapper substitutes in its arguments
	noStdin bool     // its standard input is not the wrapper's here-document
}

// script is a command string to parse.
type script struct {
	src     string
	dialect dialect
	taint   string // set when the string itself is not certain
	what    string // for error messages
}

// emit reports a simple command and then what it runs.
func (w *walker) emit(c ctx, words []word, extra []string, in stdin) {
	if len(words) == 0 {
		return
	}
	if c.skipDblBracket && words[0].val == "[[" {
		return
	}
	cmd := Command{Args: make([]string, len(words))}
	var reasons []string
	if c.taint != "" {
		reasons = append(reasons, c.taint)
	}
	for i, wd := range words {
		cmd.Args[i] = wd.val
		for _, r := range wd.reasons {
			reasons = appendReason(reasons, r)
		}
	}
	for _, r := range extra {
		reasons = appendReason(reasons, r)
	}
	if w.funcs[words[0].val] {
		reasons = appendReason(reasons, quoteShort(words[0].val)+" is a function defined in the script")
	}
	if w.aliases[words[0].val] {
		reasons = appendReason(reasons, quoteShort(words[0].val)+" is an alias defined in the script")
	}
	var p plan
	if words[0].certain() {
		p = w.plan(c, BaseName(words[0].val), words, in)
	} else {
		p = w.guessShell(words)
	}
	for _, r := range p.self {
		reasons = appendReason(reasons, r)
	}
	cmd.Uncertain = len(reasons) > 0
	cmd.Reason = strings.Join(reasons, "; ")
	w.add(cmd)
	for _, ic := range p.inner {
		ic2 := c
		if ic.replace != "" {
			ic2.replaceTok = ic.replace
		}
		icIn := in
		if ic.noStdin {
			icIn = stdin{}
		}
		w.emit(ic2, ic.words, ic.extra, icIn)
	}
	for _, s := range p.scripts {
		w.nested(c, s)
	}
}

// nested parses and walks a command string found in the script.
func (w *walker) nested(c ctx, s script) {
	in := w.enter(c)
	in.dialect = s.dialect
	in.replaceTok = ""
	in.skipDblBracket = false
	if c.replaceTok != "" && strings.Contains(s.src, c.replaceTok) {
		s.taint = joinReason(s.taint, "the command string may have "+quoteShort(c.replaceTok)+" substituted in it")
	}
	in.taint = joinReason(c.taint, s.taint)
	if err := w.parse(in, s.src); err != nil && in.taint == "" {
		w.fail(wrapSyntax(s.what, err))
	}
}

// plan looks at what the program name runs.
func (w *walker) plan(c ctx, name string, words []word, in stdin) plan {
	if d, ok := shells[name]; ok {
		return w.shell(name, d, words, in)
	}
	if otherShells[name] {
		return plan{self: []string{"commands run by " + name + " cannot be analysed"}}
	}
	if spec, ok := wrappers[name]; ok {
		return wrapper(name, spec, words, in)
	}
	switch name {
	case "env":
		return envPlan(words)
	case "busybox":
		if len(words) > 1 && words[1].certain() && !strings.HasPrefix(words[1].val, "-") {
			return plan{inner: []innerCmd{{words: words[1:]}}}
		}
	case "find":
		return findPlan(words)
	case "eval":
		args := words[1:]
		if len(args) > 0 && args[0].val == "--" {
			args = args[1:]
		}
		if len(args) == 0 {
			return plan{}
		}
		vals := make([]string, len(args))
		var taint string
		for i, a := range args {
			vals[i] = a.val
			if !a.certain() {
				taint = "the string given to eval could not be known for sure"
			}
		}
		return plan{scripts: []script{{src: strings.Join(vals, " "), dialect: c.dialect, taint: taint, what: "eval"}}}
	case "trap":
		return trapPlan(c, words)
	case "alias":
		var p plan
		for _, a := range words[1:] {
			name, val, ok := strings.Cut(a.val, "=")
			if !ok || name == "" {
				continue
			}
			s := script{src: val, dialect: c.dialect, what: "alias " + name}
			if !a.certain() {
				s.taint = "the alias could not be known for sure"
			}
			p.scripts = append(p.scripts, s)
		}
		return p
	case "su":
		return suPlan(name, words, in)
	case "source", ".":
		// A sourced file is not read, except standard input.
		if len(words) > 1 && stdinNames[words[1].val] && words[1].val != "-" {
			var p plan
			stdinScript(name, c.dialect, in, &p)
			return p
		}
	}
	return plan{}
}

// shells are the shells whose command strings are parsed, with the
// language they are read in.
var shells = map[string]dialect{
	"sh": dialectSh, "dash": dialectSh, "ash": dialectSh, "hush": dialectSh, "posh": dialectSh, "yash": dialectSh,
	"bash": dialectBash, "rbash": dialectBash, "osh": dialectBash,
	"zsh": dialectZsh,
	"ksh": dialectKsh, "ksh93": dialectKsh, "mksh": dialectKsh, "lksh": dialectKsh, "pdksh": dialectKsh, "oksh": dialectKsh,
}

// otherShells run command strings in languages this package does not parse.
var otherShells = map[string]bool{
	"fish": true, "csh": true, "tcsh": true, "nu": true, "elvish": true, "xonsh": true,
	"pwsh": true, "powershell": true, "rc": true, "es": true, "ion": true, "ysh": true,
}

// stdinNames are script operands that make a shell read its standard input.
var stdinNames = map[string]bool{"-": true, "/dev/stdin": true, "/dev/fd/0": true, "/proc/self/fd/0": true}

// shell reads a shell's options: its -c string is parsed; without one and
// without a script file it reads commands from its standard input.
func (w *walker) shell(name string, d dialect, words []word, in stdin) plan {
	var p plan
	hasC, stdinMode, uncertain := false, false, false
	i := 1
options:
	for ; i < len(words); i++ {
		wd := words[i]
		v := wd.val
		switch {
		case !wd.certain():
			// An operand (the -c string or a script), unless it may be
			// options: then the options are not known.
			uncertain = !hasC && (v == "" || strings.HasPrefix(v, "-"))
			break options
		case v == "--" || v == "-":
			if v == "--" {
				i++
			}
			break options
		case v == "--rcfile" || v == "--init-file":
			i++
		case strings.HasPrefix(v, "--"):
		case len(v) > 1 && (v[0] == '-' || v[0] == '+'):
			for _, ch := range v[1:] {
				switch ch {
				case 'c':
					hasC = true
				case 's':
					stdinMode = true
				case 'o', 'O':
					i++
				}
			}
		default:
			break options
		}
	}
	if uncertain {
		// The options are unknown, so any later word may be a -c string.
		for _, wd := range words[i+1:] {
			if wd.certain() && !strings.HasPrefix(wd.val, "-") {
				p.scripts = append(p.scripts, script{src: wd.val, dialect: d, what: name + " -c",
					taint: "the options of " + name + " could not be known for sure; this string may be run as commands"})
				break
			}
		}
		return p
	}
	switch {
	case hasC:
		if i < len(words) {
			s := script{src: words[i].val, dialect: d, what: name + " -c string"}
			if !words[i].certain() {
				s.taint = "the " + name + " -c string could not be known for sure"
			}
			p.scripts = append(p.scripts, s)
		}
	case stdinMode || i >= len(words) || stdinNames[words[i].val]:
		stdinScript(name, d, in, &p)
	}
	return p
}

// stdinScript reads the here-document a shell reads its commands from, or
// marks the shell Uncertain when its input is not in the script.
func stdinScript(name string, d dialect, in stdin, p *plan) {
	if !in.doc {
		p.self = append(p.self, name+" reads commands from its standard input")
		return
	}
	s := script{src: in.body, dialect: d, what: "the here-document read by " + name}
	if len(in.reasons) > 0 {
		s.taint = strings.Join(in.reasons, "; ")
	}
	p.scripts = append(p.scripts, s)
}

// guessShell looks for a command string in a command whose program is not
// known for sure ($SHELL -c '…'): a word after a -c option is parsed, its
// commands Uncertain.
func (w *walker) guessShell(words []word) plan {
	for i := 1; i+1 < len(words); i++ {
		v := words[i].val
		if len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.ContainsRune(v, 'c') && words[i+1].certain() {
			return plan{scripts: []script{{src: words[i+1].val, dialect: dialectSh, what: "-c string",
				taint: "the program could not be known for sure; this string may be run as commands"}}}
		}
	}
	return plan{}
}

// optSpec describes a program's options, getopt style.
type optSpec struct {
	arg      string   // short options that take an argument
	optArg   string   // short options whose argument is optional and attached
	flag     string   // short options without argument
	longArg  []string // long options that take an argument
	longFlag []string // long options without one (or with an optional =value)
	numeric  bool     // -NUM is an option (nice)
	stop     string   // short options that end option reading (env -S)
	stopLong []string
}

// optResult is what getopt read.
type optResult struct {
	next      int // index of the first operand
	seen      []opt
	unknown   []string
	uncertain bool // a word among the options was not certain
	stopped   *opt // the option in spec.stop that ended reading
}

type opt struct {
	name, val string
	certain   bool
}

func (r *optResult) has(names ...string) bool {
	for _, o := range r.seen {
		for _, n := range names {
			if o.name == n {
				return true
			}
		}
	}
	return false
}

func (r *optResult) value(names ...string) (string, bool) {
	v, ok := "", false
	for _, o := range r.seen {
		for _, n := range names {
			if o.name == n {
				v, ok = o.val, true
			}
		}
	}
	return v, ok
}

// getopt reads the options of words from index start, as GNU getopt does
// with a leading + (options end at the first operand).
func getopt(words []word, start int, spec optSpec) optResult {
	r := optResult{}
	i := start
	record := func(name, val string, certain bool) bool {
		o := opt{name: name, val: val, certain: certain}
		r.seen = append(r.seen, o)
		if strings.Contains(spec.stop, name) && len(name) == 1 || contains(spec.stopLong, name) {
			r.stopped = &o
			return true
		}
		return false
	}
	// argument reads the argument of an option from the next word.
	argument := func() (string, bool) {
		i++
		if i >= len(words) {
			return "", true
		}
		if !words[i].certain() {
			r.uncertain = true
		}
		return words[i].val, words[i].certain()
	}
loop:
	for ; i < len(words); i++ {
		wd := words[i]
		v := wd.val
		if !wd.certain() {
			r.uncertain = true
			if !strings.HasPrefix(v, "-") {
				break
			}
		}
		switch {
		case v == "--":
			i++
			break loop
		case v == "-" || !strings.HasPrefix(v, "-"):
			break loop
		case strings.HasPrefix(v, "--"):
			name, val, hasVal := strings.Cut(v[2:], "=")
			full, takesArg, ok := matchLong(name, spec)
			if !ok {
				r.unknown = append(r.unknown, "--"+name)
				continue
			}
			certain := true
			if takesArg && !hasVal {
				val, certain = argument()
			}
			if record(full, val, certain) {
				i++
				break loop
			}
		case spec.numeric && allDigits(strings.TrimPrefix(v[1:], "-")):
		default:
			for j := 1; j < len(v); j++ {
				ch := v[j]
				name := string(ch)
				switch {
				case strings.IndexByte(spec.arg, ch) >= 0:
					val, certain := v[j+1:], true
					if val == "" {
						val, certain = argument()
					}
					if record(name, val, certain) {
						i++
						break loop
					}
					j = len(v)
				case strings.IndexByte(spec.optArg, ch) >= 0:
					record(name, v[j+1:], true)
					j = len(v)
				case strings.IndexByte(spec.flag, ch) >= 0:
					record(name, "", true)
				default:
					r.unknown = append(r.unknown, "-"+name)
				}
			}
		}
	}
	r.next = min(i, len(words))
	return r
}

// matchLong finds a long option by its name or an unambiguous prefix of it.
func matchLong(name string, spec optSpec) (full string, takesArg, ok bool) {
	if contains(spec.longArg, name) {
		return name, true, true
	}
	if contains(spec.longFlag, name) {
		return name, false, true
	}
	found := 0
	for _, l := range spec.longArg {
		if name != "" && strings.HasPrefix(l, name) {
			full, takesArg = l, true
			found++
		}
	}
	for _, l := range spec.longFlag {
		if name != "" && strings.HasPrefix(l, name) {
			full, takesArg = l, false
			found++
		}
	}
	return full, takesArg, found == 1
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// wrapperSpec describes a program that runs the command given after its
// options.
type wrapperSpec struct {
	opts     optSpec
	skip     int      // operands before the command (timeout's duration)
	assigns  bool     // NAME=VALUE operands may come before the command
	noRun    []string // options with which no command is run
	shell    []string // options with which, given no command, a shell runs
	executor string   // why the command's arguments may change (xargs)
}

var helpVersion = []string{"help", "version"}

var wrappers = map[string]wrapperSpec{
	"command": {opts: optSpec{flag: "pvV"}, noRun: []string{"v", "V"}},
	"exec":    {opts: optSpec{flag: "cl", arg: "a"}},
	"builtin": {},
	"nohup":   {opts: optSpec{longFlag: helpVersion}, noRun: helpVersion},
	"nice": {opts: optSpec{arg: "n", longArg: []string{"adjustment"}, longFlag: helpVersion, numeric: true},
		noRun: helpVersion},
	"ionice": {opts: optSpec{arg: "cnpPu", flag: "t", longArg: []string{"class", "classdata", "pid", "pgid", "uid"},
		longFlag: []string{"ignore", "help", "version"}},
		noRun: []string{"p", "P", "u", "pid", "pgid", "uid", "help", "version"}},
	"timeout": {opts: optSpec{arg: "sk", flag: "v", longArg: []string{"signal", "kill-after"},
		longFlag: []string{"foreground", "preserve-status", "verbose", "help", "version"}},
		skip: 1, noRun: helpVersion},
	"time": {opts: optSpec{arg: "fo", flag: "apvq", longArg: []string{"format", "output"},
		longFlag: []string{"append", "portability", "verbose", "quiet", "help", "version"}}, noRun: helpVersion},
	"stdbuf": {opts: optSpec{arg: "ioe", longArg: []string{"input", "output", "error"}, longFlag: helpVersion},
		noRun: helpVersion},
	"setsid": {opts: optSpec{flag: "cfw", longFlag: []string{"ctty", "fork", "wait", "help", "version"}},
		noRun: helpVersion},
	"sudo": {opts: optSpec{arg: "aCcDgpRrTtUu", optArg: "h", flag: "ABbEeHiKkLlNnPSsVv",
		longArg: []string{"auth-type", "chdir", "close-from", "group", "host", "prompt", "chroot", "role", "type",
			"command-timeout", "other-user", "user", "login-class"},
		longFlag: []string{"askpass", "background", "bell", "edit", "help", "login", "remove-timestamp",
			"reset-timestamp", "list", "non-interactive", "preserve-groups", "shell", "stdin", "version",
			"validate", "set-home", "preserve-env"}},
		assigns: true,
		noRun:   []string{"e", "l", "v", "V", "K", "edit", "list", "validate", "version", "help", "remove-timestamp"},
		shell:   []string{"s", "i", "shell", "login"}},
	"doas": {opts: optSpec{arg: "Cu", flag: "Lns"}, noRun: []string{"C", "L"}, shell: []string{"s"}},
	"xargs": {opts: optSpec{arg: "aEILnsPd", optArg: "eil", flag: "0prtxo",
		longArg: []string{"arg-file", "delimiter", "max-args", "max-chars", "max-procs", "process-slot-var"},
		longFlag: []string{"null", "interactive", "no-run-if-empty", "verbose", "exit", "open-tty", "show-limits",
			"help", "version", "eof", "replace", "max-lines"}},
		noRun: helpVersion, executor: "xargs"},
}

// wrapper finds the command a wrapper program runs.
func wrapper(name string, spec wrapperSpec, words []word, in stdin) plan {
	r := getopt(words, 1, spec.opts)
	if r.has(spec.noRun...) {
		return plan{}
	}
	if name == "sudo" {
		if v, ok := r.value("h"); ok && v == "" {
			return plan{} // sudo -h is help
		}
	}
	var extra []string
	if r.uncertain {
		extra = append(extra, "the arguments of "+name+" before the command could not be known for sure")
	}
	for _, u := range r.unknown {
		extra = appendReason(extra, "unrecognized option "+u+" of "+name)
	}
	i := r.next
	for k := 0; k < spec.skip && i < len(words); k++ {
		if !words[i].certain() {
			extra = appendReason(extra, "the arguments of "+name+" before the command could not be known for sure")
		}
		i++
	}
	if spec.assigns {
		for i < len(words) && strings.Contains(words[i].val, "=") {
			i++
		}
	}
	var p plan
	if i >= len(words) {
		switch {
		case spec.executor != "":
			p.inner = []innerCmd{{words: []word{{val: "echo"}}}}
		case r.has(spec.shell...):
			stdinScript(name, dialectSh, in, &p)
			return p
		default:
			return p
		}
	} else {
		p.inner = []innerCmd{{words: words[i:]}}
	}
	if spec.executor == "xargs" {
		tok, ok := r.value("I", "i", "replace")
		if ok {
			if tok == "" {
				tok = "{}"
			}
			extra = append(extra, "xargs substitutes "+quoteShort(tok)+" with input it reads")
			p.inner[0].replace = tok
			p.inner[0].noStdin = true
		} else {
			extra = append(extra, "xargs appends arguments it reads from its input")
			p.inner[0].noStdin = true
		}
	}
	p.inner[0].extra = extra
	return p
}

// envPlan reads env's options, its -S string and NAME=VALUE operands.
func envPlan(words []word) plan {
	spec := optSpec{arg: "uCS", flag: "i0v",
		longArg: []string{"unset", "chdir", "split-string"},
		longFlag: []string{"ignore-environment", "null", "debug", "help", "version", "default-signal",
			"ignore-signal", "block-signal", "list-signal-handling"},
		stop: "S", stopLong: []string{"split-string"}}
	var extra []string
	for range 8 { // env -S may be given again in the string it splits
		r := getopt(words, 1, spec)
		if r.has("help", "version") {
			return plan{}
		}
		if r.uncertain {
			extra = appendReason(extra, "the arguments of env before the command could not be known for sure")
		}
		for _, u := range r.unknown {
			extra = appendReason(extra, "unrecognized option "+u+" of env")
		}
		if r.stopped != nil {
			fields, certain := splitEnvString(r.stopped.val)
			if !certain || !r.stopped.certain {
				extra = appendReason(extra, "env -S string could not be split for sure")
			}
			rest := append([]word{{val: "env"}}, fields...)
			words = append(rest, words[r.next:]...)
			continue
		}
		i := r.next
		for i < len(words) && (words[i].val == "-" || strings.Contains(words[i].val, "=")) {
			i++
		}
		if i >= len(words) {
			return plan{}
		}
		return plan{inner: []innerCmd{{words: words[i:], extra: extra}}}
	}
	return plan{self: []string{"env -S nested too deeply"}}
}

// splitEnvString splits env -S's string at blanks; quoting, escapes and
// ${VAR} in it are not interpreted here, so they make it uncertain.
func splitEnvString(s string) ([]word, bool) {
	certain := !strings.ContainsAny(s, "'\"\\$#")
	var out []word
	for _, f := range strings.Fields(s) {
		out = append(out, word{val: f})
	}
	return out, certain
}

// findPlan finds the commands of find's -exec, -execdir, -ok and -okdir.
func findPlan(words []word) plan {
	var p plan
	for i := 1; i < len(words); i++ {
		switch words[i].val {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		j := i + 1
		for ; j < len(words); j++ {
			v := words[j].val
			if v == ";" || v == "+" && j > i+1 && words[j-1].val == "{}" {
				break
			}
		}
		if j > i+1 {
			p.inner = append(p.inner, innerCmd{words: words[i+1 : j], replace: "{}", noStdin: true,
				extra: []string{"find runs it for each file found, substituting `{}`"}})
		}
		i = j
	}
	return p
}

// trapPlan parses a trap's action.
func trapPlan(c ctx, words []word) plan {
	args := words[1:]
	for len(args) > 0 && strings.HasPrefix(args[0].val, "-") && args[0].val != "-" {
		if args[0].val == "--" {
			args = args[1:]
			break
		}
		return plan{} // -l, -p, -P list
	}
	if len(args) < 2 || args[0].val == "-" || allDigits(args[0].val) {
		return plan{}
	}
	s := script{src: args[0].val, dialect: c.dialect, what: "trap action"}
	if !args[0].certain() {
		s.taint = "the trap action could not be known for sure"
	}
	return plan{scripts: []script{s}}
}

// suPlan parses su's -c command (its options may follow the user name);
// without one su runs a shell.
func suPlan(name string, words []word, in stdin) plan {
	spec := optSpec{arg: "cCgGswZ", flag: "flmpPTh",
		longArg: []string{"command", "session-command", "group", "supp-group", "shell", "whitelist-environment",
			"user"},
		longFlag: []string{"fast", "login", "preserve-environment", "pty", "no-pty", "help", "version"}}
	var all optResult
	for i := 1; i < len(words); {
		r := getopt(words, i, spec)
		all.seen = append(all.seen, r.seen...)
		all.unknown = append(all.unknown, r.unknown...)
		all.uncertain = all.uncertain || r.uncertain
		i = r.next + 1 // past one operand (the user, or -)
	}
	if all.has("h", "help", "version") {
		return plan{}
	}
	var p plan
	for _, o := range all.seen {
		switch o.name {
		case "c", "C", "command", "session-command":
			s := script{src: o.val, dialect: dialectSh, what: name + " -c string"}
			if !o.certain {
				s.taint = "the " + name + " -c string could not be known for sure"
			}
			p.scripts = append(p.scripts, s)
		}
	}
	if len(p.scripts) > 0 {
		return p
	}
	if all.uncertain || len(all.unknown) > 0 {
		p.self = append(p.self, "the options of "+name+" could not be read for sure")
		return p
	}
	stdinScript(name, dialectSh, in, &p)
	return p
}
