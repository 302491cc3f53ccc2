package fstree

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/hosttest"
	"golang.org/x/sys/unix"
)

// hostWrite runs WriteTar as a copy into a sandbox does, the entries left
// out written to warn ("rel: why" lines).
func hostWrite(w io.Writer, dirfd int, name, entry string, warn io.Writer) error {
	opt := HostOptions{Limits: hostLimits, Skipped: func(rel, why string) { fmt.Fprintf(warn, "%s: %s\n", rel, why) }}
	_, err := WriteTar(context.Background(), w, dirfd, name, entry, opt)
	return err
}

var readTar = hosttest.ReadTar

// TestWriteTarNoFollow: a host tree travels with its symlinks as
// symlinks; FIFOs and sockets are skipped (never opened, so nothing
// blocks); a source that is a symlink is a symlink entry.
func TestWriteTarNoFollow(t *testing.T) {
	base := realTempDir(t)
	outside := realTempDir(t)
	secret := filepath.Join(outside, "secret")
	must(t, os.WriteFile(secret, []byte("secret"), 0o600))
	tree := filepath.Join(base, "tree")
	must(t, os.MkdirAll(filepath.Join(tree, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(tree, "ok"), []byte("ok"), 0o644))
	must(t, os.Symlink(secret, filepath.Join(tree, "leak")))
	must(t, os.Symlink(outside, filepath.Join(tree, "sub", "leakdir")))
	must(t, unix.Mkfifo(filepath.Join(tree, "fifo"), 0o600))
	l, err := net.Listen("unix", filepath.Join(tree, "sock"))
	must(t, err)
	defer l.Close()
	must(t, os.Symlink(tree, filepath.Join(base, "treelink")))

	dirfd := openDirFd(t, base)
	var buf, warn bytes.Buffer
	must(t, hostWrite(&buf, dirfd, "tree", "tree", &warn))
	got := readTar(t, &buf)
	want := []string{"tree/ 5", "tree/leak 2 " + secret, "tree/ok 0  ok", "tree/sub/ 5", "tree/sub/leakdir 2 " + outside}
	if !slices.Equal(got, want) {
		t.Errorf("archive:\n%q\nwant\n%q", got, want)
	}
	if !strings.Contains(warn.String(), "fifo") || !strings.Contains(warn.String(), "sock") {
		t.Errorf("warnings: %q", warn.String())
	}
	buf.Reset()
	must(t, hostWrite(&buf, dirfd, "treelink", "x", &warn))
	if got := readTar(t, &buf); !slices.Equal(got, []string{"x 2 " + tree}) {
		t.Errorf("a symlink source: %q", got)
	}

	// A directory named by its own descriptor (a trailing /, "."): its
	// entries under the name given.
	buf.Reset()
	must(t, hostWrite(&buf, openDirFd(t, filepath.Join(tree, "sub")), "", "s", &warn))
	if got := readTar(t, &buf); !slices.Equal(got, []string{"s/ 5", "s/leakdir 2 " + outside}) {
		t.Errorf("a directory by descriptor: %q", got)
	}

	// The open that follows the walk's fstatat refuses what the entry may
	// have become since: a symlink, a FIFO (at once, without blocking).
	treefd := openDirFd(t, tree)
	for _, n := range []string{"leak", "fifo", "sock"} {
		if f, _, err := OpenRegular(treefd, n); err == nil {
			f.Close()
			t.Errorf("%s: opened", n)
		}
	}
}
