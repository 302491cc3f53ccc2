package policy

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzResolvePath resolves fuzzed paths inside a tree of symlinks
// (absolute, relative, loops, through ".."): ResolvePath must end within
// the deadline, never panic, and answer a clean absolute path; refuse
// what is not an absolute path (relative, NUL); and be stable (resolving
// its answer again gives the same answer).
func FuzzResolvePath(f *testing.F) {
	root, err := os.MkdirTemp("", "moat-fuzz-resolve-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(root) })
	root, _ = filepath.EvalSymlinks(root)
	for _, d := range []string{"a/b/c", "d", "e/f"} {
		_ = os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	_ = os.WriteFile(filepath.Join(root, "a/b/file"), []byte("x"), 0o644)
	for link, target := range map[string]string{
		"a/up": "..", "a/b/abs": root + "/d", "a/b/rel": "../../e/f", "loop1": "loop2", "loop2": "loop1",
		"self": ".", "d/back": "../a/b", "e/dangling": "nowhere/x", "e/f/file-link": "../../a/b/file", "e/dots": "../../..",
	} {
		_ = os.Symlink(target, filepath.Join(root, link))
	}
	for _, s := range []string{"", "/", ".", "rel", "/a/b/c", "/a/up/up/up/b", "/a/b/abs/back/rel", "/loop1/x", "/self/self/a/",
		"/a/b/../../d", "/e/dangling/../y", "/e/f/file-link/x", "/e/dots/x", "/a/b/file/x", "/a//b///c/", "/a\x00b", "/../../a",
		"/" + strings.Repeat("self/", 50) + "a", "/" + strings.Repeat("up/", 30)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		in := p
		if strings.HasPrefix(p, "/") {
			in = root + p // the fuzzed path lies under the tree
		}
		type out struct {
			r   string
			err error
		}
		ch := make(chan out, 1)
		go func() {
			r, err := ResolvePath(in)
			ch <- out{r, err}
		}()
		var o out
		select {
		case o = <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("ResolvePath(%.200q) did not return", in)
		}
		if !path.IsAbs(in) || strings.IndexByte(in, 0) >= 0 {
			if o.err == nil {
				t.Fatalf("ResolvePath(%q) = %q, want an error", in, o.r)
			}
			return
		}
		if o.err != nil {
			return // too many links
		}
		if !path.IsAbs(o.r) || path.Clean(o.r) != o.r {
			t.Fatalf("ResolvePath(%q) = %q: not clean and absolute", in, o.r)
		}
		if again, err := ResolvePath(o.r); err != nil || again != o.r {
			t.Fatalf("ResolvePath(%q) = %q, and again %q (%v)", in, o.r, again, err)
		}
	})
}
