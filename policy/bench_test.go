package policy

import (
	"fmt"
	"testing"
)

// benchPolicy is a realistic policy of 100 rules in three layers.
func benchPolicy(b testing.TB) *Effective {
	var mAllow, mAsk, mDeny, pAllow, pAsk, pDeny, uAllow, uAsk, uDeny []string
	mDeny = []string{"Exec(rm -rf /*)", "Exec(mkfs*)", "Exec(dd if=*of=/dev/*)", "Exec(shutdown*)", "Exec(reboot*)",
		"Read(~/.ssh/**)", "Read(~/.aws/**)", "Read(/etc/shadow)", "Read(*.pem)", "Read(*.key)",
		"Net(domain:*.onion)", "Net(domain:metadata.google.internal)", "Exec(curl * | sh*)", "Exec(chmod -R 777 /*)", "Write(/etc/**)"}
	mAsk = []string{"Exec(sudo *)", "Exec(docker *)", "Exec(kubectl *)", "Net(domain:*.amazonaws.com)", "Write(~/.config/**)"}
	pAllow = []string{"Exec(npm run *)", "Exec(npm test*)", "Exec(go test*)", "Exec(go build*)", "Exec(make *)",
		"Write(src/**)", "Write(test/**)", "Write(docs/**)", "Write(build/)", "Write(~/.cache/**)",
		"Net(domain:*.github.com)", "Net(domain:registry.npmjs.org)", "Net(domain:proxy.golang.org)", "Net(domain:pypi.org)", "Net(domain:files.pythonhosted.org)",
		"Exec(git status*)", "Exec(git diff*)", "Exec(git log*)", "Exec(git add *)", "Exec(git commit *)",
		"Read(src/**)", "Read(~/projects/**)", "Exec(python3 -m pytest*)", "Exec(cargo test*)", "Exec(cargo build*)"}
	pAsk = []string{"Exec(git push*)", "Exec(npm publish*)", "Exec(git reset --hard*)", "Exec(git clean -fd*)", "Exec(terraform apply*)",
		"Write(.github/workflows/**)", "Write(package.json)", "Write(go.mod)", "Write(Makefile)", "Net(domain:*.slack.com)"}
	pDeny = []string{"Exec(git push --force*)", "Exec(git push -f*)", "Read(secrets/**)", "Write(secrets/**)", "Read(**/.env.production)",
		"Exec(npm run deploy*)", "Exec(aws *)", "Exec(gcloud *)", "Exec(az *)", "Write(vendor/**)"}
	uAllow = []string{"Exec(ls*)", "Exec(cat *)", "Exec(grep *)", "Exec(rg *)", "Exec(find *)", "Exec(head *)", "Exec(tail *)",
		"Write(~/.npm/**)", "Write(~/go/pkg/**)", "Net(domain:*.googleapis.com)", "Net(domain:crates.io)", "Net(domain:static.crates.io)"}
	uAsk = []string{"Exec(ssh *)", "Exec(scp *)", "Exec(rsync *)", "Net(domain:*.openai.com)", "Exec(brew *)", "Read(~/Documents/**)"}
	uDeny = []string{"Read(~/.password-store/**)", "Read(~/Library/**)", "Exec(open *)", "Exec(osascript*)", "Write(~/.ssh/**)",
		"Read(~/.mozilla/**)", "Read(~/.config/google-chrome/**)", "Exec(nc *)", "Exec(ncat *)", "Exec(socat *)", "Net(domain:pastebin.com)", "Exec(telnet *)", "Exec(ftp *)", "Read(~/.thunderbird/**)", "Exec(crontab *)", "Exec(at *)", "Write(~/.local/bin/**)"}
	files := []*File{
		layerFile(b, Managed, "", mAllow, mAsk, mDeny),
		layerFile(b, Project, Trusted, pAllow, pAsk, pDeny),
		layerFile(b, User, "", uAllow, uAsk, uDeny),
	}
	n := 0
	for _, f := range files {
		n += len(f.Rules)
	}
	if n != 100 {
		b.Fatalf("%d rules", n)
	}
	return mustCompile(b, tctx, files...)
}

var benchRequests = []Request{
	ExecShell("npm run build"),
	ExecShell("git push origin main"),
	ExecShell("cd src && go test ./... 2>&1 | tail -20"),
	ExecShell("bash -c 'rm -rf /tmp/x && make all'"),
	ExecShell("FOO=1 env git commit -m \"fix: the thing\""),
	ExecArgv("/usr/bin/git", "status", "--short"),
	ReadPath("/ws/src/main.go"),
	ReadPath("/home/u/.ssh/id_rsa"),
	ReadPath("/home/u/projects/other/README.md"),
	WritePath("/ws/src/pkg/deep/file.go"),
	WritePath("/ws/.git/hooks/pre-commit"),
	WritePath("/home/u/.cache/go-build/ab/cdef"),
	WritePath("/ws/../etc/passwd"),
	NetHost("api.github.com:443"),
	NetHost("evil.example.com"),
}

func BenchmarkDecide(b *testing.B) {
	e := benchPolicy(b)
	b.Run("mix", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			e.Decide(benchRequests[i%len(benchRequests)])
		}
	})
	for _, q := range benchRequests {
		b.Run(fmt.Sprintf("%.40s", q.String()), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.Decide(q)
			}
		})
	}
}

func BenchmarkCompile(b *testing.B) {
	benchPolicy(b)
	b.ReportAllocs()
	for b.Loop() {
		benchPolicy(b)
	}
}

// BenchmarkDecideResolve: path decisions that resolve symlinks on a real
// tree (Lstat of each component).
func BenchmarkDecideResolve(b *testing.B) {
	root := b.TempDir()
	c := Context{Workspace: root + "/ws", Home: root + "/home", Resolve: true}
	e := mustCompile(b, c, layerFile(b, Project, Trusted, []string{"Write(~/.cache/**)"}, nil, []string{"Read(secrets/**)"}))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.Decide(ReadPath(root + "/ws/src/pkg/deep/file.go"))
	}
}
