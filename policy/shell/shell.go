// Package shell finds every command that a shell command string can run, so
// that a policy can check each of them, not only the first word of the string.
//
// An agent gives a string such as
//
//	npm test && git push origin main | tee log
//
// and a rule such as Exec(git push*) must see the git push in it. [Commands]
// parses the string with mvdan.cc/sh (bash syntax, a superset of POSIX sh)
// and returns each simple command the string can run, in order, with its
// words as the shell would pass them when that is certain:
//
//   - across pipelines, lists (&&, ||, ;, &), subshells, groups, if, while,
//     until, for, select and case bodies, function bodies, coprocesses;
//   - inside command substitutions $(…) and `…` and process substitutions
//     <(…) >(…), wherever they appear (arguments, assignments, redirections,
//     unquoted here-documents, parameter expansions, arithmetic, tests);
//   - inside the command string of a nested shell (sh, bash, dash, ash, zsh,
//     ksh, mksh, busybox sh, … -c STRING, also su -c), of eval, of a trap
//     action and of an alias, and in a here-document or here-string that a
//     shell reads as its script — recursively;
//   - behind wrapper programs, which are reported and then unwrapped: env,
//     command, exec, builtin, nice, ionice, chrt, taskset, nohup, timeout,
//     time, stdbuf, setsid, flock (and flock FILE -c STRING), sudo, doas,
//     busybox, xargs and find -exec/-execdir/-ok/-okdir;
//   - past git's global options (-C DIR, -c NAME=VALUE, --git-dir,
//     --work-tree, --namespace, --config-env, --no-pager, --bare, …):
//     `git -C . push` is reported, then `git push`; an alias defined on the
//     command line makes the subcommand a dynamic word (a shell alias !CMD
//     is parsed as a script too).
//
// The rule of the package: what cannot be parsed with confidence is
// reported as Uncertain or as an error, never silently as certain, and
// Command says how: which words are Dynamic (an expansion in an argument
// leaves the program known), whether the command is Unknowable (its
// command word, or a wrapper's command, or the command string it comes
// from, is only known at run time), whether xargs Appends arguments, and
// whether it is Open (a shell reading its standard input). A word
// is Uncertain when its value depends on running the script (expansions,
// substitutions, globs, brace expansion, tilde forms other than a plain
// leading ~); a command is Uncertain when one of its words is, when it names
// a function or alias defined in the script, when it is run by xargs or
// find (which add or substitute arguments), when a wrapper's options before
// it could not be read for sure, when it is a shell that reads its commands
// from standard input, and when it comes from a command string that itself
// was not certain. A syntax error, or a script beyond the limits
// ([MaxScriptBytes], [MaxDepth], [MaxCommands]), is an error; the caller then
// treats the whole string as the strictest case.
//
// moat runs agents' strings with /bin/sh, which is dash on Debian, while
// agents write bash. The two readings differ in ways that matter here: to sh,
// ((…)) is two nested subshells and [[ is an ordinary word, so
// ((reboot)) or [[ -f x || reboot ]] run reboot. Where the string is read as
// sh (the top level, and sh/dash/ash -c strings), such constructs are also
// read the way sh reads them and the commands found are reported as
// Uncertain.
//
// Known limits, by design: bash can run code hidden in variables' values
// through arithmetic evaluation (x='a[$(cmd)]'; ((x))), and any program can
// interpret its arguments as code (python -c, make, git aliases, …). Those
// are programs' behaviours, left to the rules about those programs (git's
// aliases and configuration from its files or the environment are not
// followed). Programs that run commands but are not listed above (chroot,
// watch, script -c, ssh, …) are reported as themselves only.
package shell

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Limits that bound the work done on one script. Past them, Commands returns
// an error wrapping [ErrLimit].
const (
	// MaxScriptBytes is the longest script (and nested command string)
	// accepted. The parser recurses on nesting, so this bounds its stack.
	MaxScriptBytes = 128 << 10
	// MaxDepth is how deeply commands may nest: each compound command body,
	// command or process substitution and nested command string is a level.
	MaxDepth = 16
	// MaxCommands is the most commands reported for one script.
	MaxCommands = 1000
	// maxBrackets bounds the nesting of (, [ and { (counted without regard
	// to quoting) before the script is given to the parser, whose stack grows
	// by kilobytes per level.
	maxBrackets = 1000
	// maxWalk bounds the depth of the syntax tree walked inside one word or
	// expression.
	maxWalk = 10000
)

