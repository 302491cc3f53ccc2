package shell

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// want is one expected command: its Args and whether it is Uncertain.
type want struct {
	args      []string
	uncertain bool
}

// c is a certain command, u an Uncertain one.
func c(args ...string) want { return want{args: args} }
func u(args ...string) want { return want{args: args, uncertain: true} }

var commandTests = []struct {
	name   string
	script string
	want   []want
}{
	// Lists, pipelines and compound commands.
	{"empty", "", nil},
	{"whitespace only", " \t\n\n  ", nil},
	{"comment only", "# git push", nil},
	{"trailing comment", "git push # and more", []want{c("git", "push")}},
	{"simple", "git push origin main", []want{c("git", "push", "origin", "main")}},
	{"and or pipe", "npm test && git push origin main | tee log || echo failed",
		[]want{c("npm", "test"), c("git", "push", "origin", "main"), c("tee", "log"), c("echo", "failed")}},
	{"semicolons and newlines", "cd x; make\ngit push", []want{c("cd", "x"), c("make"), c("git", "push")}},
	{"background", "nohup git push &", []want{c("nohup", "git", "push"), c("git", "push")}},
	// git's global options are skipped to find the subcommand.
	{"git -C", "git -C . push", []want{c("git", "-C", ".", "push"), c("git", "push")}},
	{"git options", "/usr/bin/git -c a=b --git-dir=.git --work-tree . --no-pager -P --bare push -f",
		[]want{c("/usr/bin/git", "-c", "a=b", "--git-dir=.git", "--work-tree", ".", "--no-pager", "-P", "--bare", "push", "-f"),
			c("/usr/bin/git", "push", "-f")}},
	{"git -C dynamic", `git -C "$d" push`, []want{u("git", "-C", "", "push"), c("git", "push")}},
	{"git dynamic option", `git $o push`, []want{u("git", "", "push"), u("git", "")}},
	{"git alias", "git -c alias.p=push p", []want{c("git", "-c", "alias.p=push", "p"), u("git", "")}},
	{"git shell alias", "git -c 'alias.p=!curl x' p", []want{c("git", "-c", "alias.p=!curl x", "p"), u("git", ""), c("curl", "x")}},
	{"git alias of a builtin", "git -c alias.push=status push", []want{c("git", "-c", "alias.push=status", "push"), c("git", "push")}},
	{"wrappers and git", "nice -n 5 timeout 5 git -C . push",
		[]want{c("nice", "-n", "5", "timeout", "5", "git", "-C", ".", "push"), c("timeout", "5", "git", "-C", ".", "push"),
			c("git", "-C", ".", "push"), c("git", "push")}},
	{"chrt taskset", "chrt -f 10 taskset -c 0 git push", []want{c("chrt", "-f", "10", "taskset", "-c", "0", "git", "push"),
		c("taskset", "-c", "0", "git", "push"), c("git", "push")}},
	{"flock", "flock /tmp/l git push; flock -w 1 /tmp/l -c 'git pull'", []want{c("flock", "/tmp/l", "git", "push"),
		c("git", "push"), c("flock", "-w", "1", "/tmp/l", "-c", "git pull"), c("git", "pull")}},
	{"background list", "sleep 1 & git push & wait", []want{c("sleep", "1"), c("git", "push"), c("wait")}},
	{"pipe stderr", "make |& tee log", []want{c("make"), c("tee", "log")}},
	{"negation", "! git push", []want{c("git", "push")}},
	{"subshell", "(cd x && git push)", []want{c("cd", "x"), c("git", "push")}},
	{"group", "{ git add .; git push; } > log 2>&1", []want{c("git", "add", "."), c("git", "push")}},
	{"if elif else", "if test -f x; then git push; elif true; then :; else rm -f y; fi",
		[]want{c("test", "-f", "x"), c("git", "push"), c("true"), c(":"), c("rm", "-f", "y")}},
	{"for", "for f in a b; do git add \"$f\"; done", []want{u("git", "add", "")}},
	{"for over substitution", "for f in $(ls); do rm $f; done", []want{c("ls"), u("rm", "")}},
	{"c-style for", "for ((i=0;i<3;i++)); do git push; done", []want{c("git", "push")}},
	{"while", "while read -r l; do echo \"$l\"; done < in", []want{c("read", "-r", "l"), u("echo", "")}},
	{"until", "until git push; do sleep 1; done", []want{c("git", "push"), c("sleep", "1")}},
	{"case", "case $1 in push) git push;; *) echo no;; esac", []want{c("git", "push"), c("echo", "no")}},
	{"select", "select x in a b; do git push; done", []want{c("git", "push")}},
	{"function body and call", "deploy() { git push; }; deploy",
		[]want{c("git", "push"), u("deploy")}},
	{"function keyword", "function g { git push \"$@\"; }", []want{u("git", "push", "")}},
	{"function shadowing a program", "git() { echo no; }; git push",
		[]want{c("echo", "no"), u("git", "push")}},
	{"coproc", "coproc git push", []want{c("git", "push")}},
	{"line continuation", "git \\\n  push \\\n  origin", []want{c("git", "push", "origin")}},
	{"crlf-free multi-line", "set -e\ngo build ./...\ngo test ./...",
		[]want{c("set", "-e"), c("go", "build", "./..."), c("go", "test", "./...")}},

	// Quoting.
	{"backslash in name", `g\it push`, []want{c("git", "push")}},
	{"quoted words", `'git' "push"`, []want{c("git", "push")}},
	{"empty quotes inside", `gi""t pu''sh`, []want{c("git", "push")}},
	{"double-quote escapes", `echo "a\"b\$c\\d\e"`, []want{c("echo", `a"b$c\d\e`)}},
	{"single quotes keep all", `echo 'a\b $x "y"'`, []want{c("echo", `a\b $x "y"`)}},
	{"ansi-c quoting", `$'\x67it' $'pu\163h'`, []want{c("git", "push")}},
	{"locale quoting", `echo $"hi"`, []want{c("echo", "hi")}},
	{"quoted glob is literal", `rm '*' "?" \[a]`, []want{c("rm", "*", "?", "[a]")}},
	{"assignments dropped", "GIT_DIR=x FOO=$(id) git push", []want{c("id"), c("git", "push")}},
	{"assignment only", "x=$(git push)", []want{c("git", "push")}},
	{"redirections are not words", "git push >out 2>&1 </dev/null 3>>log", []want{c("git", "push")}},
	{"redirection with substitution", "echo hi > $(date +%s).log", []want{c("date", "+%s"), c("echo", "hi")}},

	// Expansions make words Uncertain.
	{"parameter program", "$GIT push", []want{u("", "push")}},
	{"braced parameter", "git push ${REMOTE:-origin}", []want{u("git", "push", "")}},
	{"parameter inside a word", "git pu${X}sh", []want{u("git", "push")}},
	{"arithmetic", "echo $((1+2))", []want{u("echo", "")}},
	{"command substitution", "echo $(git push)", []want{c("git", "push"), u("echo", "")}},
	{"backticks", "echo `date` x", []want{c("date"), u("echo", "", "x")}},
	{"nested substitutions", `echo "$(echo "$(git push)")"`,
		[]want{c("git", "push"), u("echo", ""), u("echo", "")}},
	{"substitution in parameter default", "echo ${x:-$(git push)}", []want{c("git", "push"), u("echo", "")}},
	{"process substitution", "diff <(ls a) <(ls b)", []want{c("ls", "a"), c("ls", "b"), u("diff", "", "")}},
	{"process substitution as input", "while read l; do :; done < <(git push)",
		[]want{c("git", "push"), c("read", "l"), c(":")}},
	{"glob star", "rm *.o", []want{u("rm", "*.o")}},
	{"glob question", "ls a?c", []want{u("ls", "a?c")}},
	{"glob bracket", "ls a[bc]", []want{u("ls", "a[bc]")}},
	{"lone brackets are not globs", "[ -f x ] && git push", []want{c("[", "-f", "x", "]"), c("git", "push")}},
	{"brace expansion", "touch a{1,2}", []want{u("touch", "a{1,2}")}},
	{"braces that do not expand", "find . -name x {} HEAD@{1}", []want{c("find", ".", "-name", "x", "{}", "HEAD@{1}")}},
	{"plain tilde", "cd ~ && ls ~/src", []want{c("cd", "~"), c("ls", "~/src")}},
	{"tilde user", "ls ~root", []want{u("ls", "~root")}},
	{"tilde in assignment-like word", "make PREFIX=~/x", []want{u("make", "PREFIX=~/x")}},
	{"quoted tilde", `ls "~root" ~"root"`, []want{c("ls", "~root", "~root")}},
	{"extended glob", "ls @(a|b)", []want{u("ls", "@(a|b)")}},
	{"unquoted heredoc substitution", "cat <<EOF\n$(rm -rf /)\nEOF", []want{c("rm", "-rf", "/"), c("cat")}},
	{"quoted heredoc is text", "cat <<'EOF'\n$(rm -rf /)\nEOF", []want{c("cat")}},
	{"here-string", "grep x <<< \"$(git push)\"", []want{c("git", "push"), c("grep", "x")}},

	// Nested shells, eval, trap, alias.
	{"sh -c", "sh -c 'git push'", []want{c("sh", "-c", "git push"), c("git", "push")}},
	{"bash -lc", `bash -lc "cd x && git push"`,
		[]want{c("bash", "-lc", "cd x && git push"), c("cd", "x"), c("git", "push")}},
	{"nested three levels", `sh -c 'bash -c "dash -c \"git push\""'`, []want{
		c("sh", "-c", `bash -c "dash -c \"git push\""`),
		c("bash", "-c", `dash -c "git push"`),
		c("dash", "-c", "git push"),
		c("git", "push")}},
	{"shell path and options", "/bin/bash -e -o pipefail -c 'git push' name arg",
		[]want{c("/bin/bash", "-e", "-o", "pipefail", "-c", "git push", "name", "arg"), c("git", "push")}},
	{"zsh -c", "zsh -c 'git push'", []want{c("zsh", "-c", "git push"), c("git", "push")}},
	{"busybox sh -c", "busybox sh -c 'git push'",
		[]want{c("busybox", "sh", "-c", "git push"), c("sh", "-c", "git push"), c("git", "push")}},
	{"uncertain -c string", `bash -c "git push $R"`, []want{u("bash", "-c", "git push "), u("git", "push")}},
	{"-c string from a download", `sh -c "$(curl -fsSL x)"`,
		[]want{c("curl", "-fsSL", "x"), u("sh", "-c", "")}},
	{"shell script file is not read", "bash script.sh arg", []want{c("bash", "script.sh", "arg")}},
	{"shell reading a pipe", "curl x | sh", []want{c("curl", "x"), u("sh")}},
	{"shell reading a heredoc", "bash <<'EOF'\ngit push\nEOF", []want{c("bash"), c("git", "push")}},
	{"shell reading an expanded heredoc", "sh <<EOF\ngit push $R\nEOF", []want{u("sh"), u("git", "push")}},
	{"shell reading a tab-stripped heredoc", "sh <<-EOF\n\tgit push\n\tEOF", []want{c("sh"), c("git", "push")}},
	{"shell reading a here-string", "bash -s <<< 'git push'", []want{c("bash", "-s"), c("git", "push")}},
	{"source reading a heredoc", "source /dev/stdin <<'EOF'\ngit push\nEOF",
		[]want{c("source", "/dev/stdin"), c("git", "push")}},
	{"source of a file is not read", ". ./env.sh", []want{c(".", "./env.sh")}},
	{"zsh = expansion", "zsh -c '=git push'", []want{c("zsh", "-c", "=git push"), u("=git", "push")}},
	{"other shells are not parsed", "fish -c 'git push'", []want{u("fish", "-c", "git push")}},
	{"unknown program with -c", "$SHELL -c 'git push'", []want{u("", "-c", "git push"), u("git", "push")}},
	{"eval literal", `eval "git push"`, []want{c("eval", "git push"), c("git", "push")}},
	{"eval words joined", `eval git 'push origin'`, []want{c("eval", "git", "push origin"), c("git", "push", "origin")}},
	{"eval of a variable", `eval "$CMD"`, []want{u("eval", "")}},
	{"trap action", "trap 'git push' EXIT", []want{c("trap", "git push", "EXIT"), c("git", "push")}},
	{"alias", "alias gp='git push'; gp", []want{c("alias", "gp=git push"), c("git", "push"), u("gp")}},

	// Wrappers.
	{"env", "env -i FOO=1 git push", []want{c("env", "-i", "FOO=1", "git", "push"), c("git", "push")}},
	{"env options", "env -u HOME --chdir=/tmp -- git push",
		[]want{c("env", "-u", "HOME", "--chdir=/tmp", "--", "git", "push"), c("git", "push")}},
	{"env -S", "/usr/bin/env -S 'git push' origin",
		[]want{c("/usr/bin/env", "-S", "git push", "origin"), c("git", "push", "origin")}},
	{"command", "command git push", []want{c("command", "git", "push"), c("git", "push")}},
	{"command -v runs nothing", "command -v git", []want{c("command", "-v", "git")}},
	{"exec", "exec -a name git push", []want{c("exec", "-a", "name", "git", "push"), c("git", "push")}},
	{"builtin", "builtin echo hi", []want{c("builtin", "echo", "hi"), c("echo", "hi")}},
	{"nice and ionice", "nice -n 5 ionice -c2 -n7 git push", []want{
		c("nice", "-n", "5", "ionice", "-c2", "-n7", "git", "push"),
		c("ionice", "-c2", "-n7", "git", "push"),
		c("git", "push")}},
	{"nice legacy", "nice -10 git push", []want{c("nice", "-10", "git", "push"), c("git", "push")}},
	{"timeout", "timeout -s KILL 5 git push", []want{c("timeout", "-s", "KILL", "5", "git", "push"), c("git", "push")}},
	{"timeout long options", "timeout --kill-after=1 --sig KILL 5s git push",
		[]want{c("timeout", "--kill-after=1", "--sig", "KILL", "5s", "git", "push"), c("git", "push")}},
	{"timeout unknown option", "timeout --bogus 5 git push",
		[]want{c("timeout", "--bogus", "5", "git", "push"), u("git", "push")}},
	{"time keyword", "time git push", []want{c("time", "git", "push"), c("git", "push")}},
	{"time program", "/usr/bin/time -f %e git push", []want{c("/usr/bin/time", "-f", "%e", "git", "push"), c("git", "push")}},
	{"stdbuf and setsid", "stdbuf -oL setsid -f git push",
		[]want{c("stdbuf", "-oL", "setsid", "-f", "git", "push"), c("setsid", "-f", "git", "push"), c("git", "push")}},
	{"sudo", "sudo -u x git push", []want{c("sudo", "-u", "x", "git", "push"), c("git", "push")}},
	{"sudo env and assignment", "sudo -E HOME=/x git push", []want{c("sudo", "-E", "HOME=/x", "git", "push"), c("git", "push")}},
	{"sudo with uncertain options", "sudo $FLAGS git push", []want{u("sudo", "", "git", "push"), u("", "git", "push")}},
	{"sudo -l runs nothing", "sudo -l", []want{c("sudo", "-l")}},
	{"sudo shell reading a heredoc", "sudo -s <<EOF\ngit push\nEOF", []want{c("sudo", "-s"), c("git", "push")}},
	{"doas", "doas -u root git push", []want{c("doas", "-u", "root", "git", "push"), c("git", "push")}},
	{"su -c", "su - bob -c 'git push'", []want{c("su", "-", "bob", "-c", "git push"), c("git", "push")}},
	{"xargs", "xargs git push", []want{c("xargs", "git", "push"), u("git", "push")}},
	{"xargs default echo", "xargs -0", []want{c("xargs", "-0"), u("echo")}},
	{"xargs -I with sh -c", "xargs -I{} sh -c 'echo {}'",
		[]want{c("xargs", "-I{}", "sh", "-c", "echo {}"), u("sh", "-c", "echo {}"), u("echo", "{}")}},
	{"find -exec", `find . -exec rm {} \;`, []want{c("find", ".", "-exec", "rm", "{}", ";"), u("rm", "{}")}},
	{"find -execdir +", "find . -name '*.go' -execdir gofmt -l {} +",
		[]want{c("find", ".", "-name", "*.go", "-execdir", "gofmt", "-l", "{}", "+"), u("gofmt", "-l", "{}")}},
	{"wrapper chain", "sudo env X=1 nohup git push", []want{
		c("sudo", "env", "X=1", "nohup", "git", "push"),
		c("env", "X=1", "nohup", "git", "push"),
		c("nohup", "git", "push"),
		c("git", "push")}},

	// Where sh (dash) reads the text differently from bash.
	{"(( as sh reads it", "((reboot))", []want{u("reboot")}},
	{"[[ as sh reads it", "[[ -f x || reboot ]]", []want{u("reboot", "]]")}},
	{"[[ alone", "[[ -n $x ]] && git push", []want{c("git", "push")}},
	{"!( is a negated subshell", "!(git push)", []want{u("!(git push)"), c("git", "push")}},
	{"(( in bash -c is arithmetic", "bash -c '((x++))'", []want{c("bash", "-c", "((x++))")}},

	// Declarations.
	{"export", "export X=$(id) Y=1", []want{c("id"), u("export", "X=", "Y=1")}},
	{"local", "f() { local a=1; }", []want{c("local", "a=1")}},
	{"let", "let x=1+2", []want{u("let", "x=1+2")}},
}

