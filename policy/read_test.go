package policy

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within runs f and fails the test if it has not returned within d (a
// read that blocks on a FIFO never returns).
func within[T any](t *testing.T, d time.Duration, f func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no answer within %v: the read blocks", d)
	}
	panic("unreachable")
}

type loaded struct {
	f   *File
	err error
}

// TestLoadFileSpecial: a project policy file that is a FIFO, a socket, a
// directory, a file over MaxFileSize, a symlink, or under a symlinked
// .moat is refused at once with an error naming the problem; the
// operator's files may be symlinks but must lead to a regular file.
func TestLoadFileSpecial(t *testing.T) {
	root, c := tree(t)
	ws := c.Workspace
	proj := filepath.Join(ws, ProjectPath)
	if err := os.Mkdir(filepath.Dir(proj), 0o755); err != nil {
		t.Fatal(err)
	}
	// The target of the links: a valid policy file outside the
	// workspace, which following the link would load (control below).
	outside := filepath.Join(root, "other", "policy.toml")
	if err := os.WriteFile(outside, []byte("version = 1\ndeny = [\"Exec(outside-marker)\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(layer Layer, p string) loaded {
		return within(t, 10*time.Second, func() loaded {
			f, err := LoadFile(c, layer, p)
			return loaded{f, err}
		})
	}
	// Control: the target reads and parses when given directly.
	if l := load(User, outside); l.err != nil || l.f == nil || len(l.f.Rules) != 1 {
		t.Fatalf("control: %+v", l)
	}
	reset := func() {
		t.Helper()
		if err := os.RemoveAll(filepath.Dir(proj)); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Dir(proj), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		make func() error
		want string
	}{
		{"fifo", func() error { return syscall.Mkfifo(proj, 0o644) }, "not a regular file"},
		{"directory", func() error { return os.Mkdir(proj, 0o755) }, "not a regular file (a directory)"},
		{"socket", func() error {
			l, err := net.Listen("unix", proj)
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return err
		}, "not a regular file"},
		{"too big", func() error {
			f, err := os.Create(proj)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(MaxFileSize + 1) // sparse: never read
		}, "larger than 1048576 bytes"},
		{"symlink", func() error { return os.Symlink(outside, proj) }, "is a symlink"},
		{"relative symlink", func() error { return os.Symlink("../../other/policy.toml", proj) }, "is a symlink"},
		{"dangling symlink", func() error { return os.Symlink(filepath.Join(root, "other", "absent"), proj) }, "is a symlink"},
		{"symlinked .moat", func() error {
			if err := os.Remove(filepath.Dir(proj)); err != nil {
				return err
			}
			return os.Symlink(filepath.Join(root, "other"), filepath.Dir(proj))
		}, "is a symlink"},
	} {
		reset()
		if err := c.make(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		l := load(Project, proj)
		if l.err == nil || !strings.Contains(l.err.Error(), c.want) || !strings.Contains(l.err.Error(), "project .moat/policy.toml") {
			t.Errorf("%s: %+v, want an error with %q", c.name, l, c.want)
			continue
		}
		if !errors.Is(l.err, ErrUnsafeFile) || strings.Contains(l.err.Error(), root) {
			t.Errorf("%s: %v: not ErrUnsafeFile, or names the host path", c.name, l.err)
		}
		// Load (all layers) fails the same way, at once.
		if l := within(t, 10*time.Second, func() loaded {
			_, err := Load(Context{Workspace: ws, Resolve: true}, Sources{Project: proj})
			return loaded{nil, err}
		}); !errors.Is(l.err, ErrUnsafeFile) {
			t.Errorf("%s: Load: %v", c.name, l.err)
		}
	}
	// A missing file is no file.
	reset()
	if l := load(Project, proj); l.err != nil || l.f != nil {
		t.Fatalf("missing: %+v", l)
	}
	// The operator's files: a symlink is followed, to a regular file only.
	userLink := filepath.Join(c.Home, "policy-link.toml")
	if err := os.Symlink(outside, userLink); err != nil {
		t.Fatal(err)
	}
	if l := load(User, userLink); l.err != nil || l.f == nil || len(l.f.Rules) != 1 {
		t.Fatalf("user symlink: %+v", l)
	}
	fifo := filepath.Join(c.Home, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if l := load(Managed, fifo); l.err == nil || !strings.Contains(l.err.Error(), "not a regular file") {
		t.Fatalf("managed fifo: %+v", l)
	}
	if err := os.Symlink(fifo, userLink+"2"); err != nil {
		t.Fatal(err)
	}
	if l := load(User, userLink+"2"); l.err == nil || !strings.Contains(l.err.Error(), "not a regular file") {
		t.Fatalf("user link to a fifo: %+v", l)
	}
	// ReadFile (moat policy check) is the operator's reader.
	l := within(t, 10*time.Second, func() loaded { _, err := ReadFile(fifo); return loaded{nil, err} })
	if l.err == nil || !strings.Contains(l.err.Error(), "policy: "+fifo+": not a regular file") {
		t.Fatalf("ReadFile fifo: %v", l.err)
	}
}

// TestParseErrorsEscaped: what a parse error shows of a file's content
// (keys, values, rule text, the TOML parser's message) is escaped and
// cut: no control character, no unbounded name.
func TestParseErrorsEscaped(t *testing.T) {
	long := strings.Repeat("k", 5000)
	for _, c := range []struct{ text, want string }{
		{long + " = 1\nversion = 1\n", `unknown key "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"…(5000 bytes)`},
		{"version = 1\n\"a\\u001b[2Jb\" = 1\n", `unknown key "a\x1b[2Jb"`},
		{"version = 1\nprofile = \"x\\u001b]8;;\"\n", `unknown profile "x\x1b]8;;"`},
		{"version = 1\n[\"t\\u0007\"]\n", `unknown table [t\a]`},
		{"version = 1\nallow = [\"Exec(\\u001b[31m\"]\n", `Exec(\x1b[31m`},
		{"version = 1\nallow = [\"Exec(" + long[:3000] + "\"]\n", `…(`},
	} {
		_, err := Parse(Project, ".moat/policy.toml", []byte(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40q: %v, want %q", c.text, err, c.want)
			continue
		}
		msg := err.Error()
		if len(msg) > 600 {
			t.Errorf("%.40q: message of %d bytes", c.text, len(msg))
		}
		for _, r := range msg {
			if r < 0x20 && r != '\n' || r == 0x7f {
				t.Errorf("%.40q: control character %U in %q", c.text, r, msg)
			}
		}
	}
}