var (
	// ErrSyntax is wrapped by the error Commands returns when the script,
	// or a command string found in it, is not valid shell syntax.
	ErrSyntax = errors.New("shell: syntax error")
	// ErrLimit is wrapped by the error Commands returns when the script is
	// too long, nests too deeply or has too many commands.
	ErrLimit = errors.New("shell: script exceeds the analysis limits")
	// errInternal is wrapped when a bug was caught instead of a panic.
	errInternal = errors.New("shell: internal error")
)

// Command is one simple command found in a script, with its words as the
// shell would pass them (quotes removed) when that is certain.
type Command struct {
	// Args is the argv; Args[0] is the program as written (not resolved).
	// Leading VAR=value assignments are not part of it.
	Args []string
	// Uncertain is set when the words could not be known for sure without
	// running the script: parameter or arithmetic expansion ($X, ${X},
	// $((…))), command substitution ($(…), `…`), process substitution,
	// globbing characters that would expand (*, ?, [ in an unquoted word),
	// brace expansion, tilde forms other than a plain leading ~, or a word
	// that is a function or alias defined in the script; also when the
	// command is run by xargs or find, follows wrapper options that could
	// not be read for sure, reads its commands from standard input, or comes
	// from a command string that was itself uncertain. The Args then hold
	// the literal parts best-effort (expansions contribute nothing).
	Uncertain bool
	// Reason says why the command is Uncertain, readably; empty otherwise.
	Reason string

	// How it is Uncertain, for matching; the flags are not exclusive.

	// Dynamic is nil when every word is literal; otherwise it has one entry
	// per Args: "" for a literal word and, for a word whose value is only
	// known at run time (an expansion, a substitution, a glob, a word into
	// which xargs -I or find -exec substitutes), the word as written. A
	// dynamic word may stand for any text, several words or none.
	Dynamic []string
	// Unknowable is set when which program runs, or with which command
	// words, cannot be known before it runs: its command word is dynamic,
	// it names a function or alias defined in the script, it comes from a
	// command string that is itself not known (sh -c "$s", eval "$s"), or it
	// runs a command string or a wrapped command that is not known (the
	// wrapper's options or operands before it are dynamic, a shell's options
	// are dynamic, a here-document it reads has expansions).
	Unknowable bool
	// Appends is set when arguments are added after Args at run time (what
	// xargs reads from its input).
	Appends bool
	// Open is set when the command does more than its words say, in a way
	// that is not known: a shell reading commands from its standard input,
	// options that could not be read, sh's reading of (( or [[. Any
	// command of that name may be what runs.
	Open bool
}

// Commands returns every simple command the script can run, in order: across
// pipelines, lists (&&, ||, ;, &), subshells ( … ), groups { …; },
// if/while/for/case bodies, functions' bodies, command substitutions and
// process substitutions (the commands inside $(…) are commands too, reported
// before the command whose words they are part of), here-documents that feed
// shells, and, recursively, the -c STRING of a nested shell (sh, bash, dash,
// zsh, ksh, busybox sh) and of eval when its argument is literal (when it is
// not, what can be read of it is parsed and reported as Uncertain).
//
// Wrapper programs are unwrapped so that the real command is also reported:
// env (with its VAR=val and options), command, exec, builtin, nice/ionice
// (with options), nohup, timeout (with options and the duration), time,
// stdbuf, setsid, chrt, taskset, flock, sudo/doas (with options), xargs
// (the command it runs, Uncertain because xargs appends arguments), find …
// -exec CMD … ; and -execdir (the CMD, Uncertain), and git past its global
// options. Both the wrapper and the unwrapped command are returned, the
// wrapper first. `bash script.sh` is just a command: the
// script file is not read.
//
// A syntax error returns an error wrapping [ErrSyntax]; a script beyond the
// limits returns one wrapping [ErrLimit]. Commands never panics.
func Commands(script string) (cmds []Command, err error) {
	w := &walker{funcs: map[string]bool{}, aliases: map[string]bool{}}
	defer func() {
		if r := recover(); r != nil {
			cmds = nil
			if a, ok := r.(abort); ok {
				err = a.err
				return
			}
			err = fmt.Errorf("%w: %v", errInternal, r)
		}
	}()
	if perr := w.parse(ctx{dialect: dialectSh}, script); perr != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, perr)
	}
	return w.out, nil
}