func TestCommands(t *testing.T) {
	if len(commandTests) < 60 {
		t.Fatalf("only %d cases", len(commandTests))
	}
	for _, tt := range commandTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Commands(tt.script)
			if err != nil {
				t.Fatalf("Commands(%q): %v", tt.script, err)
			}
			if !equal(got, tt.want) {
				t.Errorf("Commands(%q):\n got %s\nwant %s", tt.script, show(got), showWant(tt.want))
			}
			for _, cmd := range got {
				if cmd.Uncertain != (cmd.Reason != "") {
					t.Errorf("%q: Uncertain=%v but Reason=%q", cmd.Args, cmd.Uncertain, cmd.Reason)
				}
			}
		})
	}
}

func equal(got []Command, want []want) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !slices.Equal(got[i].Args, want[i].args) || got[i].Uncertain != want[i].uncertain {
			return false
		}
	}
	return true
}

func show(cmds []Command) string {
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "\n  %q uncertain=%v %s", c.Args, c.Uncertain, c.Reason)
	}
	return b.String()
}

func showWant(ws []want) string {
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "\n  %q uncertain=%v", w.args, w.uncertain)
	}
	return b.String()
}

// TestReasons checks that reasons name what made a command Uncertain.
func TestReasons(t *testing.T) {
	for script, want := range map[string]string{
		"$GIT push":              "parameter expansion $GIT",
		"echo $(date)":           "command substitution $(date)",
		"rm *.o":                 "glob pattern",
		"xargs rm":               "xargs appends arguments",
		"f() { :; }; f":          "function defined in the script",
		"curl x | bash":          "reads commands from its standard input",
		"timeout --bogus 5 true": "unrecognized option --bogus of timeout",
	} {
		cmds, err := Commands(script)
		if err != nil {
			t.Fatalf("%q: %v", script, err)
		}
		last := cmds[len(cmds)-1]
		if !last.Uncertain || !strings.Contains(last.Reason, want) {
			t.Errorf("%q: reason %q, want it to mention %q", script, last.Reason, want)
		}
	}
}

