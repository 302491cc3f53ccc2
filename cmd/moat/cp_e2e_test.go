package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// These tests run a real daemon with a real bound workspace. The sandbox
// plants symlinks in /workspace, which the host sees in the bound
// directory, and `moat sandbox cp` is then pointed at them, both ways.
// Every attempt has a control: the same planted link, used by a plain
// host program (os.WriteFile, os.ReadFile), does reach the file outside
// the workspace, so the link is live and only moat's refusal to follow it
// keeps the outside file untouched (or unread).

// cpSandbox starts a daemon that binds host paths and creates a sandbox
// whose workspace is a fresh host directory; it returns the sandbox's id
// and the workspace.
func cpSandbox(t *testing.T) (id, ws string) {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	d := testutil.StartDaemon(t, dir, "--listen", "unix:"+sock, "--allow-host-paths")
	t.Setenv("MOAT_MODE", "")
	t.Setenv("MOAT_URL", "unix:"+sock)
	t.Setenv("MOAT_TOKEN", d.Token)
	ws = t.TempDir()
	out, errOut, code := sbRun(t, "", "create", "--workspace", ws)
	if code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	id = strings.TrimSpace(out)
	t.Cleanup(func() { sbRun(t, "", "rm", id) })
	return id, ws
}

// sbSh runs a shell script in the sandbox and returns its stdout.
func sbSh(t *testing.T, id, script string) string {
	t.Helper()
	out, errOut, code := sbRun(t, "", "exec", id, "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exec %q: %d %q %q", script, code, out, errOut)
	}
	return out
}

// hostFile writes a root-owned file of mode 0600 (the kind of file an
// escape would target) and returns its path.
func hostFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// untouched fails unless p still holds content with mode 0600 and owner
// root.
func untouched(t *testing.T, p, content string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || string(b) != content {
		t.Errorf("%s was changed: %q %v", p, b, err)
	}
	st, err := os.Lstat(p)
	if err != nil || st.Mode() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("%s: mode or owner changed: %v %v", p, st.Mode(), err)
	}
}

// dirHolds fails unless dir holds exactly the names want.
func dirHolds(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s holds %q, want %q", dir, got, want)
	}
}

