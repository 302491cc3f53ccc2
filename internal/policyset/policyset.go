// Package policyset is a realistic policy, 100 rules in three layers, and
// a mix of requests against it: what the policy package's Go benchmark and
// bench/policy both measure.
package policyset

import (
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/policy"
)

// Context is where the set's workspace and home are.
var Context = policy.Context{Workspace: "/ws", Home: "/home/u"}

// Effective compiles the three layers (managed, project, user with the
// trusted profile) for Context.
func Effective() (*policy.Effective, error) {
	files, err := Files()
	if err != nil {
		return nil, err
	}
	return policy.Compile(Context, files...)
}

// Files parses the three layers.
func Files() ([]*policy.File, error) {
	var mAllow, mAsk, mDeny, pAllow, pAsk, pDeny, uAllow, uAsk, uDeny []string
	mDeny = []string{"Exec(rm -rf /*)", "Exec(mkfs*)", "Exec(dd if=*of=/dev/*)", "Exec(shutdown*)", "Exec(reboot*)",
		"Read(~/.ssh/**)", "Read(~/.aws/**)", "Read(/etc/shadow)", "Read(*.pem)", "Read(*.key)",
		"Net(domain:*.onion)", "Net(domain:metadata.google.internal)", "Exec(curl * | sh*)", "Exec(chmod -R 777 /*)", "Write(/etc/**)"}
	mAsk = []string{"Exec(sudo *)", "Exec(docker *)", "Exec(kubectl *)", "Net(domain:*.amazonaws.com)", "Write(~/.config/**)"}
	pAllow = []string{"Exec(npm run *)", "Exec(npm test*)", "Exec(go test*)", "Exec(go build*)", "Exec(make *)",
		"Write(src/**)", "Write(test/**)", "Write(docs/**)", "Write(build/)",
		"Exec(git status*)", "Exec(git diff*)", "Exec(git log*)", "Exec(git add *)", "Exec(git commit *)",
		"Read(src/**)", "Read(~/projects/**)", "Exec(python3 -m pytest*)", "Exec(cargo test*)", "Exec(cargo build*)"}
	pAsk = []string{"Exec(git push*)", "Exec(npm publish*)", "Exec(git reset --hard*)", "Exec(git clean -fd*)", "Exec(terraform apply*)",
		"Write(.github/workflows/**)", "Write(package.json)", "Write(go.mod)", "Write(Makefile)", "Net(domain:*.slack.com)"}
	pDeny = []string{"Exec(git push --force*)", "Exec(git push -f*)", "Read(secrets/**)", "Write(secrets/**)", "Read(**/.env.production)",
		"Exec(npm run deploy*)", "Exec(aws *)", "Exec(gcloud *)", "Exec(az *)", "Write(vendor/**)"}
	// Grants (writable roots, the network allowlist) come from the user
	// layer: the project layer can only narrow.
	uAllow = []string{"Write(~/.cache/**)", "Net(domain:*.github.com)", "Net(domain:registry.npmjs.org)", "Net(domain:proxy.golang.org)",
		"Net(domain:pypi.org)", "Net(domain:files.pythonhosted.org)", "Exec(ls*)", "Exec(cat *)", "Exec(grep *)", "Exec(rg *)", "Exec(find *)", "Exec(head *)", "Exec(tail *)",
		"Write(~/.npm/**)", "Write(~/go/pkg/**)", "Net(domain:*.googleapis.com)", "Net(domain:crates.io)", "Net(domain:static.crates.io)"}
	uAsk = []string{"Exec(ssh *)", "Exec(scp *)", "Exec(rsync *)", "Net(domain:*.openai.com)", "Exec(brew *)", "Read(~/Documents/**)"}
	uDeny = []string{"Read(~/.password-store/**)", "Read(~/Library/**)", "Exec(open *)", "Exec(osascript*)", "Write(~/.ssh/**)",
		"Read(~/.mozilla/**)", "Read(~/.config/google-chrome/**)", "Exec(nc *)", "Exec(ncat *)", "Exec(socat *)", "Net(domain:pastebin.com)", "Exec(telnet *)", "Exec(ftp *)", "Read(~/.thunderbird/**)", "Exec(crontab *)", "Exec(at *)", "Write(~/.local/bin/**)"}
	layers := []struct {
		layer            policy.Layer
		name             string
		profile          string
		allow, ask, deny []string
	}{
		{policy.Managed, "/etc/moat/policy.toml", "", mAllow, mAsk, mDeny},
		{policy.Project, ".moat/policy.toml", "", pAllow, pAsk, pDeny},
		{policy.User, "~/.config/moat/policy.toml", "trusted", uAllow, uAsk, uDeny},
	}
	var files []*policy.File
	n := 0
	for _, l := range layers {
		f, err := policy.Parse(l.layer, l.name, []byte(toml(l.profile, l.allow, l.ask, l.deny)))
		if err != nil {
			return nil, err
		}
		n += len(f.Rules)
		files = append(files, f)
	}
	if n != 100 {
		return nil, fmt.Errorf("policyset: %d rules, want 100", n)
	}
	return files, nil
}

// toml writes one layer's file.
func toml(profile string, allow, ask, deny []string) string {
	var b strings.Builder
	b.WriteString("version = 1\n")
	if profile != "" {
		fmt.Fprintf(&b, "profile = %q\n", profile)
	}
	for _, l := range []struct {
		key   string
		rules []string
	}{{"allow", allow}, {"ask", ask}, {"deny", deny}} {
		if len(l.rules) == 0 {
			continue
		}
		b.WriteString(l.key + " = [\n")
		for _, r := range l.rules {
			fmt.Fprintf(&b, "  %q,\n", r)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// Requests is a mix of the requests an agent makes, against the policy.
func Requests() []policy.Request {
	return []policy.Request{
		policy.ExecShell("npm run build"),
		policy.ExecShell("git push origin main"),
		policy.ExecShell("cd src && go test ./... 2>&1 | tail -20"),
		policy.ExecShell("bash -c 'rm -rf /tmp/x && make all'"),
		policy.ExecShell("FOO=1 env git commit -m \"fix: the thing\""),
		policy.ExecArgv("/usr/bin/git", "status", "--short"),
		policy.ReadPath("/ws/src/main.go"),
		policy.ReadPath("/home/u/.ssh/id_rsa"),
		policy.ReadPath("/home/u/projects/other/README.md"),
		policy.WritePath("/ws/src/pkg/deep/file.go"),
		policy.WritePath("/ws/.git/hooks/pre-commit"),
		policy.WritePath("/home/u/.cache/go-build/ab/cdef"),
		policy.WritePath("/ws/../etc/passwd"),
		policy.NetHost("api.github.com:443"),
		policy.NetHost("evil.example.com"),
	}
}
