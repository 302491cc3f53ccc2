package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy/shell"
)

type dcase struct {
	req    Request
	eff    Effect
	rule   string // substring of the deciding rule's String()
	reason string // substring of the reason ("" to skip)
}

func checkDecisions(t *testing.T, e *Effective, cases []dcase) {
	t.Helper()
	for _, c := range cases {
		d := e.Decide(c.req)
		if d.Effect != c.eff || d.Rule == nil || !strings.Contains(d.Rule.String(), c.rule) || !strings.Contains(d.Reason, c.reason) {
			rs := "<nil>"
			if d.Rule != nil {
				rs = d.Rule.String() + " [" + d.Rule.Source() + "]"
			}
			t.Errorf("%v: got %v by %s (%s); want %v by %q (%q)", c.req, d.Effect, rs, d.Reason, c.eff, c.rule, c.reason)
		}
	}
}

func TestUntrustedDefaults(t *testing.T) {
	e := mustCompile(t, tctx)
	if e.Profile() != Untrusted {
		t.Fatalf("profile %s", e.Profile())
	}
	checkDecisions(t, e, []dcase{
		{ReadPath("/ws/src/a.go"), Allow, "profile untrusted: default", "no rule matches"},
		{ReadPath("src/a.go"), Allow, "profile untrusted: default", "/ws/src/a.go"},
		{ReadPath("/usr/bin/git"), Allow, "default", ""},
		{ReadPath("/etc/passwd"), Allow, "default", ""},
		{ReadPath("/etc/shadow"), Deny, "builtin: credentials", "/etc/shadow"},
		{ReadPath("/home/u/notes"), Deny, "profile untrusted: reads only the workspace", ""},
		{ReadPath("~/notes"), Deny, "profile untrusted", "/home/u/notes"},
		{ReadPath("/opt/x"), Deny, "profile untrusted", ""},
		{ReadPath("/ws/.env"), Deny, "builtin: credential files are not readable: .env", ""},
		{ReadPath("/ws/certs/server.pem"), Deny, "*.pem", ""},
		{ReadPath("/ws/deploy_token"), Deny, "*_token", ""},
		{ReadPath("/usr/share/ca/root.pem"), Allow, "default", ""},
		{WritePath("/ws/.env"), Allow, "default", ""},
		{WritePath("/ws/a"), Allow, "default", ""},
		{WritePath("/tmp/x"), Deny, "profile untrusted: writes only the workspace", ""},
		{WritePath("/ws/../etc/passwd"), Deny, "profile untrusted", "/etc/passwd"},
		{WritePath("/ws/.git/hooks/pre-commit"), Deny, "builtin: .git is read-only", ""},
		{WritePath("/ws/.git/hooks"), Deny, ".git is read-only", ""},
		{WritePath("/ws/.git/config"), Deny, ".git is read-only", ""},
		{WritePath("/ws/.git/config.worktree"), Deny, ".git is read-only", ""},
		{WritePath("/ws/.git/commondir"), Deny, ".git is read-only", ""},
		{WritePath("/ws/.git/objects/info/alternates"), Deny, ".git is read-only", ""},
		{WritePath("/ws/.git/info/attributes"), Deny, ".git is read-only", ""},
		{WritePath("/ws/.git/modules/lib/config"), Deny, ".git is read-only", ""},
		{WritePath("/ws/.git/modules/lib/hooks/x"), Deny, ".git is read-only", ""},
		{WritePath("/ws/sub/.git/hooks/x"), Deny, ".git is read-only", ""},
		{WritePath("/ws/sub/.git"), Deny, ".git is read-only", ""},
		{WritePath("/ws/.git"), Deny, "builtin: .git is read-only", ""},
		{WritePath("/ws/.git/objects/ab/cdef"), Deny, ".git is read-only", ""},
		{WritePath("/ws/.git/index"), Deny, ".git is read-only", ""},
		{WritePath("/ws/.github/x"), Allow, "default", ""},
		{WritePath("/ws/.gitconfig"), Allow, "default", ""},
		{WritePath("/ws/.bashrc"), Deny, "builtin: shell rc files", ".bashrc"},
		{WritePath("/ws/sub/.zshenv"), Deny, "shell rc", ""},
		{WritePath("/ws/.profile"), Deny, "shell rc", ""},
		{ReadPath("/ws/.bashrc"), Allow, "default", ""},
		{WritePath("/ws/.moat/policy.toml"), Deny, "policy files are read-only", ""},
		{WritePath("/ws/.moat"), Deny, "policy files", ""},
		{WritePath("/ws/x/.moat/policy.toml"), Deny, ".moat/policy.toml is read-only", ""},
		{WritePath("/ws/x/.moat"), Deny, ".moat is read-only", ""},
		{WritePath("/ws/.moat/notes"), Allow, "default", ""},
		{WritePath("/ws"), Deny, "policy files", ""},
		{WritePath("/ws/"), Deny, "policy files", ""},
		{NetHost("github.com"), Deny, "not on the network allowlist", ""},
		{ExecShell("git status"), Allow, "profile untrusted: default", ""},
		{ExecArgv("ls", "-l"), Allow, "default", ""},
		{ReadPath(""), Deny, "invalid request", "empty path"},
		{ReadPath("/ws/a\x00b"), Deny, "invalid request", "NUL"},
		{NetHost("a b"), Deny, "invalid request", ""},
		{ExecShell("  "), Deny, "invalid request", "empty command"},
		{ExecArgv(), Deny, "invalid request", "empty argv"},
		{Request{Kind: Exec, Argv: []string{"a"}, Command: "b"}, Deny, "invalid", "not both"},
		{Request{Kind: 9}, Deny, "invalid", ""},
	})
	if d := e.Decide(ReadPath("")); !d.Invalid {
		t.Error("invalid request without Invalid")
	}
}

