package fstree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenPath: a path is resolved without following any symlink,
// wherever it is on the path, magic links included; the error names the
// symlink. Controls: the kernel's own resolution follows the same links.
func TestOpenPath(t *testing.T) {
	base := realTempDir(t)
	outside := realTempDir(t)
	must(t, os.MkdirAll(filepath.Join(base, "real", "sub"), 0o755))
	must(t, os.Symlink(outside, filepath.Join(base, "link")))
	must(t, os.Symlink("real", filepath.Join(base, "rel")))
	must(t, os.Symlink(outside, filepath.Join(base, "real", "deep")))
	for _, p := range []string{"link", "rel/sub", "real/deep"} {
		if st, err := os.Stat(filepath.Join(base, p)); err != nil || !st.IsDir() {
			t.Fatalf("control: %s does not resolve: %v", p, err)
		}
	}
	for _, c := range []struct{ p, link string }{
		{"real", ""},
		{"real/sub", ""},
		{"real/sub/..", ""},
		{"real/sub/../sub/", ""},
		{"link", "link"},
		{"link/", "link"},
		{"rel/sub", "rel"},
		{"real/deep", "real/deep"},
		{"real/../link", "link"},
	} {
		for _, abs := range []bool{true, false} {
			p, dirfd := filepath.Join(base, c.p), unix.AT_FDCWD
			if !abs {
				p, dirfd = "../"+c.p, openDirFd(t, filepath.Join(base, "real"))
			}
			fd, err := OpenPath(dirfd, p, unix.O_PATH|unix.O_DIRECTORY)
			if c.link == "" {
				if err != nil {
					t.Errorf("%s: %v", p, err)
					continue
				}
				if got, want := fdPath(t, fd), filepath.Join(base, c.p); got != want {
					t.Errorf("%s opened %s, want %s", p, got, want)
				}
				unix.Close(fd)
				continue
			}
			var se *SymlinkError
			if err == nil {
				unix.Close(fd)
				t.Errorf("%s: opened through a symlink", p)
			} else if !errors.Is(err, ErrSymlink) || !errors.As(err, &se) || !strings.HasSuffix(se.Link, c.link) || !strings.Contains(err.Error(), "is a symlink") {
				t.Errorf("%s: %v (link %+v), want the symlink %s named", p, err, se, c.link)
			}
		}
	}
	for _, p := range []string{"/proc/self/cwd", "/proc/self/root/" + base, "/dev/fd/0", fmt.Sprintf("/proc/%d/cwd", os.Getpid()), fmt.Sprintf("/proc/%d/root/tmp", os.Getpid())} {
		if fd, err := OpenPath(unix.AT_FDCWD, p, unix.O_PATH|unix.O_DIRECTORY); err == nil {
			unix.Close(fd)
			t.Errorf("%s: a magic link was followed", p)
		}
	}
	if _, err := OpenPath(unix.AT_FDCWD, filepath.Join(base, "none"), unix.O_PATH|unix.O_DIRECTORY); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// FuzzOpenPath: a path opens, if at all, exactly where it says
// lexically: no symlink (of the fixture's several) was followed.
func FuzzOpenPath(f *testing.F) {
	for _, p := range []string{".", "..", "e", "e/", "l", "l/", "l/x", "abs/d", "e/../l", "../d/e", "../../..", "./e/./", "e/up/e", "f", "f/", "f/x", "self/e", "../d/self/../e", "/etc", "e/x/../../l"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 || len(p) > 1024 {
			return
		}
		base := realTempDir(t)
		d := filepath.Join(base, "d")
		must(t, os.MkdirAll(filepath.Join(d, "e", "x"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "f"), nil, 0o600))
		must(t, os.Symlink("e", filepath.Join(d, "l")))
		must(t, os.Symlink(base, filepath.Join(d, "abs")))
		must(t, os.Symlink(".", filepath.Join(d, "self")))
		must(t, os.Symlink("..", filepath.Join(d, "e", "up")))
		fd, err := OpenPath(openDirFd(t, d), p, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		if got, want := fdPath(t, fd), filepath.Join(d, p); got != want {
			t.Fatalf("%q opened %s, want %s", p, got, want)
		}
	})
}
