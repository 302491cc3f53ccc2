package compile

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// git runs the host's git in dir (a test fixture only).
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed (make test-deps installs it)")
	}
	cmd := exec.Command("git", append([]string{"-c", "user.email=t@example.com", "-c", "user.name=t",
		"-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitFixture makes a repository with a populated submodule (sub), two
// gitlinks without a directory (libs/lib, deep/er/lib), one with an empty
// directory (present) and a linked worktree's .git file naming a git
// directory elsewhere in the workspace (wt).
func gitFixture(t *testing.T) string {
	base := t.TempDir()
	src := filepath.Join(base, "subsrc")
	git(t, base, "init", "-q", src)
	os.WriteFile(filepath.Join(src, "s.txt"), []byte("s\n"), 0o644)
	git(t, src, "add", ".")
	git(t, src, "commit", "-qm", "s")
	sha := git(t, src, "rev-parse", "HEAD")
	ws := filepath.Join(base, "ws")
	git(t, base, "init", "-q", ws)
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a\n"), 0o644)
	git(t, ws, "add", ".")
	git(t, ws, "submodule", "add", "-q", src, "sub")
	for _, l := range []string{"libs/lib", "deep/er/lib", "present"} {
		git(t, ws, "update-index", "--add", "--cacheinfo", "160000,"+sha+","+l)
	}
	git(t, ws, "commit", "-qm", "a")
	os.Mkdir(filepath.Join(ws, "present"), 0o755)
	os.MkdirAll(filepath.Join(ws, "gitdirs/wt"), 0o755)
	os.MkdirAll(filepath.Join(ws, "wt"), 0o755)
	os.WriteFile(filepath.Join(ws, "wt/.git"), []byte("gitdir: ../gitdirs/wt\n"), 0o644)
	return ws
}

// TestCompileGit: every .git is read-only as a whole; what a .git leads git
// to is read-only too: the git directory a .git file names, the directory
// of every submodule without a .git (created when missing, its parents
// pinned so they cannot be renamed away).
func TestCompileGit(t *testing.T) {
	ws := gitFixture(t)
	spec := &sandbox.Spec{Workspace: ws}
	// A dry run creates nothing.
	eff := compileEff(t, spec)
	if _, rep, err := Policy(eff, spec, Options{DryRun: true}); err != nil || len(rep.Created) != 5 {
		t.Fatalf("dry run: %v %v", rep.Created, err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "libs")); err == nil {
		t.Fatal("a dry run created libs")
	}
	out, rep, err := Policy(eff, spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := restrictions(out.Restrict)
	want := map[string]sandbox.RestrictMode{
		"/workspace/.git": sandbox.ReadOnly, "/workspace/sub/.git": sandbox.ReadOnly,
		"/workspace/libs": sandbox.Pin, "/workspace/libs/lib": sandbox.ReadOnly,
		"/workspace/deep": sandbox.Pin, "/workspace/deep/er": sandbox.Pin, "/workspace/deep/er/lib": sandbox.ReadOnly,
		"/workspace/present": sandbox.ReadOnly,
		"/workspace/wt/.git": sandbox.ReadOnly, "/workspace/gitdirs/wt": sandbox.ReadOnly,
		"/workspace/gitdirs": sandbox.Pin,
	}
	for p, m := range want {
		if got[p] != m {
			t.Errorf("%s: %q, want %q", p, got[p], m)
		}
	}
	for p, m := range got {
		if _, ok := want[p]; !ok && strings.Contains(p, "git") {
			t.Errorf("unexpected restriction %s %s", p, m)
		}
	}
	for _, d := range []string{"libs/lib", "deep/er/lib"} {
		st, err := os.Lstat(filepath.Join(ws, d))
		if err != nil || !st.IsDir() || !slices.Contains(rep.Created, filepath.Join(ws, d)) {
			t.Errorf("%s not created: %v %v", d, err, rep.Created)
		}
	}
	// The repository is as git left it: the created directories are how
	// git's checkout leaves uninitialized submodules.
	if st := git(t, ws, "status", "--porcelain"); st != "" {
		t.Errorf("git status after compile: %q", st)
	}
	// A second compile creates nothing.
	if _, rep, _ := Policy(eff, spec, Options{}); len(rep.Created) != 0 {
		t.Errorf("created again: %v", rep.Created)
	}
}

func compileEff(t *testing.T, spec *sandbox.Spec) *policy.Effective {
	t.Helper()
	eff, err := policy.Compile(Context(spec, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

// TestReadGitlinks: the index reader finds the gitlinks of the index
// versions git writes (2, 3 with extended flags, 4 with compressed names)
// and of SHA-256 repositories, and refuses what is not an index.
func TestReadGitlinks(t *testing.T) {
	for _, c := range []struct {
		name string
		init []string
		prep func(t *testing.T, ws string)
	}{
		{"v2", nil, nil},
		{"v3", nil, func(t *testing.T, ws string) {
			os.WriteFile(filepath.Join(ws, "new.txt"), nil, 0o644)
			git(t, ws, "add", "-N", "new.txt") // intent-to-add: an extended flag
		}},
		{"v4", nil, func(t *testing.T, ws string) { git(t, ws, "update-index", "--index-version", "4") }},
		{"sha256", []string{"--object-format=sha256"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ws := t.TempDir()
			git(t, ws, append([]string{"init", "-q"}, c.init...)...)
			for _, f := range []string{"a/b/c.txt", "a/b/d.txt", "z.txt"} {
				os.MkdirAll(filepath.Join(ws, filepath.Dir(f)), 0o755)
				os.WriteFile(filepath.Join(ws, f), []byte(f), 0o644)
			}
			git(t, ws, "add", ".")
			sha := git(t, ws, "hash-object", "-w", "z.txt")
			for _, l := range []string{"a/b/link", "m/sub", "zz"} {
				git(t, ws, "update-index", "--add", "--cacheinfo", "160000,"+sha+","+l)
			}
			if c.prep != nil {
				c.prep(t, ws)
			}
			links, err := readGitlinks(filepath.Join(ws, ".git"))
			if err != nil || !slices.Equal(links, []string{"a/b/link", "m/sub", "zz"}) {
				t.Fatalf("links %q %v", links, err)
			}
		})
	}
	dir := t.TempDir()
	if links, err := readGitlinks(dir); err != nil || links != nil {
		t.Errorf("no index: %v %v", links, err)
	}
	os.WriteFile(filepath.Join(dir, "index"), []byte("DIRX\x00\x00\x00\x02"), 0o644)
	if _, err := readGitlinks(dir); err == nil {
		t.Error("bad signature accepted")
	}
	// A FIFO or a symlink as the index is refused without being opened.
	fifo := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifo, "index"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readGitlinks(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("fifo: %v", err)
	}
	link := t.TempDir()
	os.Symlink(filepath.Join(dir, "index"), filepath.Join(link, "index"))
	if _, err := readGitlinks(link); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlink: %v", err)
	}
}

// FuzzParseGitlinks: any bytes as an index end in a list or an error,
// quickly, and every gitlink returned is a clean relative path.
func FuzzParseGitlinks(f *testing.F) {
	ws := f.TempDir()
	git(f, ws, "init", "-q")
	os.WriteFile(filepath.Join(ws, "x"), []byte("x"), 0o644)
	git(f, ws, "add", ".")
	sha := git(f, ws, "hash-object", "-w", "x")
	git(f, ws, "update-index", "--add", "--cacheinfo", "160000,"+sha+",l/k")
	for _, v := range []string{"2", "3", "4"} {
		git(f, ws, "update-index", "--index-version", v)
		b, err := os.ReadFile(filepath.Join(ws, ".git/index"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
	}
	f.Add([]byte("DIRC\x00\x00\x00\x04\xff\xff\xff\xff"), true)
	f.Add([]byte("DIRC\x00\x00\x00\x02\x00\x00\x00\x01"), false)
	f.Fuzz(func(t *testing.T, b []byte, sha256 bool) {
		hashLen := 20
		if sha256 {
			hashLen = 32
		}
		links, err := parseGitlinks(bufio.NewReader(bytes.NewReader(b)), hashLen)
		if err != nil && links != nil {
			t.Fatal("links with an error")
		}
		for _, l := range links {
			if !cleanRel(l) {
				t.Fatalf("unclean gitlink %q", l)
			}
		}
	})
}

// TestCompileEnclosingRepo: a workspace that is a directory of a host
// repository gets that repository's submodule directories protected, and
// the report says that a .git created in it is the sandbox's own.
func TestCompileEnclosingRepo(t *testing.T) {
	ws := gitFixture(t)
	sha := git(t, ws, "rev-parse", "HEAD")
	os.MkdirAll(filepath.Join(ws, "inner/src"), 0o755)
	git(t, ws, "update-index", "--add", "--cacheinfo", "160000,"+sha+",inner/vendor/lib")
	spec := &sandbox.Spec{Workspace: filepath.Join(ws, "inner")}
	out, rep, err := Policy(compileEff(t, spec), spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := restrictions(out.Restrict)
	if got["/workspace/vendor"] != sandbox.Pin || got["/workspace/vendor/lib"] != sandbox.ReadOnly {
		t.Errorf("restrictions %v", got)
	}
	if !strings.Contains(strings.Join(rep.Unenforced, "\n"), "is a directory of the repository "+ws) {
		t.Errorf("unenforced %q", rep.Unenforced)
	}
}