func TestTrusted(t *testing.T) {
	user := layerFile(t, User, Trusted,
		[]string{"Write(~/.cache/**)", "Write(~/**)", "Net(domain:*.github.com)", "Net(domain:pypi.org)", "Write(*.log)", "Write(/srv/data)"},
		nil,
		[]string{"Net(domain:evil.github.com)", "Read(~/private/**)"})
	call, err := ParseCall(CallRules{Allow: []string{"Write(/opt/**)", "Net(domain:example.com)"}})
	if err != nil {
		t.Fatal(err)
	}
	e := mustCompile(t, tctx, user, call)
	if e.Profile() != Trusted {
		t.Fatal(e.Profile())
	}
	checkDecisions(t, e, []dcase{
		{ReadPath("/home/u/notes"), Allow, "profile trusted: default", ""},
		{ReadPath("/opt/tool/bin"), Allow, "default", ""},
		{ReadPath("/home/u/.ssh/id_rsa"), Deny, "builtin: credentials are neither readable nor writable: ~/.ssh", ""},
		{ReadPath("/home/u/.ssh"), Deny, "~/.ssh", ""},
		{ReadPath("/home/u/.aws/credentials"), Deny, "~/.aws", ""},
		{ReadPath("/home/u/.config/gh/hosts.yml"), Deny, "~/.config/gh", ""},
		{ReadPath("/home/u/.netrc"), Deny, "~/.netrc", ""},
		{ReadPath("/home/u/.docker/config.json"), Deny, "~/.docker/config.json", ""},
		{ReadPath("/home/u/.docker/other"), Allow, "default", ""},
		{ReadPath("/home/u/.kube/config"), Deny, "~/.kube/config", ""},
		{ReadPath("/home/u/.git-credentials"), Deny, "", ""},
		{ReadPath("/home/u/proj/id_ed25519"), Deny, "id_ed25519*", ""},
		{ReadPath("/home/u/private/x"), Deny, "deny Read(~/private/**)", "user.toml"},
		{ReadPath("/proc/1/environ"), Deny, "profile trusted: host runtime directory /proc", ""},
		{ReadPath("/run/docker.sock"), Deny, "/run", ""},
		{ReadPath("/tmp/x"), Deny, "/tmp", ""},
		{ReadPath("/var/lib/moat/token"), Deny, "/var/lib/moat", ""},
		{ReadPath("/etc/ssh/ssh_host_ed25519_key"), Deny, "/etc/ssh/ssh_host_*", ""},
		{WritePath("/home/u/.cache/x"), Allow, "allow Write(~/.cache/**)", "user.toml:"},
		{WritePath("/home/u/notes"), Allow, "allow Write(~/**)", ""},
		{WritePath("/home/u/.ssh/authorized_keys"), Deny, "builtin: credentials", ""},
		{WritePath("/home/u/.bashrc"), Deny, "shell rc", ""},
		{WritePath("/home/u/.config/moat/policy.toml"), Deny, "policy files are read-only", ""},
		{WritePath("/home/u/.config/moat"), Deny, "policy files", ""},
		{WritePath("/home/u/.config"), Deny, "policy files", ""},
		{WritePath("/home/u/.config/other"), Allow, "allow Write(~/**)", ""},
		{WritePath("/etc/moat/policy.toml"), Deny, "policy files", ""},
		{WritePath("/srv/data/x"), Allow, "allow Write(/srv/data)", ""},
		{WritePath("/srv/other"), Deny, "profile trusted: writes only the workspace and allow Write targets", ""},
		{WritePath("/var/x.log"), Deny, "profile trusted: writes only", ""},
		{WritePath("/ws/x.log"), Allow, "allow Write(*.log)", ""},
		{WritePath("/opt/x"), Deny, "profile trusted: writes only", ""},
		{ReadPath("/tmp"), Deny, "/tmp", ""},
		{NetHost("api.github.com:443"), Allow, "allow Net(domain:*.github.com)", ""},
		{NetHost("API.GitHub.com."), Allow, "allow Net(domain:*.github.com)", ""},
		{NetHost("github.com"), Deny, "not on the network allowlist", ""},
		{NetHost("evil.github.com"), Deny, "deny Net(domain:evil.github.com)", ""},
		{NetHost("pypi.org"), Allow, "pypi.org", ""},
		{NetHost("example.com"), Deny, "not on the network allowlist", ""},
		{NetHost("140.82.112.3"), Deny, "not on the network allowlist", "raw IP"},
	})
	w := strings.Join(e.Warnings(), "\n")
	for _, s := range []string{"allow Write(*.log)", "per-call rules cannot add to the network allowlist", "per-call rules cannot add writable roots"} {
		if !strings.Contains(w, s) {
			t.Errorf("warnings lack %q:\n%s", s, w)
		}
	}
}

