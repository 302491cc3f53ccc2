package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestCopyAgainstDaemon runs CopyIn and CopyOut against a real `moat
// serve` whose sandbox has a workspace bound from the host, and plants
// symlinks there from inside the sandbox: through them a copy would read
// or write outside the workspace. Each planted link has a control (a
// plain host program goes through it), so only the SDK's refusal to
// follow it keeps the outside files unread and untouched.
func TestCopyAgainstDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	d := testutil.StartDaemon(t, t.TempDir(), "--listen", "127.0.0.1:0", "--allow-host-paths")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(client.WithHTTP(d.URL, d.Token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ws := t.TempDir()
	sb, err := c.CreateSandbox(ctx, api.CreateSandbox{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Delete(context.Background())

	outside := t.TempDir()
	const marker = "host-secret-5d1e0b"
	secret := filepath.Join(outside, "secret")
	writeFile(t, secret, marker+"\n", 0o600)
	sh(ctx, t, sb, strings.Join([]string{
		"echo payload > /workspace/payload",
		"mkdir -p /workspace/tree/sub && echo ok > /workspace/tree/sub/f",
		"ln -s " + secret + " /workspace/out",
		"ln -s " + outside + " /workspace/up",
		"ln -s " + secret + " /workspace/tree/inner",
		"mkfifo /workspace/tree/fifo",
	}, " && "))

	// Controls: on the host, the planted links lead outside.
	if b, err := os.ReadFile(filepath.Join(ws, "up", "secret")); err != nil || !strings.Contains(string(b), marker) {
		t.Fatalf("control: reading through /workspace/up: %q %v", b, err)
	}
	writeFile(t, filepath.Join(ws, "up", "ctl"), "x", 0o644)
	if _, err := os.Lstat(filepath.Join(outside, "ctl")); err != nil {
		t.Fatalf("control: a write through /workspace/up did not reach %s: %v", outside, err)
	}
	must(t, os.Remove(filepath.Join(outside, "ctl")))

	t.Run("out", func(t *testing.T) {
		for _, c := range []struct{ src, dst string }{
			{"/workspace/payload", "out"},       // the destination is a link to a file
			{"/workspace/payload", "up/secret"}, // a parent is a link
			{"/workspace/tree", "up/newtree"},   // ... for a tree
			{"/workspace/tree", "up"},           // the destination is a link to a directory
		} {
			_, err := sb.CopyOut(ctx, c.src, filepath.Join(ws, c.dst), nil)
			var he *client.HostPathError
			if !errors.Is(err, client.ErrHostSymlink) || !errors.As(err, &he) || !strings.Contains(err.Error(), "is a symlink") {
				t.Errorf("CopyOut %s %s: %v, want a HostPathError naming the symlink", c.src, c.dst, err)
			}
		}
		if b, _ := os.ReadFile(secret); string(b) != marker+"\n" {
			t.Errorf("the secret was written: %q", b)
		}
		dirHolds(t, outside, "secret")

		// A tree out: its symlinks arrive as symlinks, not followed.
		dst := t.TempDir()
		res, err := sb.CopyOut(ctx, "/workspace/tree", dst, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(dst, "tree"); res.Host != want || res.Path != "/workspace/tree" || !res.Archive || res.Bytes == 0 {
			t.Errorf("result %+v, want host %s", res, want)
		}
		if l, err := os.Readlink(filepath.Join(dst, "tree", "inner")); err != nil || l != secret {
			t.Errorf("inner: %q %v, want the link itself", l, err)
		}
		if b, err := os.ReadFile(filepath.Join(dst, "tree", "sub", "f")); err != nil || string(b) != "ok\n" {
			t.Errorf("sub/f: %q %v", b, err)
		}
		// Again, onto what is now there: a merge, the links replaced.
		if _, err := sb.CopyOut(ctx, "/workspace/tree", dst, nil); err != nil {
			t.Fatal(err)
		}
		// A file onto an existing file: overwritten in place, its mode
		// kept.
		f := filepath.Join(dst, "f")
		writeFile(t, f, "a longer old content", 0o640)
		if _, err := sb.CopyOut(ctx, "/workspace/payload", f, nil); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(f); string(b) != "payload\n" {
			t.Errorf("overwritten file: %q", b)
		}
		if st, _ := os.Stat(f); st.Mode() != 0o640 {
			t.Errorf("overwritten file: mode %v", st.Mode())
		}
		// The sandbox's / as the host's /: no name to write.
		if _, err := sb.CopyOut(ctx, "/", "/", nil); !errors.Is(err, client.ErrCopyPath) {
			t.Errorf("CopyOut of / to /: %v", err)
		}
	})

	t.Run("in", func(t *testing.T) {
		if _, err := sb.CopyIn(ctx, filepath.Join(ws, "up", "secret"), "/tmp/a", nil); !errors.Is(err, client.ErrHostSymlink) {
			t.Errorf("CopyIn through a planted parent: %v", err)
		}
		if _, err := sb.CopyIn(ctx, filepath.Join(ws, "up")+"/", "/tmp/b", nil); !errors.Is(err, client.ErrHostSymlink) {
			t.Errorf("CopyIn of a planted link as a directory: %v", err)
		}
		// A link as the source, or in a tree: copied as a link.
		res, err := sb.CopyIn(ctx, filepath.Join(ws, "out"), "/tmp/c", nil)
		if err != nil || !res.Archive || res.Path != "/tmp/c" || res.Host != filepath.Join(ws, "out") {
			t.Errorf("CopyIn of a link: %+v %v", res, err)
		}
		var skipped []string
		opt := &client.CopyOptions{Skipped: func(p, why string) { skipped = append(skipped, p) }}
		if _, err := sb.CopyIn(ctx, filepath.Join(ws, "tree"), "/tmp/", opt); err != nil {
			t.Fatal(err)
		}
		if want := []string{filepath.Join(ws, "tree", "fifo")}; !slices.Equal(skipped, want) {
			t.Errorf("skipped %q, want %q", skipped, want)
		}
		got := sh(ctx, t, sb, "grep -rl "+marker+" /tmp; echo grep=$?; "+
			"test -L /tmp/c && echo c-link; test -L /tmp/tree/inner && echo inner-link; "+
			"cat /tmp/tree/sub/f; test -e /tmp/tree/fifo || echo no-fifo")
		if want := "grep=1\nc-link\ninner-link\nok\nno-fifo\n"; got != want {
			t.Errorf("in the sandbox:\n%s\nwant\n%s", got, want)
		}
		// A regular file: one write, its mode kept.
		host := filepath.Join(t.TempDir(), "file")
		writeFile(t, host, "content", 0o640)
		res, err = sb.CopyIn(ctx, host, "/tmp/", nil)
		if err != nil || res.Archive || res.Path != "/tmp/file" || res.Bytes != 7 {
			t.Fatalf("CopyIn of a file: %+v %v", res, err)
		}
		if fi, err := sb.Stat(ctx, "/tmp/file"); err != nil || fi.Mode != 0o640 || fi.Size != 7 {
			t.Errorf("the copied file: %+v %v", fi, err)
		}
		if _, err := sb.CopyIn(ctx, filepath.Join(ws, "tree"), "/tmp/none/.", nil); !errors.Is(err, client.ErrCopyPath) {
			t.Errorf("CopyIn of a tree as .: %v", err)
		}
	})
}

// sh runs a shell script in the sandbox and returns its stdout.
func sh(ctx context.Context, t *testing.T, sb *client.Sandbox, script string) string {
	t.Helper()
	res, err := sb.Exec(ctx, api.Exec{Args: []string{"sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q: %+v %v", script, res, err)
	}
	return res.Stdout
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	must(t, os.WriteFile(p, []byte(content), mode))
	must(t, os.Chmod(p, mode))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
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
	if !slices.Equal(got, want) {
		t.Errorf("%s holds %q, want %q", dir, got, want)
	}
}