// Normalize returns the words a rule is matched against: args with Args[0]
// replaced by its base name (/usr/bin/git → git), since rules match program
// names and spelling a path differently must not escape them. The slice
// given is not modified.
func Normalize(args []string) []string {
	out := slices.Clone(args)
	if len(out) > 0 {
		out[0] = BaseName(out[0])
	}
	return out
}

// BaseName is the last element of a slash-separated path, as Normalize
// uses it for a program name; trailing slashes are ignored and a name made
// only of slashes is kept as it is.
func BaseName(s string) string {
	t := strings.TrimRight(s, "/")
	if t == "" {
		return s
	}
	if i := strings.LastIndexByte(t, '/'); i >= 0 {
		return t[i+1:]
	}
	return t
}

// dialect is the shell language a script is read in.
type dialect int

const (
	// dialectSh is how /bin/sh strings are read: with bash's grammar, and
	// with sh's reading of (( and [[ reported as well.
	dialectSh dialect = iota
	dialectBash
	dialectPOSIX // only for re-reading (( and [[ the way sh does
	dialectZsh
	dialectKsh
)

func (d dialect) lang() syntax.LangVariant {
	switch d {
	case dialectPOSIX:
		return syntax.LangPOSIX
	case dialectZsh:
		return syntax.LangZsh
	case dialectKsh:
		return syntax.LangMirBSDKorn
	default:
		return syntax.LangBash
	}
}

// ctx is where in the script the walker is.
type ctx struct {
	src     string // the source the current syntax tree was parsed from
	dialect dialect
	depth   int
	// taint, when set, makes every command found here Uncertain.
	taint string
	// unknown, when set, makes every command found here Unknowable (the
	// command string they come from is not known).
	unknown bool
	// replaceTok is the text that xargs -I or find -exec substitutes in the
	// arguments of the command being unwrapped; a command string containing
	// it is not certain.
	replaceTok string
	// appends is set for the command xargs runs (and what it wraps in
	// turn): arguments are appended to it at run time.
	appends bool
	// skipDblBracket drops commands named [[ (in sh's reading of [[ … ]],
	// the [[ itself is not a command that exists).
	skipDblBracket bool
}

// abort carries an error out of the walk.
type abort struct{ err error }

// walker collects commands.
type walker struct {
	out     []Command
	funcs   map[string]bool // functions defined anywhere in the scripts read
	aliases map[string]bool // aliases defined anywhere in the scripts read
}

func (w *walker) fail(err error) { panic(abort{err}) }

func (w *walker) enter(c ctx) ctx {
	c.depth++
	if c.depth > MaxDepth {
		w.fail(fmt.Errorf("%w: commands nested more than %d deep", ErrLimit, MaxDepth))
	}
	return c
}

func (w *walker) add(cmd Command) {
	if len(w.out) >= MaxCommands {
		w.fail(fmt.Errorf("%w: more than %d commands", ErrLimit, MaxCommands))
	}
	w.out = append(w.out, cmd)
}

// parse parses src in c's dialect and walks it. It returns the parser's
// error; limits fail the whole walk.
func (w *walker) parse(c ctx, src string) error {
	if len(src) > MaxScriptBytes {
		w.fail(fmt.Errorf("%w: script longer than %d bytes", ErrLimit, MaxScriptBytes))
	}
	if bracketDepth(src) > maxBrackets {
		w.fail(fmt.Errorf("%w: brackets nested more than %d deep", ErrLimit, maxBrackets))
	}
	f, err := syntax.NewParser(syntax.Variant(c.dialect.lang())).Parse(strings.NewReader(src), "")
	if err != nil {
		return err
	}
	c.src = src
	w.definitions(f)
	w.stmts(c, f.Stmts)
	return nil
}

// bracketDepth is the deepest nesting of (, [ and { in s, counted without
// regard to quoting; an upper bound on what the parser will recurse on.
func bracketDepth(s string) int {
	d, most := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '{':
			d++
			most = max(most, d)
		case ')', ']', '}':
			if d > 0 {
				d--
			}
		}
	}
	return most
}