func TestNetIP(t *testing.T) {
	f := layerFile(t, Managed, Trusted, []string{"Net(domain:*)", "Net(domain:10.0.0.1)"}, nil, []string{"Net(domain:127.0.0.1)"})
	e := mustCompile(t, tctx, f)
	checkDecisions(t, e, []dcase{
		{NetHost("anything.example"), Allow, "allow Net(domain:*)", ""},
		{NetHost("10.0.0.1"), Allow, "allow Net(domain:10.0.0.1)", ""},
		{NetHost("012.0.0.1"), Allow, "10.0.0.1", ""},
		{NetHost("10.0.0.2"), Deny, "not on the network allowlist", "raw IP"},
		{NetHost("127.0.0.1"), Deny, "not on the network allowlist", ""},
		{NetHost("[::ffff:10.0.0.1]:22"), Allow, "10.0.0.1", ""},
	})
	g := layerFile(t, Managed, Trusted, []string{"Net(domain:*)", "Net(domain:127.0.0.1)"}, nil, []string{"Net(domain:127.0.0.1)"})
	e = mustCompile(t, tctx, g)
	checkDecisions(t, e, []dcase{
		{NetHost("0x7f.1"), Deny, "deny Net(domain:127.0.0.1)", ""},
		{NetHost("2130706433"), Deny, "deny Net(domain:127.0.0.1)", ""},
	})
}

