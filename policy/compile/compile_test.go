package compile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// tree makes files (paths ending in "/" are directories) under a fresh
// directory and returns it.
func tree(t *testing.T, paths ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range paths {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func compileFor(t *testing.T, spec *sandbox.Spec, home string, files ...*policy.File) (*sandbox.Spec, *Report, error) {
	t.Helper()
	eff, err := policy.Compile(Context(spec, home), files...)
	if err != nil {
		t.Fatal(err)
	}
	return Policy(eff, spec, Options{})
}

func parse(t *testing.T, layer policy.Layer, text string) *policy.File {
	t.Helper()
	f, err := policy.Parse(layer, layer.String()+".toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func restrictions(rs []sandbox.Restriction) map[string]sandbox.RestrictMode {
	m := map[string]sandbox.RestrictMode{}
	for _, r := range rs {
		m[r.Path] = r.Mode
	}
	return m
}

func TestView(t *testing.T) {
	v := NewView(&sandbox.Spec{Workspace: "/h/ws", Binds: []sandbox.Bind{
		{Source: "/h/data", Target: "/data"}, {Source: "/h/ws-out", Target: "/workspace/out", Writable: true}, {Source: "/opt/x"},
	}})
	for in, want := range map[string]string{
		"/workspace": "/h/ws", "/workspace/a/b": "/h/ws/a/b", "/workspace/out/f": "/h/ws-out/f",
		"/data/../data/x": "/h/data/x", "/opt/x/y": "/opt/x/y", "/usr/bin/ls": "/usr/bin/ls", "/etc/hosts": "/etc/hosts",
		"/tmp/x": "", "/home/sandbox/.bashrc": "", "/proc/1/environ": "", "/workspacex": "",
	} {
		got, ok := v.Host(in)
		if got != want || ok != (want != "") {
			t.Errorf("Host(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if p, tr, ok := v.Sandbox("/h/ws-out/f"); !ok || p != "/workspace/out/f" || !tr.Writable {
		t.Errorf("Sandbox = %q %+v %v", p, tr, ok)
	}
	if _, _, ok := v.Sandbox("/h/other"); ok {
		t.Error("Sandbox of an unseen path")
	}
	// An in-memory workspace maps to sandbox.WorkspaceDir, the policy's anchor.
	if got, ok := NewView(&sandbox.Spec{}).Host("/workspace/src"); !ok || got != "/workspace/src" {
		t.Errorf("memory workspace: %q %v", got, ok)
	}
}

// TestCompileWorkspace: protected entries and credential files of a bound
// workspace become restrictions, at any depth: every .git is read-only as
// a whole; what cannot be enforced is reported.
func TestCompileWorkspace(t *testing.T) {
	ws := tree(t, ".git/config", ".git/objects/ab/cd", "sub/.git/config", "sub/.git/hooks/",
		"server.pem", ".env", ".bashrc", "src/main.go", "src/deep/id_rsa", "docs/.zshrc",
		"certs/", ".moat/policy.toml", "node_modules/m/.git/config")
	spec := &sandbox.Spec{Workspace: ws}
	out, rep, err := compileFor(t, spec, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]sandbox.RestrictMode{
		"/workspace/.git": sandbox.ReadOnly, "/workspace/sub/.git": sandbox.ReadOnly,
		"/workspace/node_modules/m/.git": sandbox.ReadOnly,
		"/workspace/server.pem":          sandbox.Hide, "/workspace/.env": sandbox.Hide, "/workspace/src/deep/id_rsa": sandbox.Hide,
		"/workspace/.bashrc": sandbox.ReadOnly, "/workspace/docs/.zshrc": sandbox.ReadOnly,
		"/workspace/.moat": sandbox.Pin, "/workspace/.moat/policy.toml": sandbox.ReadOnly,
	}
	got := restrictions(out.Restrict)
	for p, m := range want {
		if got[p] != m {
			t.Errorf("%s: %q, want %q", p, got[p], m)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("unexpected restriction %s %s", p, got[p])
		}
	}
	// Parents come before children.
	for i := 1; i < len(out.Restrict); i++ {
		if strings.Count(out.Restrict[i].Path, "/") < strings.Count(out.Restrict[i-1].Path, "/") {
			t.Fatalf("not sorted by depth: %v", out.Restrict)
		}
	}
	if len(spec.Restrict) != 0 {
		t.Error("Compile changed its input")
	}
	if len(rep.Created) != 0 {
		t.Errorf("created %v", rep.Created)
	}
	if !strings.Contains(strings.Join(rep.Unenforced, "\n"), "do not exist yet") {
		t.Errorf("unenforced %q", rep.Unenforced)
	}
	// Nothing below a .git is searched.
	if rep.Walked > 30 {
		t.Errorf("walked %d entries", rep.Walked)
	}
}

// TestCompileRules: deny Read and deny Write rules of the layers become
// hidden and read-only paths; a rule inside a read-only tree needs no
// mount; exemptions hold (certificates under /etc/ssl/certs are readable).
func TestCompileRules(t *testing.T) {
	ws := tree(t, "secrets/a", "vendor/lib.go", "src/a.go", "data/keep")
	ro := tree(t, "ref/x.key", "ref/notes")
	user := parse(t, policy.User, "version = 1\ndeny = [\"Read(secrets/**)\", \"Write(vendor/**)\", \"Read(notes)\"]\nask = [\"Write(data/**)\"]\n")
	out, _, err := compileFor(t, &sandbox.Spec{Workspace: ws, Binds: []sandbox.Bind{{Source: ro, Target: "/ref"}}}, t.TempDir(), user)
	if err != nil {
		t.Fatal(err)
	}
	got := restrictions(out.Restrict)
	for p, m := range map[string]sandbox.RestrictMode{
		"/workspace/secrets": sandbox.Hide, "/workspace/vendor": sandbox.ReadOnly, "/workspace/data": sandbox.ReadOnly,
		"/ref/ref/x.key": sandbox.Hide, "/ref/ref/notes": sandbox.Hide,
	} {
		if got[p] != m {
			t.Errorf("%s: %q, want %q (all: %v)", p, got[p], m, got)
		}
	}
	if _, ok := got["/workspace/src"]; ok {
		t.Error("src restricted")
	}
}

// TestCompileDeniedBinds: a spec that binds what the policy refuses is an
// error, not a sandbox with a hole.
func TestCompileDeniedBinds(t *testing.T) {
	home := tree(t, ".ssh/id_ed25519", "proj/.git/hooks/", "proj/.git/config")
	for _, b := range []sandbox.Bind{
		{Source: filepath.Join(home, ".ssh")},
		{Source: filepath.Join(home, ".ssh/id_ed25519"), Target: "/k"},
		{Source: filepath.Join(home, "proj/.git/hooks"), Target: "/h", Writable: true},
	} {
		_, _, err := compileFor(t, &sandbox.Spec{Binds: []sandbox.Bind{b}}, home)
		var de *DeniedError
		if !errors.As(err, &de) || !errors.Is(err, ErrDenied) || de.Decision.Reason == "" {
			t.Errorf("%+v: %v", b, err)
		}
	}
	// The home itself may be bound: its credentials are hidden inside.
	out, _, err := compileFor(t, &sandbox.Spec{Binds: []sandbox.Bind{{Source: home, Target: "/h"}}}, home)
	if err != nil {
		t.Fatal(err)
	}
	if got := restrictions(out.Restrict); got["/h/.ssh"] != sandbox.Hide {
		t.Errorf("restrict %v", got)
	}
}

// TestCompileBudget: past the walk budget the rest is reported, not
// silently skipped.
func TestCompileBudget(t *testing.T) {
	var paths []string
	for i := 0; i < 50; i++ {
		paths = append(paths, filepath.Join("d", strings.Repeat("x", i+1), "f"))
	}
	ws := tree(t, paths...)
	eff, err := policy.Compile(Context(&sandbox.Spec{Workspace: ws}, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	_, rep, err := Policy(eff, &sandbox.Spec{Workspace: ws}, Options{MaxWalk: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Walked != 10 || !strings.Contains(strings.Join(rep.Unenforced, "\n"), "searched only in part") {
		t.Errorf("walked %d, unenforced %q", rep.Walked, rep.Unenforced)
	}
}

// TestCompileTrusted: the trusted profile shows the host's directories
// read-only except the host's runtime directories, the system ones (bound
// anyway) and what the sandbox provides; credentials in the home are
// hidden; allow Write roots of the user file are writable binds.
func TestCompileTrusted(t *testing.T) {
	base, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory")
	}
	home, err := os.MkdirTemp(base, ".moat-enforce-test-")
	if err != nil {
		t.Skipf("cannot create a test home under %s: %v", base, err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	for _, p := range []string{".ssh/id_rsa", ".aws/credentials", "cache/x", "notes.txt"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(home, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, p), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	user := parse(t, policy.User, "version = 1\nprofile = \"trusted\"\nallow = [\"Write("+home+"/cache/**)\"]\n")
	out, rep, err := compileFor(t, &sandbox.Spec{}, home, user)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Profile != policy.Trusted {
		t.Fatalf("profile %s", rep.Profile)
	}
	binds := map[string]bool{}
	for _, b := range out.Binds {
		if b.Source != b.Target {
			t.Errorf("bind %+v: source and target differ", b)
		}
		binds[b.Target] = b.Writable
	}
	for _, no := range []string{"/proc", "/sys", "/dev", "/run", "/tmp", "/usr", "/etc", "/workspace", "/boot", "/home/sandbox"} {
		if _, ok := binds[no]; ok {
			t.Errorf("%s bound", no)
		}
	}
	if w, ok := binds[filepath.Join(home, "cache")]; !ok || !w {
		t.Errorf("writable root not bound writable: %v", binds)
	}
	got := restrictions(out.Restrict)
	for _, p := range []string{".ssh", ".aws"} {
		if got[filepath.Join(home, p)] != sandbox.Hide {
			t.Errorf("%s not hidden: %v", p, got)
		}
	}
	if _, ok := got[filepath.Join(home, "notes.txt")]; ok {
		t.Error("notes hidden")
	}
	if !strings.Contains(strings.Join(rep.Unenforced, "\n"), "not searched for in the host directories") {
		t.Errorf("unenforced %q", rep.Unenforced)
	}
	// The project layer cannot make a sandbox trusted.
	ws := tree(t, ".moat/policy.toml")
	proj := parse(t, policy.Project, "version = 1\nprofile = \"trusted\"\n")
	_, rep, err = compileFor(t, &sandbox.Spec{Workspace: ws}, home, proj)
	if err != nil || rep.Profile != policy.Untrusted || len(rep.Binds) != 0 {
		t.Errorf("project trusted: %v %+v", err, rep)
	}
}

// TestCompileFIFOBind: a bound FIFO is never opened (the open would block).
func TestCompileFIFOBind(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	spec := &sandbox.Spec{Binds: []sandbox.Bind{{Source: fifo, Target: "/f"}}}
	if _, _, err := compileFor(t, spec, t.TempDir()); err != nil {
		t.Fatal(err)
	}
}
