package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// gitSetup builds, in $B: a repository ws with a populated submodule
// (sub), a submodule never initialized (lib: a gitlink with no
// directory), a local remote (origin.git); and, inside ws as a sandbox
// could leave them, git directories with a hostile config (.evil, a copy
// of .git; .evilsub, a copy of the submodule's) whose core.fsmonitor,
// core.hooksPath (reference-transaction) and diff textconv each leave a
// marker in $B/mark when git runs them.
const gitSetup = `set -e
M=$B/mark; mkdir -p $M
g() { git -c user.email=t@example.com -c user.name=t -c protocol.file.allow=always -c init.defaultBranch=main "$@"; }
g init -q $B/subsrc; echo s > $B/subsrc/s.txt; g -C $B/subsrc add .; g -C $B/subsrc commit -qm s
g init -q --bare $B/origin.git
g init -q $B/ws; cd $B/ws; echo a > a.txt; g add .; g commit -qm a
g submodule add -q $B/subsrc sub; g commit -qm sub
g update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),lib; g commit -qm lib
g remote add origin $B/origin.git; g push -q origin HEAD:main
echo b >> a.txt
cp -r .git .evil; cp -r .git/modules/sub .evilsub
mkdir -p .evilhooks; printf '#!/bin/sh\ntouch %s/hook\n' $M > .evilhooks/reference-transaction; chmod +x .evilhooks/reference-transaction
for d in .evil .evilsub; do
  git config -f $d/config core.fsmonitor "touch $M/fsmonitor; false"
  git config -f $d/config core.hooksPath $B/ws/.evilhooks
  git config -f $d/config diff.evil.textconv "touch $M/textconv; cat"
  mkdir -p $d/info; echo '* diff=evil' > $d/info/attributes
done
git config -f .evilsub/config --unset core.worktree
`

// hostGitCommands are what a person runs in a workspace after an agent
// worked in it.
var hostGitCommands = [][]string{{"status"}, {"diff"}, {"log", "-p", "-1"}, {"fetch", "-q", "origin"}, {"submodule", "status"}}

// gitPlant is a way a sandbox could steer the host's git, as a shell
// script run in the workspace ($B is the fixture's host directory, which
// the script only writes as text).
type gitPlant struct {
	name, sh string
	// fires lists the host commands the plant makes run a marker on an
	// unprotected copy (empty: the write alone is checked).
	fires []string
}

var gitPlants = []gitPlant{
	{"commondir", `printf '%s\n' "$B/ws/.evil" > .git/commondir`, []string{"status", "diff", "log", "fetch", "submodule"}},
	{"submodule .git file", `printf 'gitdir: %s\n' "$B/ws/.evilsub" > sub/.git`, []string{"status", "diff"}},
	{"repository in an uninitialized submodule", `git init -q lib && git -C lib config core.fsmonitor "touch $B/mark/fsmonitor; false"`, []string{"status", "diff"}},
	{"submodule config", `git config -f .git/modules/sub/config core.fsmonitor "touch $B/mark/fsmonitor; false"`, []string{"status", "diff"}},
	{"submodule hooks", `printf '#!/bin/sh\ntouch %s/mark/hook\n' "$B" > .git/modules/sub/hooks/post-checkout`, nil},
	{"config", `git config core.hooksPath "$B/ws/.evilhooks"`, []string{"fetch"}},
	{"config.worktree", `printf '[core]\n\tfsmonitor = x\n' > .git/config.worktree`, nil},
	{"hook", `cp .evilhooks/reference-transaction .git/hooks/ && chmod +x .git/hooks/reference-transaction`, []string{"fetch"}},
	{"info/attributes", `echo '* diff=evil' > .git/info/attributes`, nil},
	{"alternates", `echo "$B/ws/.evil/objects" > .git/objects/info/alternates`, nil},
	{"index", `git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),newlink`, nil},
	{"modules", `mkdir .git/modules/x`, nil},
	{"worktrees", `mkdir -p .git/worktrees/w`, nil},
	{"sub/.git removed", `rm sub/.git`, nil},
	{"lib renamed", `mkdir -p lib && mv lib lib2 && mkdir lib`, nil},
}

// gitFixture builds gitSetup in a new directory.
func gitFixture(t *testing.T) string {
	t.Helper()
	b := t.TempDir()
	cmd := exec.Command("bash", "-c", gitSetup)
	cmd.Env = gitEnv(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git fixture: %v\n%s", err, out)
	}
	return b
}