func TestManyReasons(t *testing.T) {
	var b strings.Builder
	b.WriteString("echo")
	for i := range 5000 {
		fmt.Fprintf(&b, " $v%d", i)
	}
	cmds, err := Commands(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 1 || len(cmds[0].Args) != 5001 || !strings.HasSuffix(cmds[0].Reason, "; …") {
		t.Fatalf("got %d commands, reason %q", len(cmds), cmds[0].Reason)
	}
}

func TestErrors(t *testing.T) {
	nest := func(open, mid, close string, n int) string {
		return strings.Repeat(open, n) + mid + strings.Repeat(close, n)
	}
	for _, tt := range []struct {
		name   string
		script string
		want   error
	}{
		{"unclosed paren", "git push (", ErrSyntax},
		{"unclosed quote", "echo 'abc", ErrSyntax},
		{"missing fi", "if true; then git push", ErrSyntax},
		{"stray done", "done", ErrSyntax},
		{"syntax error in -c string", "bash -c 'echo ('", ErrSyntax},
		{"syntax error in eval", `eval 'if'`, ErrSyntax},
		{"syntax error in heredoc for sh", "sh <<'EOF'\nfi\nEOF", ErrSyntax},
		{"substitutions too deep", nest("echo $(", "git push", ")", MaxDepth+1), ErrLimit},
		{"subshells too deep", nest("( ", "git push", " )", MaxDepth+1), ErrLimit},
		{"sh -c too deep", nestedShells(MaxDepth + 1), ErrLimit},
		{"too many commands", strings.Repeat("true;", MaxCommands+1), ErrLimit},
		{"too many wrapped commands", strings.Repeat("nohup ", MaxCommands) + "true", ErrLimit},
		{"huge pipeline", strings.Repeat("a|", 60000) + "a", ErrLimit},
		{"too long", "echo " + strings.Repeat("a", MaxScriptBytes), ErrLimit},
		{"brackets too deep", nest("(", "a", ")", maxBrackets+1), ErrLimit},
		{"arithmetic too deep", "echo $((" + nest("(", "1", ")", 5000) + "))", ErrLimit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Commands(tt.script)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if got != nil {
				t.Errorf("got commands with an error: %v", got)
			}
		})
	}
}