func TestLayering(t *testing.T) {
	managed := layerFile(t, Managed, "", nil, nil, []string{"Exec(git push --force*)"})
	project := layerFile(t, Project, Trusted, []string{"Exec(git push*)", "Exec(npm run *)"}, []string{"Exec(git push*)"}, []string{"Exec(rm -rf /*)", "Exec(rm *)"})
	user := layerFile(t, User, Trusted, nil, []string{"Exec(npm run deploy*)"}, []string{"Exec(rm *)"})
	e := mustCompile(t, tctx, user, project, managed) // order of arguments does not matter
	checkDecisions(t, e, []dcase{
		{ExecShell("git push --force origin"), Deny, "deny Exec(git push --force*)", "managed managed.toml:3"},
		{ExecShell("git push origin"), Ask, "ask Exec(git push*)", "project project.toml:"},
		{ExecShell("npm run build"), Allow, "allow Exec(npm run *)", ""},
		{ExecShell("npm run deploy"), Ask, "ask Exec(npm run deploy*)", "user user.toml"},
		{ExecShell("rm -rf /"), Deny, "deny Exec(rm -rf /*)", "project project.toml:11"},
		{ExecShell("rm x"), Deny, "deny Exec(rm *)", "project project.toml:12"},
		{ExecShell("ls"), Allow, "profile trusted: default", ""},
	})
	call, _ := ParseCall(CallRules{Profile: Untrusted, Deny: []string{"Exec(npm *)"}, Allow: []string{"Exec(rm *)"}})
	c, err := e.With(call)
	if err != nil {
		t.Fatal(err)
	}
	if c.Profile() != Untrusted || e.Profile() != Trusted {
		t.Fatalf("profiles %s %s", c.Profile(), e.Profile())
	}
	checkDecisions(t, c, []dcase{
		{ExecShell("npm run build"), Deny, "deny Exec(npm *)", "per-call deny[0]"},
		{ExecShell("rm x"), Deny, "deny Exec(rm *)", "project"},
		{ReadPath("/home/u/x"), Deny, "profile untrusted", ""},
	})
	// The original is unchanged.
	checkDecisions(t, e, []dcase{{ExecShell("npm run build"), Allow, "allow Exec(npm run *)", ""}})
	if _, err := e.With(project); err == nil {
		t.Error("With accepted a project file")
	}
	// The strictest declared profile wins.
	p := layerFile(t, Project, Trusted, nil, nil, nil)
	u := layerFile(t, User, Untrusted, nil, nil, nil)
	if got := mustCompile(t, tctx, p, u).Profile(); got != Untrusted {
		t.Errorf("profile = %s", got)
	}
	// A project file cannot widen: its "trusted" is ignored (and said so);
	// the user's own file can declare it.
	if e := mustCompile(t, tctx, p); e.Profile() != Untrusted || !strings.Contains(strings.Join(e.Warnings(), "\n"), "project layer can only narrow") {
		t.Errorf("profile = %s, warnings %q", e.Profile(), e.Warnings())
	}
	if got := mustCompile(t, tctx, layerFile(t, User, Trusted, nil, nil, nil)).Profile(); got != Trusted {
		t.Errorf("profile = %s", got)
	}
}