// gitEnv is a clean environment for the host's git: no system or user
// configuration of this machine.
func gitEnv(b string) []string {
	return []string{"B=" + b, "HOME=" + b, "PATH=/usr/local/bin:/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
}

// hostGit runs every host command in the fixture's workspace (after
// giving the remote a new commit, so a fetch updates a ref) and returns
// the commands that left a marker.
func hostGit(t *testing.T, b string) []string {
	t.Helper()
	advance := exec.Command("bash", "-c", `set -e; cd $B; rm -rf o2; git clone -q origin.git o2; cd o2; date +%s%N > f; git add f
git -c user.email=t@example.com -c user.name=t commit -qm n; git push -q origin HEAD:main; cd ..; rm -rf o2`)
	advance.Env = gitEnv(b)
	if out, err := advance.CombinedOutput(); err != nil {
		t.Fatalf("advancing the remote: %v\n%s", err, out)
	}
	var fired []string
	mark := filepath.Join(b, "mark")
	for _, c := range hostGitCommands {
		os.RemoveAll(mark)
		os.Mkdir(mark, 0o755)
		cmd := exec.Command("git", c...)
		cmd.Dir = filepath.Join(b, "ws")
		cmd.Env = gitEnv(b)
		_ = cmd.Run() // a refusal is fine; only what it ran matters
		if ents, _ := os.ReadDir(mark); len(ents) > 0 {
			fired = append(fired, c[0])
		}
	}
	return fired
}

// TestGitHostBoundary: nothing a sandbox can do in a bound workspace makes
// the host's git (status, diff, log, fetch from a local remote, submodule
// status) run a command of its choosing. Each plant is tried inside, where
// it fails, and then the host's git is run; the control applies the same
// plant on an unprotected copy, where the host's git runs the marker.
func TestGitHostBoundary(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("git"); err != nil {
		testutil.SkipOrFail(t, "git is not installed (make test-deps installs it)")
	}
	for _, p := range gitPlants {
		t.Run(p.name, func(t *testing.T) {
			b := gitFixture(t)
			ws := filepath.Join(b, "ws")
			o := testutil.Exec(t, "run", "-w", ws, "-e", "B="+b, "--sh", p.sh)
			if o.Code == 0 {
				t.Errorf("the plant worked inside: %q", o.Stderr)
			}
			if fired := hostGit(t, b); len(fired) > 0 {
				t.Errorf("after the sandbox, host git ran the sandbox's commands in: %v", fired)
			}

			// Control: the same plant on an unprotected copy.
			ctl := gitFixture(t)
			cmd := exec.Command("bash", "-c", p.sh)
			cmd.Dir = filepath.Join(ctl, "ws")
			cmd.Env = gitEnv(ctl)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("control: the plant fails without moat: %v\n%s", err, out)
			}
			if fired := hostGit(t, ctl); strings.Join(fired, " ") != strings.Join(p.fires, " ") {
				t.Errorf("control: host git ran the plant in %v, want %v", fired, p.fires)
			}
		})
	}
}

// TestGitInside: inside, git reads the repository (status, log, diff) and
// a new repository of the sandbox's own works; a commit to the bound
// repository fails with the file system's refusal.
func TestGitInside(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("git"); err != nil {
		testutil.SkipOrFail(t, "git is not installed (make test-deps installs it)")
	}
	b := gitFixture(t)
	ws := filepath.Join(b, "ws")
	o := testutil.Exec(t, "run", "-w", ws, "--sh", `set -e
git status --porcelain >/dev/null; git log --oneline -1 >/dev/null; git diff --stat >/dev/null
mkdir -p scratch && git init -q scratch/own && git -C scratch/own config core.fsmonitor true
echo edit >> a.txt`)
	if o.Code != 0 {
		t.Fatalf("reading the repository inside: exit %d %q", o.Code, o.Stderr)
	}
	o = testutil.Exec(t, "run", "-w", ws, "--sh", "git -c user.email=t@example.com -c user.name=t commit -qam x")
	if o.Code == 0 || !strings.Contains(o.Stderr, "Read-only file system") {
		t.Fatalf("a commit inside: exit %d %q", o.Code, o.Stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "a\nb\nedit\n" {
		t.Errorf("the workspace's files stay writable: %q", b)
	}
}