// nestedShells is n shells each reading the next from a here-document.
func nestedShells(n int) string {
	s := "git push"
	for i := range n {
		s = fmt.Sprintf("sh <<'E%d'\n%s\nE%d", i, s, i)
	}
	return s
}

func TestLimitsAreGenerous(t *testing.T) {
	// Depth just within the limit, many commands just within it, a long
	// here-document: all fine.
	for _, script := range []string{
		nestedShells(MaxDepth - 1),
		strings.Repeat("true;", MaxCommands),
		"cat > f <<'EOF'\n" + strings.Repeat("some text (with [brackets]) {and} $(x)\n", 2000) + "EOF\n",
		"if a; then :; " + strings.Repeat("elif a; then :; ", 200) + "fi",
		strings.Repeat("a && ", 400) + "a",
	} {
		if _, err := Commands(script); err != nil {
			t.Errorf("Commands(%.40q…): %v", script, err)
		}
	}
}

func TestNormalize(t *testing.T) {
	for _, tt := range []struct{ in, want []string }{
		{nil, nil},
		{[]string{}, []string{}},
		{[]string{"git", "push"}, []string{"git", "push"}},
		{[]string{"/usr/bin/git", "push"}, []string{"git", "push"}},
		{[]string{"./bin/../git"}, []string{"git"}},
		{[]string{"git/"}, []string{"git"}},
		{[]string{"/"}, []string{"/"}},
		{[]string{""}, []string{""}},
		{[]string{"/usr/bin/env", "/usr/bin/git"}, []string{"env", "/usr/bin/git"}},
	} {
		in := slices.Clone(tt.in)
		got := Normalize(tt.in)
		if !slices.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
			t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("Normalize modified its argument: %q", tt.in)
		}
	}
}