// TestProjectCannotGrant: allow Write and allow Net rules of the project
// file (the workspace's own, possibly hostile) add no writable root and
// nothing to the allowlist; the same rules in the user file do.
func TestProjectCannotGrant(t *testing.T) {
	rules := []string{"Write(~/.cache/**)", "Net(domain:example.com)"}
	user := layerFile(t, User, Trusted, nil, nil, nil)
	proj := mustCompile(t, tctx, user, layerFile(t, Project, "", rules, nil, nil))
	checkDecisions(t, proj, []dcase{
		{WritePath("~/.cache/x"), Deny, "profile trusted: writes only", ""},
		{NetHost("example.com"), Deny, "not on the network allowlist", ""},
	})
	if r := proj.Roots(); len(r.Writable) != 1 || len(r.NetAllow) != 0 {
		t.Errorf("roots %+v", r)
	}
	own := mustCompile(t, tctx, layerFile(t, User, Trusted, rules, nil, nil))
	checkDecisions(t, own, []dcase{
		{WritePath("~/.cache/x"), Allow, "allow Write(~/.cache/**)", ""},
	})
}

func TestExecSpellings(t *testing.T) {
	f := layerFile(t, Project, "", []string{"Exec(git *)"}, nil, []string{"Exec(git push*)", "Exec(rm -rf /*)"})
	e := mustCompile(t, tctx, f)
	for _, s := range []string{
		"git push", "git push origin main", "/usr/bin/git push", "\"git\" 'push'", "git   push",
		"env git push", "env FOO=1 git push", "/usr/bin/env -i git push", "command git push",
		"exec git push", "nice -n 5 git push", "timeout 10 git push", "sudo git push",
		"sh -c 'git push'", "bash -c \"git push\"", "bash -lc 'git push origin'",
		"sh -c \"sh -c 'git push'\"", "echo hi && git push", "echo hi; git push", "true | git push",
		"eval git push", "xargs git push", "find . -exec git push ;", "busybox sh -c 'git push'",
		"watch 'git push'", "env -S 'git push'", "rm -rf /", "rm -rf /home", "rm  -rf   /",
	} {
		d := e.Decide(ExecShell(s))
		if d.Effect != Deny {
			t.Errorf("%q: %v by %v (%s)", s, d.Effect, d.Rule, d.Reason)
		}
	}
	for _, argv := range [][]string{
		{"git", "push"}, {"/usr/bin/git", "push", "origin"}, {"env", "git", "push"},
		{"bash", "-c", "git push"}, {"sh", "-c", "cd x && git push"}, {"git", "push "},
		{"git push"}, {"env", "-S", "git push"}, {"timeout", "5", "sh", "-c", "git push"},
		{"sudo", "-u", "root", "git", "push"}, {"nice", "-n", "5", "git", "push"}, {"xargs", "-0", "git", "push"},
		{"find", ".", "-exec", "git", "push", ";"}, {"strace", "-f", "git", "push"}, {"sh", "-c", "$0 push", "git"},
	} {
		d := e.Decide(ExecArgv(argv...))
		if d.Effect != Deny {
			t.Errorf("%q: %v by %v (%s)", argv, d.Effect, d.Rule, d.Reason)
		}
	}
	for _, s := range []string{"git status", "git pull", "ls -la", "echo git push", "rm -rf ./build"} {
		if d := e.Decide(ExecShell(s)); d.Effect != Allow {
			t.Errorf("%q: %v by %v (%s)", s, d.Effect, d.Rule, d.Reason)
		}
	}
	d := e.Decide(ExecShell("echo hi && git push origin"))
	if len(d.Commands) < 2 || d.Command != "git push origin" || d.Commands[0].Command != "echo hi" || d.Commands[0].Effect != Allow {
		t.Errorf("commands = %+v, decided by %q", d.Commands, d.Command)
	}
	if !strings.Contains(d.Reason, "denied: Exec `git push origin` matches deny Exec(git push*) (project project.toml:") {
		t.Errorf("reason = %q", d.Reason)
	}
}

