package policy

import (
	"strings"
	"testing"
)

// Issue 18, item 1: expansions in arguments do not make a command
// unknowable; only a dynamic command word (or a wrapper's dynamic target)
// does. Global options of git and wrapper programs are normalized before
// matching.

func TestExecDynamicArgs(t *testing.T) {
	denyCurl := mustCompile(t, tctx, layerFile(t, User, "", nil, nil, []string{"Exec(curl *)"}))
	askPush := mustCompile(t, tctx, layerFile(t, User, "", nil, []string{"Exec(git push*)"}, nil))
	ordinary := []string{
		`echo $HOME`,
		`ls "$TMPDIR"`,
		`for f in a b; do echo $f; done`,
		`x=$(ls)`,
		`x=$(ls); echo "$x"`,
		`cd "$(dirname "$0")" && ls`,
		`echo ${HOME:-/tmp}/x`,
		`printf '%s\n' "$@"`,
		`ls *.go`,
		`echo ~/x`,
		`export PATH="$HOME/bin:$PATH"`,
		`git status --short "$d"`,
		`git log -n $((1+2))`,
		`timeout 5 echo $HOME`,
		`env -i FOO="$x" echo $HOME`,
		`nice -n 5 ls "$d"`,
		`sh -c 'echo $HOME'`,
		`find . -name '*.go' -exec grep -l x {} +`,
		`echo x | xargs echo`,
		`FOO=$(date) make`,
	}
	for _, s := range ordinary {
		for _, e := range []*Effective{denyCurl, askPush} {
			if d := e.Decide(ExecShell(s)); d.Effect != Allow {
				t.Errorf("%q: %s (%s); want allow", s, d.Effect, d.Reason)
			}
		}
	}
	checkDecisions(t, denyCurl, []dcase{
		{ExecShell(`curl $URL`), Deny, "deny Exec(curl *)", ""},
		{ExecShell(`curl "$URL" -o x`), Deny, "deny Exec(curl *)", ""},
		{ExecShell(`x=$(curl -s example.com)`), Deny, "deny Exec(curl *)", "matches deny Exec(curl *)"},
		{ExecShell(`echo $(curl example.com)`), Deny, "deny Exec(curl *)", ""},
		{ExecShell(`for u in a b; do curl $u; done`), Deny, "deny Exec(curl *)", ""},
		{ExecShell(`/usr/bin/curl "$u"`), Deny, "deny Exec(curl *)", ""},
	})
}

func TestExecNormalizedWrappers(t *testing.T) {
	e := mustCompile(t, tctx, layerFile(t, User, "", nil, []string{"Exec(git push*)"}, []string{"Exec(curl *)"}))
	for _, s := range []string{
		`git push`,
		`git -C . push`,
		`git -C /ws/sub push origin main`,
		`git -c x=y push`,
		`git -c user.name=x -c core.pager=cat push --force`,
		`git --git-dir=.git push`,
		`git --git-dir .git --work-tree . push`,
		`git --work-tree=. push`,
		`git --no-pager push`,
		`git -P push`,
		`git --bare push`,
		`git --namespace=x push`,
		`git --literal-pathspecs --no-optional-locks push`,
		`git -C "$d" push`,
		`git --git-dir="$GIT_DIR" push`,
		`/usr/bin/git -C . push`,
		`nice -n 5 git push`,
		`nice git -C . push`,
		`timeout 5 git push`,
		`timeout -s KILL 5m git push`,
		`env -i git push`,
		`env -i -u HOME A=1 git -C . push`,
		`xargs git push`,
		`echo x | xargs -0 git push`,
		`command git push`,
		`exec git push`,
		`nohup git push`,
		`stdbuf -oL git push`,
		`time git push`,
		`setsid git push`,
		`ionice -c 3 git push`,
		`sudo -u root git -C . push`,
		`nice -n 5 timeout 5 env -i git -C . push`,
		`bash -c 'git -C . push'`,
		`sh -c "git -C . push"`,
		`git -C . push "$remote" "$branch"`,
	} {
		d := e.Decide(ExecShell(s))
		if d.Effect != Ask || d.Rule == nil || d.Rule.String() != "ask Exec(git push*)" {
			t.Errorf("%q: %s (%s); want ask by Exec(git push*)", s, d.Effect, d.Reason)
		}
	}
	for _, argv := range [][]string{
		{"git", "-C", ".", "push"},
		{"git", "--git-dir=.git", "push"},
		{"nice", "-n", "5", "git", "-c", "a=b", "push"},
	} {
		if d := e.Decide(ExecArgv(argv...)); d.Effect != Ask {
			t.Errorf("%q: %s (%s); want ask", argv, d.Effect, d.Reason)
		}
	}
	// Not git push: allowed.
	for _, s := range []string{
		`git -C push status`, // push is -C's directory
		`git -c push=x status`,
		`git --git-dir push log`,
		`git status`,
		`git -C . log -- push`,
		`nice -n 5 git status`,
		`git -C "$d" status "$x"`,
		`echo git push`,
		`timeout 5 echo git -C . push`,
	} {
		if d := e.Decide(ExecShell(s)); d.Effect != Allow {
			t.Errorf("%q: %s (%s); want allow", s, d.Effect, d.Reason)
		}
	}
}