// benchScript is a realistic agent command of about 200 bytes.
const benchScript = `cd /workspace/app && npm ci --silent && npm test -- --runInBand 2>&1 | tee /tmp/test.log; ` +
	`if grep -q "FAIL" /tmp/test.log; then echo "tests failed: $(grep -c FAIL /tmp/test.log)"; exit 1; fi; git push origin main`

func BenchmarkCommands(b *testing.B) {
	b.SetBytes(int64(len(benchScript)))
	for b.Loop() {
		if _, err := Commands(benchScript); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzCommands(f *testing.F) {
	for _, tt := range commandTests {
		f.Add(tt.script)
	}
	f.Fuzz(func(t *testing.T, script string) {
		// A hang must be reported with its input: crash the worker.
		hang := time.AfterFunc(10*time.Second, func() {
			panic(fmt.Sprintf("Commands(%q) did not return in 10s", script))
		})
		defer hang.Stop()
		cmds, err := Commands(script)
		if errors.Is(err, errInternal) {
			t.Fatalf("Commands(%q): %v", script, err)
		}
		if err != nil {
			if cmds != nil {
				t.Fatalf("Commands(%q) returned commands with an error", script)
			}
			return
		}
		if len(cmds) > MaxCommands {
			t.Fatalf("Commands(%q): %d commands", script, len(cmds))
		}
		for _, cmd := range cmds {
			if len(cmd.Args) == 0 {
				t.Fatalf("Commands(%q): a command without words", script)
			}
			if cmd.Uncertain != (cmd.Reason != "") {
				t.Fatalf("Commands(%q): %q Uncertain=%v Reason=%q", script, cmd.Args, cmd.Uncertain, cmd.Reason)
			}
			if cmd.Dynamic != nil && len(cmd.Dynamic) != len(cmd.Args) || cmd.Dynamic != nil && cmd.Dynamic[0] != "" && !cmd.Unknowable {
				t.Fatalf("Commands(%q): %q Dynamic=%q Unknowable=%v", script, cmd.Args, cmd.Dynamic, cmd.Unknowable)
			}
			if (cmd.Dynamic != nil || cmd.Unknowable || cmd.Open || cmd.Appends) && !cmd.Uncertain {
				t.Fatalf("Commands(%q): %+v is not Uncertain", script, cmd)
			}
			Normalize(cmd.Args)
			checkNormalized(t, script, cmd)
		}
	})
}

// checkNormalized: unwrapping a known command (a wrapper's options, git's
// global options) never turns it into a different command: what is found
// in it is certain only when it is one of its words followed by a suffix
// of its words (`nice -n 5 git -C . push` → `git -C . push`, `git push`).
func checkNormalized(t *testing.T, script string, cmd Command) {
	if cmd.Uncertain || len(cmd.Args) > 40 {
		return
	}
	for _, a := range cmd.Args {
		if !utf8.ValidString(a) {
			return // not something the parser reads again
		}
		b := BaseName(a)
		if _, ok := shells[b]; ok || otherShells[b] || strings.HasPrefix(a, "-") && strings.ContainsRune(a, 'S') ||
			strings.ContainsAny(a, "!\x00") || slices.Contains([]string{"eval", "find", "busybox", "su", "trap", "alias",
			"flock", "xargs", "source", ".", "split-string"}, b) {
			return // command strings, or words split again
		}
	}
	q := make([]string, len(cmd.Args))
	for i, a := range cmd.Args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	again, err := Commands(strings.Join(q, " "))
	if err != nil || len(again) == 0 || !slices.Equal(again[0].Args, cmd.Args) {
		t.Fatalf("Commands(%q): %q read again: %v %v", script, cmd.Args, again, err)
	}
	for _, d := range again[1:] {
		if d.Uncertain {
			continue
		}
		ok := false
		for k := 0; k < len(cmd.Args) && !ok; k++ {
			for j := k + 1; j <= len(cmd.Args) && !ok; j++ {
				ok = d.Args[0] == cmd.Args[k] && slices.Equal(d.Args[1:], cmd.Args[j:])
			}
		}
		if !ok {
			t.Fatalf("Commands(%q): %q unwraps to %q, not one of its words and a suffix", script, cmd.Args, d.Args)
		}
	}
}

// TestCommandFields: which words are dynamic, and how a command is
// uncertain.
func TestCommandFields(t *testing.T) {
	type f struct {
		args       []string
		dyn        []string
		unknowable bool
		appends    bool
		open       bool
	}
	for _, tt := range []struct {
		script string
		want   []f
	}{
		{`echo $HOME`, []f{{args: []string{"echo", ""}, dyn: []string{"", "$HOME"}}}},
		{`ls "$TMPDIR"/x *.go`, []f{{args: []string{"ls", "/x", "*.go"}, dyn: []string{"", `"$TMPDIR"/x`, "*.go"}}}},
		{`x=$(ls)`, []f{{args: []string{"ls"}}}},
		{`$c push`, []f{{args: []string{"", "push"}, dyn: []string{"$c", ""}, unknowable: true}}},
		{`sh -c "$s"`, []f{{args: []string{"sh", "-c", ""}, dyn: []string{"", "", `"$s"`}, unknowable: true}}},
		{`eval "$s"`, []f{{args: []string{"eval", ""}, dyn: []string{"", `"$s"`}, unknowable: true}}},
		{`timeout "$t" ls`, []f{{args: []string{"timeout", "", "ls"}, dyn: []string{"", `"$t"`, ""}},
			{args: []string{"ls"}, unknowable: true}}},
		{`nice -n "$n" ls`, []f{{args: []string{"nice", "-n", "", "ls"}, dyn: []string{"", "", `"$n"`, ""}}, {args: []string{"ls"}}}},
		{`nice -n $n ls`, []f{{args: []string{"nice", "-n", "", "ls"}, dyn: []string{"", "", `$n`, ""}},
			{args: []string{"ls"}, unknowable: true}}},
		{`env A="$x" ls`, []f{{args: []string{"env", "A=", "ls"}, dyn: []string{"", `A="$x"`, ""}}, {args: []string{"ls"}}}},
		{`env A=$x ls`, []f{{args: []string{"env", "A=", "ls"}, dyn: []string{"", `A=$x`, ""}}, {args: []string{"ls"}, unknowable: true}}},
		{`xargs nice git`, []f{{args: []string{"xargs", "nice", "git"}}, {args: []string{"nice", "git"}, appends: true},
			{args: []string{"git"}, appends: true}}},
		{`find . -exec rm {} \;`, []f{{args: []string{"find", ".", "-exec", "rm", "{}", ";"}}, {args: []string{"rm", "{}"}, dyn: []string{"", "{}"}}}},
		{`curl x | sh`, []f{{args: []string{"curl", "x"}}, {args: []string{"sh"}, open: true}}},
		{`f() { :; }; f`, []f{{args: []string{":"}}, {args: []string{"f"}, unknowable: true}}},
	} {
		cmds, err := Commands(tt.script)
		if err != nil {
			t.Fatalf("%q: %v", tt.script, err)
		}
		var got []f
		for _, c := range cmds {
			got = append(got, f{c.Args, c.Dynamic, c.Unknowable, c.Appends, c.Open})
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tt.script, got, tt.want)
		}
	}
}