func TestExecUncertain(t *testing.T) {
	f := layerFile(t, Project, "", []string{"Exec(npm *)", "Exec(git status)"}, []string{"Exec(git push*)"}, []string{"Exec(rm -rf /*)"})
	e := mustCompile(t, tctx, f)
	checkDecisions(t, e, []dcase{
		// The first word is unknown: the strictest Exec rule of the policy.
		{ExecShell("$X push"), Deny, "deny Exec(rm -rf /*)", "cannot be known before it runs (the command word is only known at run time (`$X`)), so the strictest Exec rule of the policy applies"},
		{ExecShell("`which git` push"), Deny, "deny Exec(rm -rf /*)", ""},
		// policy/shell does not say which word is uncertain, and gives the
		// literal parts of a word with an expansion ("${X}m" is "m"): the
		// name of a command with an uncertain word is not known.
		{ExecShell("${X}m -rf /"), Deny, "deny Exec(rm -rf /*)", "the strictest Exec rule of the policy"},
		// A dynamic argument: the strictest of the rules that could match.
		{ExecShell("git $X"), Ask, "ask Exec(git push*)", "argument 1 of `git` is only known at run time (`$X`)); ask Exec(git push*) could match it"},
		{ExecShell("npm $X"), Allow, "allow Exec(npm *)", "allow Exec(npm *) could match it"},
		{ExecShell("rm $X"), Deny, "deny Exec(rm -rf /*)", "could match"},
		{ExecShell("rm -f $X"), Allow, "profile untrusted: default", ""},
		// The words are literal, only what xargs or find add is not: the
		// strictest rule that could match a command of that name.
		{ExecShell("echo x | xargs git push"), Ask, "ask Exec(git push*)", "`git push` matches"},
		{ExecShell("echo x | xargs git"), Ask, "ask Exec(git push*)", "xargs appends arguments it reads from its input); ask Exec(git push*) could match it"},
		{ExecShell("echo x | xargs npm"), Allow, "allow Exec(npm *)", "strictest of the Exec rules that could match"},
		{ExecShell("echo x | xargs ls"), Allow, "profile untrusted: default", ""},
		{ExecShell("find . -exec rm {} ;"), Deny, "deny Exec(rm -rf /*)", "argument 1 of `rm` is only known at run time (`{}`)"},
		// Unparsable: the strictest Exec rule of the policy.
		{ExecShell("echo 'unterminated"), Deny, "deny Exec(rm -rf /*)", "does not parse"},
	})
	none := mustCompile(t, tctx)
	checkDecisions(t, none, []dcase{
		{ExecShell("$X push"), Allow, "profile untrusted: default", ""},
		{ExecShell("echo 'unterminated"), Allow, "profile untrusted: default", ""},
	})
}

func TestDecidingRule(t *testing.T) {
	p := layerFile(t, Project, "", nil, nil, []string{"Read(/ws/a/**)", "Read(/ws/**)"})
	u := layerFile(t, User, "", nil, []string{"Read(/ws/a/b)"}, []string{"Read(*)"})
	e := mustCompile(t, tctx, p, u)
	d := e.Decide(ReadPath("/ws/a/b"))
	if d.Effect != Deny || d.Rule.Text != "Read(/ws/a/**)" || d.Rule.Layer != Project || d.Rule.Line != 3 {
		t.Errorf("decision %+v rule %+v", d, d.Rule)
	}
	d = e.Decide(ReadPath("/ws/x"))
	if d.Rule.Text != "Read(/ws/**)" || d.Rule.Line != 4 {
		t.Errorf("rule %+v", d.Rule)
	}
}

