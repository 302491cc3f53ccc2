package policy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tree makes a host layout under a temp dir: root/ws (workspace), root/home
// (home), and returns a resolving context.
func tree(t *testing.T) (root string, c Context) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"ws/src", "ws/.git/hooks", "home/.ssh/keys", "home/docs", "other"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"home/.ssh/id_rsa", "ws/notes.txt", "ws/src/a.go", "other/x"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, Context{Workspace: root + "/ws", Home: root + "/home", Resolve: true}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestResolveSymlinks(t *testing.T) {
	root, c := tree(t)
	ws, home := c.Workspace, c.Home
	symlink(t, home+"/.ssh", ws+"/link-to-ssh")           // absolute
	symlink(t, "../home/.ssh/keys", ws+"/rel-keys")       // relative
	symlink(t, "notes.txt", ws+"/.bashrc")                // protected name -> ordinary file
	symlink(t, ".git/hooks/pre-commit", ws+"/innocent")   // ordinary name -> protected file
	symlink(t, "loop2", ws+"/loop1")                      //
	symlink(t, "loop1", ws+"/loop2")                      //
	symlink(t, root+"/other", ws+"/out")                  // outside the workspace
	symlink(t, "src", ws+"/srclink")                      // inside
	symlink(t, "/", ws+"/rootlink")                       //
	symlink(t, home+"/.ssh/id_rsa", ws+"/src/config.txt") // a file link
	symlink(t, ws, root+"/wslink")                        // the workspace through a link

	f := layerFile(t, Project, "", nil, nil, []string{"Read(~/docs/**)"})
	e := mustCompile(t, c, f)
	checkDecisions(t, e, []dcase{
		{ReadPath(ws + "/link-to-ssh/id_rsa"), Deny, "~/.ssh", home + "/.ssh/id_rsa"},
		{ReadPath("link-to-ssh/id_rsa"), Deny, "~/.ssh", ""},
		{ReadPath(ws + "/link-to-ssh"), Deny, "~/.ssh", ""},
		{ReadPath(ws + "/link-to-ssh/"), Deny, "~/.ssh", ""},
		{ReadPath(ws + "/rel-keys/../id_rsa"), Deny, "~/.ssh", home + "/.ssh/id_rsa"},
		{ReadPath(ws + "/src/config.txt"), Deny, "~/.ssh", ""},
		{ReadPath(ws + "/rootlink" + home + "/.ssh/id_rsa"), Deny, "~/.ssh", ""},
		{ReadPath(ws + "/rootlink" + home + "/docs/a"), Deny, "profile untrusted", home + "/docs/a"},
		{WritePath(ws + "/.bashrc"), Deny, "shell rc", ""},
		{ReadPath(ws + "/.bashrc"), Allow, "default", ""},
		{WritePath(ws + "/innocent"), Deny, ".git is read-only", ""},
		{ReadPath(ws + "/loop1"), Deny, "invalid request", "too many levels"},
		{WritePath(ws + "/out/x"), Deny, "profile untrusted: writes only the workspace", root + "/other/x"},
		{WritePath(ws + "/srclink/new.go"), Allow, "default", ""},
		{WritePath(ws + "/newdir/deeper/file"), Allow, "default", ""},
		{WritePath(ws + "/newdir/../src/../../other/x"), Deny, "profile untrusted", ""},
		{WritePath(root + "/wslink/src/a.go"), Allow, "default", ""},
		{WritePath(root + "/wslink/.git/hooks/x"), Deny, ".git is read-only", ""},
	})
	// A workspace given through a symlink is resolved once.
	c2 := c
	c2.Workspace = root + "/wslink"
	e2 := mustCompile(t, c2)
	if e2.Context().Workspace != ws {
		t.Errorf("workspace = %s", e2.Context().Workspace)
	}
	checkDecisions(t, e2, []dcase{
		{WritePath(root + "/wslink/src/a.go"), Allow, "default", ""},
		{WritePath("src/b.go"), Allow, "default", ""},
	})
	if p, err := ResolvePath(ws + "/rel-keys/../id_rsa"); err != nil || p != home+"/.ssh/id_rsa" {
		t.Errorf("ResolvePath = %q, %v", p, err)
	}
	if _, err := ResolvePath("rel"); err == nil {
		t.Error("ResolvePath accepted a relative path")
	}
}