// definitions records the names of the functions and aliases the file
// defines, so that commands calling them are reported as Uncertain. Lists
// and pipelines (binary trees as deep as they are long) are walked from an
// explicit stack rather than by recursion.
func (w *walker) definitions(f *syntax.File) {
	todo := []syntax.Node{f}
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		depth := 0
		syntax.Walk(n, func(n syntax.Node) bool {
			switch n := n.(type) {
			case nil:
				depth--
				return true
			case *syntax.BinaryCmd:
				todo = append(todo, n.Y, n.X)
				return false
			case *syntax.FuncDecl:
				if n.Name != nil {
					w.funcs[n.Name.Value] = true
				}
				for _, l := range n.Names {
					w.funcs[l.Value] = true
				}
			case *syntax.CallExpr:
				if len(n.Args) > 0 && n.Args[0].Lit() == "alias" {
					for _, a := range n.Args[1:] {
						if len(a.Parts) == 0 {
							continue
						}
						if l, ok := a.Parts[0].(*syntax.Lit); ok {
							if name, _, ok := strings.Cut(l.Value, "="); ok && name != "" {
								w.aliases[name] = true
							}
						}
					}
				}
			}
			depth++
			if depth > maxWalk {
				w.fail(fmt.Errorf("%w: syntax nested more than %d deep", ErrLimit, maxWalk))
			}
			return true
		})
	}
}

func (w *walker) stmts(c ctx, list []*syntax.Stmt) {
	for _, s := range list {
		w.stmt(c, s)
	}
}

func (w *walker) stmt(c ctx, s *syntax.Stmt) {
	switch cmd := s.Cmd.(type) {
	case nil:
		w.redirects(c, s.Redirs)
	case *syntax.CallExpr:
		words, in := w.callWords(c, cmd, s.Redirs)
		w.emit(c, words, nil, in)
		w.negatedSubshell(c, cmd)
	case *syntax.TimeClause:
		w.redirects(c, s.Redirs)
		w.timeClause(c, cmd)
	default:
		w.redirects(c, s.Redirs)
		w.compound(c, cmd)
	}
}

// callWords evaluates a simple command's assignments, words and
// redirections, in the order the shell does, and says what its standard
// input is.
func (w *walker) callWords(c ctx, ce *syntax.CallExpr, redirs []*syntax.Redirect) ([]word, stdin) {
	for _, a := range ce.Assigns {
		w.assignWord(c, a)
	}
	words := make([]word, 0, len(ce.Args))
	for _, a := range ce.Args {
		words = append(words, w.evalWord(c, a, modeArg))
	}
	return words, w.redirects(c, redirs)
}

// negatedSubshell handles !(…) at the start of a command. The parser reads
// it as an extended glob, but bash (without extglob) and sh read it as !
// followed by a subshell, which runs.
func (w *walker) negatedSubshell(c ctx, ce *syntax.CallExpr) {
	if len(ce.Args) == 0 {
		return
	}
	if len(ce.Args[0].Parts) == 0 {
		return
	}
	eg, ok := ce.Args[0].Parts[0].(*syntax.ExtGlob)
	if !ok || eg.Op != syntax.GlobExcept || eg.Pattern == nil {
		return
	}
	_ = w.parse(w.enter(c), eg.Pattern.Value) // a pattern that is no script runs nothing
}

func (w *walker) timeClause(c ctx, tc *syntax.TimeClause) {
	words := []word{{val: "time"}}
	if tc.PosixFormat {
		words = append(words, word{val: "-p"})
	}
	if tc.Stmt == nil {
		w.emit(c, words, nil, stdin{})
		return
	}
	if ce, ok := tc.Stmt.Cmd.(*syntax.CallExpr); ok && !tc.Stmt.Negated && len(ce.Args) > 0 {
		// time is reported as a wrapper of the command it times.
		inner, in := w.callWords(c, ce, tc.Stmt.Redirs)
		w.emit(c, append(words, inner...), nil, in)
		w.negatedSubshell(c, ce)
		return
	}
	w.emit(c, words, nil, stdin{})
	w.stmt(w.enter(c), tc.Stmt)
}