func TestWorkspaceInsideSecrets(t *testing.T) {
	c := Context{Workspace: "/var/lib/moat/ws/1", Home: "/home/u"}
	e := mustCompile(t, c)
	checkDecisions(t, e, []dcase{
		{WritePath("/var/lib/moat/ws/1/a"), Allow, "default", ""},
		{ReadPath("/var/lib/moat/ws/1/a"), Allow, "default", ""},
		{ReadPath("/var/lib/moat/token"), Deny, "/var/lib/moat", ""},
		{ReadPath("/var/lib/moat/ws/2/a"), Deny, "/var/lib/moat", ""},
		{ReadPath("/var/lib/moat/ws/1/.env"), Deny, ".env", ""},
	})
	if w := strings.Join(e.Warnings(), "\n"); !strings.Contains(w, "lies inside /var/lib/moat") {
		t.Errorf("warnings %s", w)
	}
	if _, err := ParseCall(CallRules{Profile: Trusted}); err == nil || !strings.Contains(err.Error(), "can only narrow") {
		t.Errorf("per-call trusted: %v", err)
	}
	// A per-call file made by hand cannot widen the profile either.
	e2, err := e.With(&File{Layer: Call, Name: "per-call", Profile: Trusted})
	if err != nil || e2.Profile() != Untrusted {
		t.Errorf("With trusted: %v %v", e2.Profile(), err)
	}
}

func TestShellQuote(t *testing.T) {
	r := newRand(7)
	parts := []string{"a", "'", "\"", " ", "$X", "`x`", "\\", "\n", "*", "~", "é", "--", "=", ";", "|", "#", "!"}
	for i := 0; i < 2000; i++ {
		argv := make([]string, 1+r.IntN(4))
		for j := range argv {
			for k, n := 0, 1+r.IntN(4); k < n; k++ {
				argv[j] += pick(r, parts)
			}
		}
		if argv[0] == "--" || strings.HasPrefix(argv[0], "!") {
			continue
		}
		cmds, err := shell.Commands(shellQuote(argv))
		if err != nil || len(cmds) == 0 || !slices.Equal(cmds[0].Args, argv) || cmds[0].Uncertain {
			t.Fatalf("%q: %q -> %+v, %v", argv, shellQuote(argv), cmds, err)
		}
	}
}

func TestCompileChecksFiles(t *testing.T) {
	bad := []*File{
		{Layer: Builtin, Name: "b"},
		{Layer: User, Name: "p", Profile: "root"},
		{Layer: User, Name: "r", Rules: []*Rule{{Effect: Deny, Kind: Exec, Text: "Exec(x)"}}},
		{Layer: User, Name: "n", Rules: []*Rule{nil}},
	}
	for _, f := range bad {
		if _, err := Compile(tctx, f); err == nil {
			t.Errorf("Compile accepted %+v", f)
		}
	}
	e := mustCompile(t, tctx)
	if _, err := e.With(&File{Layer: Call, Rules: []*Rule{{Effect: Deny, Kind: Read}}}); err == nil {
		t.Error("With accepted a hand-made rule")
	}
}

// TestPathEntryMatch: Match covers a path and what is below it, MatchExact
// only the path itself, at any depth of "**".
func TestPathEntryMatch(t *testing.T) {
	git := entryOf(below("/ws", "**", ".git"), Deny, "")
	hooks := entryOf(below("/w[s]", "**", ".git", "**", "hooks"), Deny, "")
	for _, c := range []struct {
		e            PathEntry
		p            string
		match, exact bool
	}{
		{git, "/ws/.git", true, true}, {git, "/ws/a/.git", true, true}, {git, "/ws/.git/x", true, false},
		{git, "/ws/.git/x/.git", true, true}, {git, "/ws", false, false}, {git, "/wsx/.git", false, false},
		{hooks, "/w[s]/.git/hooks", true, true}, {hooks, "/w[s]/.git/modules/m/hooks", true, true},
		{hooks, "/w[s]/.git/hooks/x", true, false}, {hooks, "/w[s]/hooks", false, false}, {hooks, "/ws/.git/hooks", false, false},
	} {
		if c.e.Match(c.p) != c.match || c.e.MatchExact(c.p) != c.exact {
			t.Errorf("%s on %s: match %v exact %v", c.e.Pattern, c.p, c.e.Match(c.p), c.e.MatchExact(c.p))
		}
	}
}