func TestLoadAndWatch(t *testing.T) {
	root, c := tree(t)
	c.Resolve = false
	src := Sources{Managed: root + "/etc/moat/policy.toml", Project: c.Workspace + "/.moat/policy.toml", User: c.Home + "/.config/moat/policy.toml"}
	// No files at all: fine, untrusted.
	e, err := Load(c, src)
	if err != nil || e.Profile() != Untrusted || len(e.Files()) != 0 {
		t.Fatalf("Load = %v, %v", e, err)
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(src.Project, "version = 1\ndeny = [\"Exec(git push*)\"]\n")
	write(src.User, "version = 1\nprofile = \"trusted\"\nask = [\"Exec(npm *)\"]\n")
	w, err := NewWatcher(c, src)
	if err != nil {
		t.Fatal(err)
	}
	cur := w.Current()
	if cur.Profile() != Trusted || len(cur.Files()) != 2 {
		t.Fatalf("profile %s, %d files", cur.Profile(), len(cur.Files()))
	}
	d := cur.Decide(ExecShell("git push"))
	if d.Rule.Source() != "project .moat/policy.toml:2" {
		t.Errorf("source %q", d.Rule.Source())
	}
	if d := cur.Decide(ExecShell("npm i")); d.Rule.Source() != "user ~/.config/moat/policy.toml:3" {
		t.Errorf("source %q", d.Rule.Source())
	}
	// The managed file's path is protected even before it exists.
	if d := cur.Decide(WritePath(src.Managed)); d.Effect != Deny || !strings.Contains(d.Reason, "policy file") {
		t.Errorf("write managed: %v", d.Reason)
	}
	if changed, err := w.Reload(); changed || err != nil {
		t.Errorf("Reload unchanged = %v, %v", changed, err)
	}
	// An invalid change keeps the last good policy.
	write(src.Project, "version = 1\ndeny = [\n  \"Exec(git push*)\",\n  \"Exec(\",\n]\n")
	changed, err := w.Reload()
	if changed || err == nil || !strings.Contains(err.Error(), "project .moat/policy.toml:4: deny: Exec(: unterminated pattern") {
		t.Fatalf("Reload bad = %v, %v", changed, err)
	}
	if w.Current() != cur || w.Err() == nil {
		t.Error("bad reload replaced the policy or lost the error")
	}
	if changed, err := w.Reload(); changed || err != nil || w.Err() == nil {
		t.Errorf("second Reload = %v, %v (Err %v)", changed, err, w.Err())
	}
	// A good change is picked up; holders of the old policy keep it.
	write(src.Project, "version = 1\ndeny = [\"Exec(curl *)\"]\n")
	changed, err = w.Reload()
	if !changed || err != nil || w.Err() != nil {
		t.Fatalf("Reload good = %v, %v", changed, err)
	}
	if w.Current().Profile() != Trusted || w.Current().Decide(ExecShell("curl x")).Effect != Deny {
		t.Error("new policy not in effect")
	}
	if cur.Decide(ExecShell("git push")).Effect != Deny {
		t.Error("old policy changed")
	}
	// Removal is a change too.
	if err := os.Remove(src.User); err != nil {
		t.Fatal(err)
	}
	if changed, _ := w.Reload(); !changed || len(w.Current().Files()) != 1 {
		t.Error("removal not seen")
	}
	// Unreadable: a directory where the file should be.
	if err := os.Remove(src.Project); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(src.Project, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Reload(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Reload dir = %v", err)
	}
	if _, err := Load(c, src); err == nil {
		t.Error("Load accepted a directory")
	}
	// Run notifies on changes.
	if err := os.Remove(src.Project); err != nil {
		t.Fatal(err)
	}
	write(src.Project, "version = 1\n")
	got := make(chan *Effective, 1)
	ctx, cancel := contextWithCancel()
	defer cancel()
	go w.Run(ctx, 5*time.Millisecond, func(e *Effective, err error) {
		if err == nil {
			select {
			case got <- e:
			default:
			}
		}
	})
	select {
	case e := <-got:
		if len(e.Files()) != 1 {
			t.Errorf("files %d", len(e.Files()))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not notify")
	}
	// A failing first load is an error.
	write(src.User, "version = 3\n")
	if _, err := NewWatcher(c, src); err == nil || !strings.Contains(err.Error(), "user ~/.config/moat/policy.toml:1: version: version 3 is newer") {
		t.Errorf("NewWatcher = %v", err)
	}
	var pe *ParseError
	if _, err := Load(c, src); !errors.As(err, &pe) || pe.Layer != User {
		t.Errorf("Load error %v", err)
	}
}

func TestDefaultSources(t *testing.T) {
	s := DefaultSources(tctx)
	if s.Managed != "/etc/moat/policy.toml" || s.Project != "/ws/.moat/policy.toml" || s.User != "/home/u/.config/moat/policy.toml" {
		t.Errorf("%+v", s)
	}
	if _, err := Compile(Context{Workspace: "ws", Home: "/h"}); err == nil {
		t.Error("relative workspace accepted")
	}
	if _, err := Compile(Context{Workspace: "/ws"}); err == nil {
		t.Error("missing home accepted")
	}
}

func TestRootsAndExplain(t *testing.T) {
	user := layerFile(t, User, Trusted, []string{"Write(~/.cache/**)", "Write(/data/build-*/out)", "Net(domain:*.github.com)"},
		[]string{"Read(~/mail/**)"}, []string{"Read(*.sqlite)", "Write(~/.cache/secret)"})
	e := mustCompile(t, tctx, user)
	r := e.Roots()
	has := func(list []PathEntry, pattern string, literal bool) bool {
		for _, x := range list {
			if x.Pattern == pattern && x.Literal == literal {
				return true
			}
		}
		return false
	}
	checks := []struct {
		name    string
		list    []PathEntry
		pattern string
		literal bool
	}{
		{"readable /", r.Readable, "/", true},
		{"writable ws", r.Writable, "/ws", true},
		{"writable cache", r.Writable, "/home/u/.cache/**", true},
		{"writable data", r.Writable, "/data/build-*/out", false},
		{"deny ssh", r.DenyRead, "/home/u/.ssh", true},
		{"deny pem", r.DenyRead, "**/*.pem", false},
		{"deny sqlite", r.DenyRead, "**/*.sqlite", false},
		{"ask mail", r.DenyRead, "/home/u/mail/**", true},
		{"deny proc", r.DenyRead, "/proc", true},
		{"ro .git", r.ReadOnly, "/ws/.git", true},
		{"ro .git any", r.ReadOnly, "/ws/**/.git", false},
		{"ro bashrc home", r.ReadOnly, "/home/u/.cache/.bashrc", true},
		{"ro policy", r.ReadOnly, "/ws/.moat/policy.toml", true},
		{"ro secret", r.ReadOnly, "/home/u/.cache/secret", true},
	}
	for _, c := range checks {
		if !has(c.list, c.pattern, c.literal) {
			t.Errorf("%s: %q (literal %v) missing", c.name, c.pattern, c.literal)
		}
	}
	for _, x := range r.Writable {
		if x.Pattern == "/data/build-*/out" && x.Path != "/data" {
			t.Errorf("data root path %q", x.Path)
		}
	}
	if len(r.NetAllow) != 1 || r.NetAllow[0] != "*.github.com" {
		t.Errorf("net %v", r.NetAllow)
	}
	x := e.Explain(ReadPath("~/.ssh/id_rsa"), ExecShell("git push"))
	if len(x.Decisions) != 2 || x.Decisions[0].Effect != Deny || len(x.Layers) != 1 || x.Layers[0].Rules != 6 {
		t.Errorf("explain %+v", x)
	}
	if _, err := json.Marshal(x); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(x.Decisions[0])
	if !strings.Contains(string(b), `"effect":"deny"`) || !strings.Contains(string(b), `"layer":"builtin"`) {
		t.Errorf("json %s", b)
	}
	u := mustCompile(t, tctx).Roots()
	if len(u.Readable) != 1+len(SystemReadDirs) || u.Readable[0].Pattern != "/ws" || len(u.NetAllow) != 0 {
		t.Errorf("untrusted roots %+v", u.Readable)
	}
}

func TestParseRequest(t *testing.T) {
	for in, want := range map[string]Request{
		"Exec(git push)":       ExecShell("git push"),
		"Read(~/.ssh/id_rsa)":  ReadPath("~/.ssh/id_rsa"),
		" Write( src/a.go ) ":  WritePath("src/a.go"),
		"Net(github.com:443)":  NetHost("github.com:443"),
		"Net(domain:x.org)":    NetHost("x.org"),
		"Exec(echo $(date))":   ExecShell("echo $(date)"),
		"Read(/a (copy)/b)":    ReadPath("/a (copy)/b"),
		"Write(/x/.git/hooks)": WritePath("/x/.git/hooks"),
	} {
		got, err := ParseRequest(in)
		if err != nil || got.String() != want.String() || got.Kind != want.Kind {
			t.Errorf("ParseRequest(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "git push", "Run(x)", "Exec(x"} {
		if _, err := ParseRequest(bad); err == nil {
			t.Errorf("ParseRequest(%q) accepted", bad)
		}
	}
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}