func (w *walker) compound(c ctx, cmd syntax.Command) {
	switch x := cmd.(type) {
	case *syntax.BinaryCmd:
		// Lists and pipelines nest as binary trees as long as the script;
		// walk them without recursion and without counting depth.
		todo := []*syntax.Stmt{x.Y, x.X}
		for len(todo) > 0 {
			s := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			if b, ok := s.Cmd.(*syntax.BinaryCmd); ok {
				w.redirects(c, s.Redirs)
				todo = append(todo, b.Y, b.X)
				continue
			}
			w.stmt(c, s)
		}
	case *syntax.Block:
		w.stmts(w.enter(c), x.Stmts)
	case *syntax.Subshell:
		w.stmts(w.enter(c), x.Stmts)
	case *syntax.IfClause:
		in := w.enter(c)
		for ic := x; ic != nil; ic = ic.Else {
			w.stmts(in, ic.Cond)
			w.stmts(in, ic.Then)
		}
	case *syntax.WhileClause:
		in := w.enter(c)
		w.stmts(in, x.Cond)
		w.stmts(in, x.Do)
	case *syntax.ForClause:
		switch l := x.Loop.(type) {
		case *syntax.WordIter:
			for _, it := range l.Items {
				w.evalWord(c, it, modeArg)
			}
		default:
			w.scan(c, l)
		}
		w.stmts(w.enter(c), x.Do)
	case *syntax.CaseClause:
		w.evalWord(c, x.Word, modeNoGlob)
		in := w.enter(c)
		for _, it := range x.Items {
			for _, p := range it.Patterns {
				w.evalWord(c, p, modeNoGlob)
			}
			w.stmts(in, it.Stmts)
		}
	case *syntax.FuncDecl:
		if x.Body != nil {
			w.stmt(w.enter(c), x.Body)
		}
	case *syntax.ArithmCmd:
		w.scan(c, x)
		w.shReading(c, x, "((")
	case *syntax.TestClause:
		w.scan(c, x)
		w.shReading(c, x, "[[")
	case *syntax.DeclClause:
		words := []word{{val: x.Variant.Value}}
		for _, a := range x.Args {
			words = append(words, w.assignWord(c, a))
		}
		w.emit(c, words, nil, stdin{})
	case *syntax.LetClause:
		words := []word{{val: "let"}}
		for _, e := range x.Exprs {
			w.scan(c, e)
			words = append(words, word{val: w.snippet(c, e, 0), reasons: []string{"let evaluates arithmetic expressions"}})
		}
		w.emit(c, words, nil, stdin{})
	case *syntax.CoprocClause:
		if x.Name != nil {
			w.evalWord(c, x.Name, modeNoGlob)
		}
		if x.Stmt != nil {
			w.stmt(w.enter(c), x.Stmt)
		}
	case *syntax.TestDecl:
		if x.Description != nil {
			w.evalWord(c, x.Description, modeNoGlob)
		}
		if x.Body != nil {
			w.stmt(w.enter(c), x.Body)
		}
	default:
		w.scan(c, x)
	}
}

// shReading reports the commands that sh (where (( and [[ are not keywords)
// would run for the text of n, as Uncertain.
func (w *walker) shReading(c ctx, n syntax.Node, kw string) {
	if c.dialect != dialectSh {
		return
	}
	src := w.snippet(c, n, 0)
	if src == "" {
		return
	}
	in := w.enter(c)
	in.dialect = dialectPOSIX
	in.taint = joinReason(c.taint, "in sh, "+kw+" is not a keyword and this runs as a command")
	in.skipDblBracket = true
	_ = w.parse(in, src) // what sh cannot parse, sh does not run
}

// scan walks an expression and reports the commands of the substitutions
// and statements found in it.
func (w *walker) scan(c ctx, n syntax.Node) {
	depth := 0
	syntax.Walk(n, func(x syntax.Node) bool {
		switch x := x.(type) {
		case nil:
			depth--
			return true
		case *syntax.CmdSubst:
			w.stmts(w.enter(c), x.Stmts)
			return false
		case *syntax.ProcSubst:
			w.stmts(w.enter(c), x.Stmts)
			return false
		case *syntax.Stmt:
			w.stmt(w.enter(c), x)
			return false
		}
		depth++
		if depth > maxWalk {
			w.fail(fmt.Errorf("%w: expression nested more than %d deep", ErrLimit, maxWalk))
		}
		return true
	})
}

// snippet is the source text of n, cut to limit bytes if limit > 0.
func (w *walker) snippet(c ctx, n syntax.Node, limit int) string {
	p, e := n.Pos(), n.End()
	if !p.IsValid() || !e.IsValid() {
		return ""
	}
	i, j := int(p.Offset()), int(e.Offset())
	if i < 0 || j > len(c.src) || i > j {
		return ""
	}
	s := c.src[i:j]
	if limit > 0 && len(s) > limit {
		s = s[:limit] + "…"
	}
	return s
}

func wrapSyntax(what string, err error) error {
	return fmt.Errorf("%w: in the %s: %v", ErrSyntax, what, err)
}

func joinReason(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
