package shell

import (
	"strings"
)

// plan is what a command leads to besides itself.
type plan struct {
	self    []string   // reasons the command itself is Uncertain (Open)
	unknown []string   // reasons it is Unknowable
	inner   []innerCmd // commands it runs (wrappers)
	scripts []script   // command strings it runs (shells, eval, trap, alias)
}

// innerCmd is a command a wrapper runs.
type innerCmd struct {
	words   []word
	extra   []string // reasons it is Uncertain beyond its own words
	unknown bool     // the extra reasons make it Unknowable
	open    bool     // the extra reasons make it Open
	appends bool     // arguments are appended at run time (xargs)
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

// emit reports a simple command and then what it runs. ic, when not nil,
// is the wrapper's view of it (extra reasons and how they count).
func (w *walker) emit(c ctx, words []word, ic *innerCmd, in stdin) {
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
		if c.unknown {
			cmd.Unknowable = true
		} else {
			cmd.Open = true
		}
	}
	for i, wd := range words {
		cmd.Args[i] = wd.val
		src := ""
		switch {
		case !wd.certain():
			src = wd.src
		case c.replaceTok != "" && strings.Contains(wd.val, c.replaceTok):
			src = wd.val
		}
		if src != "" {
			if cmd.Dynamic == nil {
				cmd.Dynamic = make([]string, len(words))
			}
			cmd.Dynamic[i] = src
		}
		for _, r := range wd.reasons {
			reasons = appendReason(reasons, r)
		}
	}
	if cmd.Dynamic != nil && cmd.Dynamic[0] != "" {
		cmd.Unknowable = true
	}
	if ic != nil {
		for _, r := range ic.extra {
			reasons = appendReason(reasons, r)
		}
		cmd.Unknowable = cmd.Unknowable || ic.unknown
		cmd.Open = cmd.Open || ic.open
	}
	cmd.Appends = c.appends
	if w.funcs[words[0].val] {
		reasons = appendReason(reasons, quoteShort(words[0].val)+" is a function defined in the script")
		cmd.Unknowable = true
	}
	if w.aliases[words[0].val] {
		reasons = appendReason(reasons, quoteShort(words[0].val)+" is an alias defined in the script")
		cmd.Unknowable = true
	}
	var p plan
	if words[0].certain() {
		p = w.plan(c, BaseName(words[0].val), words, in)
	} else {
		p = w.guessShell(words)
	}
	for _, r := range p.self {
		reasons = appendReason(reasons, r)
		cmd.Open = true
	}
	for _, r := range p.unknown {
		reasons = appendReason(reasons, r)
		cmd.Unknowable = true
	}
	for _, s := range p.scripts {
		// A command string that is not known: what it runs is not either.
		if s.taint != "" {
			reasons = appendReason(reasons, s.taint)
			cmd.Unknowable = true
		}
		if c.replaceTok != "" && strings.Contains(s.src, c.replaceTok) {
			reasons = appendReason(reasons, "the command string may have "+quoteShort(c.replaceTok)+" substituted in it")
			cmd.Unknowable = true
		}
	}
	if cmd.Appends && len(reasons) == 0 {
		reasons = append(reasons, "xargs appends arguments it reads from its input")
	}
	if cmd.Dynamic != nil && len(reasons) == 0 {
		reasons = append(reasons, quoteShort(c.replaceTok)+" is substituted at run time")
	}
	cmd.Uncertain = len(reasons) > 0
	cmd.Reason = strings.Join(reasons, "; ")
	w.add(cmd)
	for i := range p.inner {
		ic := &p.inner[i]
		ic2 := c
		if ic.replace != "" {
			ic2.replaceTok = ic.replace
		}
		if ic.appends {
			ic2.appends = true
		}
		icIn := in
		if ic.noStdin {
			icIn = stdin{}
		}
		w.emit(ic2, ic.words, ic, icIn)
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
	in.appends = false
	in.skipDblBracket = false
	if c.replaceTok != "" && strings.Contains(s.src, c.replaceTok) {
		s.taint = joinReason(s.taint, "the command string may have "+quoteShort(c.replaceTok)+" substituted in it")
	}
	in.taint = joinReason(c.taint, s.taint)
	in.unknown = c.unknown || s.taint != ""
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
		if len(words) > 1 && !words[1].certain() {
			return plan{unknown: []string{"the program busybox runs is only known at run time"}}
		}
		if len(words) > 1 && !strings.HasPrefix(words[1].val, "-") {
			return plan{inner: []innerCmd{{words: words[1:]}}}
		}
	case "find":
		return findPlan(words)
	case "git":
		return gitPlan(words)
	case "flock":
		return flockPlan(words, in)
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
			uncertain = !hasC && (v == "" || strings.HasPrefix(v, "-") || wd.split)
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
		p.unknown = []string{"the options of " + name + " are only known at run time"}
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
	// argument reads the argument of an option from the next word. A
	// dynamic one is fine when it is one word: only its value is unknown.
	argument := func() (string, bool) {
		i++
		if i >= len(words) {
			return "", true
		}
		if !words[i].fixed(0) {
			r.uncertain = true
		}
		return words[i].val, words[i].certain()
	}
loop:
	for ; i < len(words); i++ {
		wd := words[i]
		v := wd.val
		if !wd.certain() {
			// Only an option whose name is literal, with a dynamic value
			// attached (--signal="$s", -n"$n"), is still known.
			eq := strings.IndexByte(v, '=')
			switch {
			case !strings.HasPrefix(v, "-"):
				// An operand when it is one word with a literal start.
				if !wd.fixed(1) {
					r.uncertain = true
				}
				break loop
			case !wd.fixed(2), strings.HasPrefix(v, "--") && (eq < 0 || eq >= wd.lit):
				r.uncertain = true
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
			certain := wd.certain()
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
				if !wd.certain() && j >= wd.lit {
					r.uncertain = true // options only known at run time
					break
				}
				switch {
				case strings.IndexByte(spec.arg, ch) >= 0:
					val, certain := v[j+1:], true
					switch {
					case !wd.certain():
						certain = false // the value has the expansion
					case val == "":
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
	"chrt": {opts: optSpec{arg: "TPD", flag: "abdfiormRvhV",
		longArg: []string{"sched-runtime", "sched-period", "sched-deadline"},
		longFlag: []string{"all-tasks", "batch", "deadline", "fifo", "idle", "other", "rr", "reset-on-fork",
			"max", "pid", "verbose", "help", "version"}},
		skip: 1, noRun: []string{"m", "p", "h", "V", "max", "pid", "help", "version"}},
	"taskset": {opts: optSpec{flag: "acphV", longFlag: []string{"all-tasks", "cpu-list", "pid", "help", "version"}},
		skip: 1, noRun: []string{"p", "h", "V", "pid", "help", "version"}},
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
	unknown, open := false, false
	notKnown := func() {
		extra = appendReason(extra, "the arguments of "+name+" before the command could not be known for sure")
		unknown = true
	}
	if r.uncertain {
		notKnown()
	}
	for _, u := range r.unknown {
		extra = appendReason(extra, "unrecognized option "+u+" of "+name)
		open = true
	}
	i := r.next
	for k := 0; k < spec.skip && i < len(words); k++ {
		if !words[i].fixed(0) {
			notKnown()
		}
		i++
	}
	if spec.assigns {
		for i < len(words) && strings.Contains(words[i].val, "=") {
			if eq := strings.IndexByte(words[i].val, '='); !words[i].fixed(eq + 1) {
				notKnown()
			}
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
			if unknown {
				p.unknown = extra
			}
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
			p.inner[0].appends = true
			p.inner[0].noStdin = true
		}
	}
	p.inner[0].extra = extra
	p.inner[0].unknown = unknown
	p.inner[0].open = open
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
	unknown, open := false, false
	notKnown := func(r string) {
		extra = appendReason(extra, r)
		unknown = true
	}
	for range 8 { // env -S may be given again in the string it splits
		r := getopt(words, 1, spec)
		if r.has("help", "version") {
			return plan{}
		}
		if r.uncertain {
			notKnown("the arguments of env before the command could not be known for sure")
		}
		for _, u := range r.unknown {
			extra = appendReason(extra, "unrecognized option "+u+" of env")
			open = true
		}
		if r.stopped != nil {
			fields, certain := splitEnvString(r.stopped.val)
			if !certain || !r.stopped.certain {
				notKnown("env -S string could not be split for sure")
			}
			rest := append([]word{{val: "env"}}, fields...)
			words = append(rest, words[r.next:]...)
			continue
		}
		i := r.next
		for i < len(words) && (words[i].val == "-" || strings.Contains(words[i].val, "=")) {
			if eq := strings.IndexByte(words[i].val, '='); !words[i].fixed(max(eq+1, 1)) {
				notKnown("the arguments of env before the command could not be known for sure")
			}
			i++
		}
		if i >= len(words) {
			if unknown {
				return plan{unknown: extra}
			}
			return plan{}
		}
		return plan{inner: []innerCmd{{words: words[i:], extra: extra, unknown: unknown, open: open}}}
	}
	return plan{unknown: []string{"env -S nested too deeply"}}
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
			if !words[i].fixed(0) {
				// $x may be "-exec CMD ;".
				p.unknown = appendReason(p.unknown, "an argument of find that may be several words ("+words[i].src+") may hold an -exec")
			}
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

// flockPlan reads flock's options and lock file, then runs the command
// after it, or the sh -c string of its -c option (which follows the file).
func flockPlan(words []word, in stdin) plan {
	spec := wrapperSpec{opts: optSpec{arg: "wE", flag: "sexnoFuhV",
		longArg: []string{"timeout", "wait", "conflict-exit-code"},
		longFlag: []string{"shared", "exclusive", "unlock", "nonblocking", "nonblock", "close", "no-fork",
			"verbose", "help", "version"}},
		skip: 1, noRun: []string{"h", "V", "help", "version"}}
	r := getopt(words, 1, spec.opts)
	i := r.next + 1
	if !r.has(spec.noRun...) && i+1 < len(words) && (words[i].val == "-c" || words[i].val == "--command") {
		s := script{src: words[i+1].val, dialect: dialectSh, what: "flock -c string"}
		if !words[i+1].certain() {
			s.taint = "the flock -c string could not be known for sure"
		}
		p := plan{scripts: []script{s}}
		if r.uncertain || !words[r.next].fixed(0) {
			p.unknown = []string{"the arguments of flock before the command could not be known for sure"}
		}
		return p
	}
	return wrapper("flock", spec, words, in)
}

// gitCommands are commands built into git: an alias of the same name is
// ignored, so the command line's aliases cannot change what they run.
var gitCommands = map[string]bool{}

func init() {
	for _, c := range strings.Fields(`add am annotate apply archive backfill bisect blame branch bugreport bundle
		cat-file check-attr check-ignore check-mailmap check-ref-format checkout checkout-index cherry cherry-pick
		clean clone column commit commit-graph commit-tree config count-objects credential describe diagnose diff
		diff-files diff-index diff-tree difftool fast-export fast-import fetch fetch-pack fmt-merge-msg
		for-each-ref for-each-repo format-patch fsck gc get-tar-commit-id grep hash-object help hook index-pack
		init init-db interpret-trailers log ls-files ls-remote ls-tree mailinfo mailsplit maintenance merge
		merge-base merge-file merge-index merge-tree mktag mktree multi-pack-index mv name-rev notes pack-objects
		pack-redundant pack-refs patch-id prune prune-packed pull push range-diff read-tree rebase receive-pack
		reflog refs remote repack replace replay rerere reset restore rev-list rev-parse revert rm send-pack
		shortlog show show-branch show-index show-ref sparse-checkout stash status stripspace submodule switch
		symbolic-ref tag unpack-file unpack-objects update-index update-ref update-server-info upload-archive
		upload-pack var verify-commit verify-pack verify-tag version whatchanged worktree write-tree`) {
		gitCommands[c] = true
	}
}

// gitPlan finds the subcommand of git past its global options (-C DIR,
// -c NAME=VALUE, --git-dir, --work-tree, --namespace, --config-env, ...)
// and reports `git SUBCOMMAND ARGS` as the command git runs, so that
// Exec(git push*) sees `git -C . push`. When the subcommand cannot be
// found (a dynamic word where options go, an unknown option, an alias
// defined on the command line) it reports `git` followed by a dynamic
// word that stands for any subcommand.
func gitPlan(words []word) plan {
	var p plan
	anyCommand := func(src, why string) plan {
		if len(words) == 2 && !words[1].certain() {
			return p // already `git` and any subcommand
		}
		if src == "" {
			src = "…"
		}
		p.inner = []innerCmd{{words: []word{words[0], {reasons: []string{why}, src: src, split: true}}}}
		return p
	}
	var aliases map[string]string // name (lower case) → value; "\x00" when not known
	dynConfig := ""               // a -c whose name is not known
	config := func(kv word, env bool) {
		v := kv.val
		eq := strings.IndexByte(v, '=')
		known := kv.certain() || eq >= 0 && kv.fixed(eq+1)
		if !known {
			dynConfig = kv.src
			return
		}
		key, val, _ := strings.Cut(v, "=")
		sect, name, ok := strings.Cut(key, ".")
		if !ok || !strings.EqualFold(sect, "alias") {
			return
		}
		if env || !kv.certain() {
			val = "\x00"
		}
		if aliases == nil {
			aliases = map[string]string{}
		}
		aliases[strings.ToLower(name)] = val
	}
	i := 1
	for ; i < len(words); i++ {
		wd := words[i]
		v := wd.val
		if !strings.HasPrefix(v, "-") || !wd.fixed(2) {
			if !wd.certain() {
				return anyCommand(wd.src, "argument "+itoa(i)+" of git is only known at run time ("+wd.src+")")
			}
			break // the subcommand
		}
		name, _, hasVal := strings.Cut(v, "=")
		if !wd.certain() && (!hasVal || strings.IndexByte(v, '=') >= wd.lit) {
			return anyCommand(wd.src, "argument "+itoa(i)+" of git is only known at run time ("+wd.src+")")
		}
		switch name {
		case "-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix", "--attr-source":
			if hasVal && (name == "-C" || name == "-c") {
				return anyCommand(v, "git option "+quoteShort(v)+" is not known")
			}
			arg := wd
			if !hasVal {
				i++
				if i >= len(words) {
					return plan{} // git fails
				}
				arg = words[i]
				if !arg.fixed(0) {
					return anyCommand(arg.src, "argument "+itoa(i)+" of git is only known at run time ("+arg.src+")")
				}
			} else {
				_, after, _ := strings.Cut(v, "=")
				arg = word{val: after, reasons: wd.reasons, src: wd.src, lit: max(wd.lit-len(name)-1, 0)}
			}
			switch name {
			case "-c":
				config(arg, false)
			case "--config-env":
				config(arg, true)
			}
		case "--exec-path":
			if !hasVal {
				return plan{} // prints the path
			}
		case "-p", "--paginate", "-P", "--no-pager", "--bare", "--no-replace-objects", "--no-lazy-fetch",
			"--no-optional-locks", "--no-advice", "--literal-pathspecs", "--glob-pathspecs",
			"--noglob-pathspecs", "--icase-pathspecs":
		case "-v", "--version", "-h", "--help", "--html-path", "--man-path", "--info-path", "--list-cmds":
			return plan{} // git prints and exits (or runs help or version)
		default:
			return anyCommand(v, "git option "+quoteShort(v)+" is not known")
		}
	}
	if i >= len(words) {
		return plan{} // git without a subcommand prints its usage
	}
	sub := words[i].val
	if !gitCommands[sub] {
		if a, ok := aliases[strings.ToLower(sub)]; ok {
			why := "git runs the alias " + quoteShort(sub) + " defined on its command line"
			switch {
			case a == "\x00":
				p.unknown = []string{why + ", whose value is only known at run time"}
				return p
			case strings.HasPrefix(a, "!"):
				// A shell alias: git runs it with sh -c.
				p.scripts = []script{{src: a[1:], dialect: dialectSh, what: "git alias " + sub}}
			}
			return anyCommand(sub, why)
		}
		if dynConfig != "" {
			return anyCommand(sub, "git -c "+dynConfig+" may define "+quoteShort(sub)+" as an alias")
		}
	}
	if i == 1 {
		return plan{} // nothing to normalize
	}
	p.inner = []innerCmd{{words: append([]word{words[0]}, words[i:]...)}}
	return p
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// Unwraps reports whether Commands finds, by the program's own option
// grammar, the command the program name runs (a wrapper such as nice or
// env, find -exec, xargs, busybox, git's subcommand, a shell's -c string).
// For such a program a dynamic word that is not where its command goes is
// only an argument.
func Unwraps(name string) bool {
	if _, ok := wrappers[name]; ok {
		return true
	}
	if _, ok := shells[name]; ok {
		return true
	}
	switch name {
	case "env", "busybox", "find", "git", "flock", "eval", "su", "trap", "alias":
		return true
	}
	return false
}