func TestExecUnknowable(t *testing.T) {
	e := mustCompile(t, tctx, layerFile(t, User, "", nil, []string{"Exec(git push*)"}, []string{"Exec(curl *)"}))
	checkDecisions(t, e, []dcase{
		// The command word is dynamic: the strictest Exec rule of the policy.
		{ExecShell(`$c push`), Deny, "deny Exec(curl *)", "the command word is only known at run time (`$c`)"},
		{ExecShell(`"$(which curl)" x`), Deny, "deny Exec(curl *)", "the command word is only known at run time"},
		{ExecShell(`eval "$s"`), Deny, "deny Exec(curl *)", "eval"},
		{ExecShell(`sh -c "$s"`), Deny, "deny Exec(curl *)", "the sh -c string could not be known for sure"},
		{ExecShell(`nice $cmd`), Deny, "deny Exec(curl *)", ""},
		{ExecShell(`env -i $cmd`), Deny, "deny Exec(curl *)", ""},
		{ExecShell(`env -i FOO=$x echo`), Deny, "deny Exec(curl *)", "the arguments of env before the command"},
		{ExecShell(`bash -c "echo $x"`), Deny, "deny Exec(curl *)", "the bash -c string could not be known for sure"},
		{ExecShell(`busybox $x`), Deny, "deny Exec(curl *)", ""},
		{ExecShell(`find $d -name x`), Deny, "deny Exec(curl *)", "may hold an -exec"},
		{ExecShell(`sudo $c`), Deny, "deny Exec(curl *)", ""},
		{ExecShell(`f() { echo; }; f`), Deny, "deny Exec(curl *)", "function"},
		{ExecShell(`timeout $t git push`), Deny, "deny Exec(curl *)", "the arguments of timeout before the command"},
		{ExecShell(`echo x | xargs $c`), Deny, "deny Exec(curl *)", ""},
		{ExecShell(`find . -exec {} \;`), Deny, "deny Exec(curl *)", ""},
		// A dynamic argument where the rule needs to decide: the rules that
		// could match.
		{ExecShell(`git $sub`), Ask, "ask Exec(git push*)", "argument 1 of `git` is only known at run time (`$sub`)"},
		{ExecShell(`git $sub`), Ask, "ask Exec(git push*)", "ask Exec(git push*) could match"},
		{ExecShell(`git "$@"`), Ask, "ask Exec(git push*)", ""},
		{ExecShell(`git -C . $sub origin`), Ask, "ask Exec(git push*)", ""},
		{ExecShell(`git $opt push`), Ask, "ask Exec(git push*)", ""},
		{ExecShell(`echo x | xargs git`), Ask, "ask Exec(git push*)", "xargs"},
		// A git alias defined on the command line.
		{ExecShell(`git -c alias.p=push p`), Ask, "ask Exec(git push*)", "alias"},
		{ExecShell(`git -c alias.p='!curl x' p`), Deny, "deny Exec(curl *)", "Exec `curl x` matches"},
		{ExecShell(`git -c alias.p='!curl x' p`), Deny, "deny Exec(curl *)", ""},
		{ExecShell(`git -c "$k" push`), Ask, "ask Exec(git push*)", ""},
		{ExecShell(`git --config-env=alias.p=V p`), Deny, "deny Exec(curl *)", "alias"},
		// Unparsable.
		{ExecShell(`echo 'x`), Deny, "deny Exec(curl *)", "does not parse"},
	})
	if d := e.Decide(ExecShell(`git $sub`)); d.Command != "git $sub" {
		t.Errorf("git $sub: Command %q", d.Command)
	}
	if d := e.Decide(ExecShell(`$c push`)); d.Command != "$c push" || !strings.Contains(d.Reason, "Exec `$c push` cannot be known before it runs") {
		t.Errorf("$c push: Command %q, reason %q", d.Command, d.Reason)
	}
	// A dynamic argument that no rule can care about.
	checkDecisions(t, e, []dcase{
		{ExecShell(`ls $x`), Allow, "profile untrusted: default", ""},
		{ExecShell(`git -c alias.st=status st`), Ask, "ask Exec(git push*)", ""},
	})
}

func TestExecCouldMatch(t *testing.T) {
	for _, c := range []struct {
		pat, m string
		want   bool
	}{
		{"git push*", "git\x00", true},
		{"git push*", "git status\x00", false},
		{"git push*", "git\x00 push", true},
		{"git push", "git\x00 push", true},  // the dynamic word is empty
		{"git push", "git\x00 pull", false}, // pull stays last
		{"git", "git\x00", true},
		{"gitk", "git\x00", false},
		{"git push --force", "git push\x00", true},
		{"git push --force", "git push\x00 origin", false},
		{"git * --force", "git\x00 origin", false},
		{"git * --force", "git\x00", true},
		{"curl *", "echo\x00", false},
		{"*", "echo\x00", true},
		{"rm -rf /*", "rm\x00", true},
		{"rm -rf /*", "rm -f\x00", false},
		{"a b c", "a\x00\x00 c", true},
		{"a c", "a\x00\x00 c", true},
		{"ac", "a\x00 c", false},
		{"npm run *", "npm\x00 build", true},
	} {
		p, err := compileExec(c.pat)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.couldMatch(c.m); got != c.want {
			t.Errorf("Exec(%s).couldMatch(%q) = %v", c.pat, c.m, got)
		}
	}
	text, m := render([]string{"git", "-C", "x  ", "push"}, []string{"", "", "$d", ""}, false, true)
	if text != "git -C $d push" || m != "git -C\x00 push\x00" {
		t.Errorf("render: %q %q", text, m)
	}
}