// TestCopyOutPlantedSymlink: copying out of a sandbox to a destination in
// its bound workspace never writes through a symlink the sandbox planted,
// whether it is the destination itself (to a file or to a directory) or
// one of its parents.
func TestCopyOutPlantedSymlink(t *testing.T) {
	id, ws := cpSandbox(t)
	outside := t.TempDir()
	secret := hostFile(t, outside, "secret", "root's secret\n")
	ctlFile := hostFile(t, outside, "control", "control\n")
	dirTarget := filepath.Join(outside, "etc")
	ctlDir := filepath.Join(outside, "ctl-etc")
	for _, d := range []string{dirTarget, ctlDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sbSh(t, id, strings.Join([]string{
		"echo pwned > /workspace/payload",
		"mkdir -p /workspace/tree/sub && echo pwned > /workspace/tree/sub/f",
		"ln -s " + secret + " /workspace/out",
		"ln -s " + dirTarget + " /workspace/outdir",
		"ln -s " + outside + " /workspace/up",
		"ln -s " + ctlFile + " /workspace/ctl",
		"ln -s " + ctlDir + " /workspace/ctldir",
	}, " && "))

	// Controls: the planted links are live on the host.
	if err := os.WriteFile(filepath.Join(ws, "ctl"), []byte("through the link\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(ctlFile); string(b) != "through the link\n" {
		t.Fatalf("control: a write through /workspace/ctl did not reach %s: %q", ctlFile, b)
	}
	if err := os.WriteFile(filepath.Join(ws, "ctldir", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "up", "ctl-new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dirHolds(t, ctlDir, "f")
	if _, err := os.Lstat(filepath.Join(outside, "ctl-new")); err != nil {
		t.Fatalf("control: a write through /workspace/up did not reach %s: %v", outside, err)
	}
	os.Remove(filepath.Join(outside, "ctl-new"))

	for _, c := range []struct{ src, dst string }{
		{"/workspace/payload", "out"},        // the destination is a link to a file
		{"/workspace/tree", "outdir"},        // ... to a directory (cp would copy into it)
		{"/workspace/tree", "outdir/"},       // ... named as a directory
		{"/workspace/payload", "up/secret"},  // a parent is a link
		{"/workspace/tree", "up/newtree"},    // ... for a tree
		{"/workspace/payload", "up/etc/new"}, // ... deeper
	} {
		dst := filepath.Join(ws, c.dst)
		if strings.HasSuffix(c.dst, "/") {
			dst += "/"
		}
		out, errOut, code := sbRun(t, "", "cp", id+":"+c.src, dst)
		if code == 0 {
			t.Errorf("cp %s %s succeeded: %q %q", c.src, dst, out, errOut)
		} else if !strings.Contains(errOut, "symlink") {
			t.Errorf("cp %s %s: the error does not name the symlink: %q", c.src, dst, errOut)
		}
	}
	untouched(t, secret, "root's secret\n")
	dirHolds(t, dirTarget)
	dirHolds(t, outside, "control", "ctl-etc", "etc", "secret")

	// The links themselves are left as they were.
	if l, err := os.Readlink(filepath.Join(ws, "out")); err != nil || l != secret {
		t.Errorf("the planted link was changed: %q %v", l, err)
	}

	// The same copies to places without a planted link work.
	for _, c := range []struct{ src, dst, file, want string }{
		{"/workspace/payload", "copied", "copied", "pwned\n"},
		{"/workspace/tree", "tree2", "tree2/sub/f", "pwned\n"},
		{"/workspace/tree", "tree2", "tree2/tree/sub/f", "pwned\n"}, // into the existing directory
	} {
		if out, errOut, code := sbRun(t, "", "cp", id+":"+c.src, filepath.Join(ws, c.dst)); code != 0 {
			t.Fatalf("cp %s: %d %q %q", c.src, code, out, errOut)
		}
		if b, err := os.ReadFile(filepath.Join(ws, c.file)); err != nil || string(b) != c.want {
			t.Errorf("%s: %q %v", c.file, b, err)
		}
	}
}

// TestCopyInPlantedSymlink: copying a host path of a bound workspace into
// a sandbox never reads a host file through a symlink the sandbox
// planted: not as the source itself, not as a parent of the source, not
// inside a copied tree.
func TestCopyInPlantedSymlink(t *testing.T) {
	id, ws := cpSandbox(t)
	outside := t.TempDir()
	const marker = "host-secret-3f9a1c"
	secret := hostFile(t, outside, "secret", marker+"\n")
	if err := os.Mkdir(filepath.Join(outside, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	hostFile(t, filepath.Join(outside, "private"), "key", marker+"\n")
	sbSh(t, id, strings.Join([]string{
		"ln -s " + secret + " /workspace/leak",
		"ln -s " + filepath.Join(outside, "private") + " /workspace/leakdir",
		"ln -s " + outside + " /workspace/up",
		"mkdir -p /workspace/tree/sub",
		"echo ok > /workspace/tree/ok",
		"ln -s " + secret + " /workspace/tree/inner",
		"ln -s " + outside + " /workspace/tree/sub/innerdir",
		"mkfifo /workspace/tree/fifo",
	}, " && "))

	// Controls: on the host, the links lead to the secret.
	for _, p := range []string{"leak", "leakdir/key", "up/secret", "tree/inner", "tree/sub/innerdir/secret"} {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || !bytes.Contains(b, []byte(marker)) {
			t.Fatalf("control: reading %s on the host does not give the secret: %q %v", p, b, err)
		}
	}

	for i, c := range []struct {
		src    string
		refuse bool // moat refuses (rather than copying the link as a link)
	}{
		{"leak", false},
		{"leakdir", false},
		{"leakdir/", true},
		{"up/secret", true},
		{"up/private", true},
		{"tree", false},
	} {
		dst := id + ":/tmp/in" + string(rune('a'+i))
		src := filepath.Join(ws, c.src)
		if strings.HasSuffix(c.src, "/") {
			src += "/"
		}
		out, errOut, code := sbRun(t, "", "cp", src, dst)
		switch {
		case c.refuse && code == 0:
			t.Errorf("cp %s: succeeded: %q %q", c.src, out, errOut)
		case c.refuse && !strings.Contains(errOut, "symlink"):
			t.Errorf("cp %s: the error does not name the symlink: %q", c.src, errOut)
		case !c.refuse && code != 0:
			t.Errorf("cp %s: %d %q %q", c.src, code, out, errOut)
		}
	}
	// Nothing in the sandbox holds the secret; the links arrived as links.
	got := sbSh(t, id, "grep -rl "+marker+" /tmp /workspace; echo grep=$?; "+
		"test -L /tmp/ina && echo ina-link; test -L /tmp/inb && echo inb-link; "+
		"test -L /tmp/inf/inner && echo inner-link; test -L /tmp/inf/sub/innerdir && echo innerdir-link; "+
		"cat /tmp/inf/ok; test -e /tmp/inf/fifo || echo no-fifo")
	if want := "grep=1\nina-link\ninb-link\ninner-link\ninnerdir-link\nok\nno-fifo\n"; got != want {
		t.Errorf("in the sandbox:\n%s\nwant\n%s", got, want)
	}
}
