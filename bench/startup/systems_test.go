package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// bwrapArgs mirrors the host's top-level system paths as they are: links
// as links (merged /usr), directories as read-only binds, missing ones not
// at all.
func TestBwrapArgsMirrorsHostLayout(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib", "sbin", "lib64"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/lib", filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(bwrapArgs("/usr/bin/bwrap", root), " ")
	want := "/usr/bin/bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr" +
		" --symlink usr/bin /bin --symlink usr/lib /lib" +
		" --ro-bind " + root + "/lib64 /lib64 --ro-bind " + root + "/sbin /sbin" +
		" --ro-bind /etc /etc --proc /proc --dev /dev --tmpfs /tmp --tmpfs /workspace --chdir /workspace /bin/true"
	if got != want {
		t.Errorf("bwrapArgs:\n got %s\nwant %s", got, want)
	}
}

func TestShellQuote(t *testing.T) {
	got := shellQuote([]string{"/usr/bin/moat", "run", "--", "/bin/true", "it's", "", "a b"})
	want := `/usr/bin/moat run -- /bin/true 'it'\''s' '' 'a b'`
	if got != want {
		t.Errorf("shellQuote = %s, want %s", got, want)
	}
}

func TestParseFlagsSystems(t *testing.T) {
	o, err := parseFlags([]string{"--systems", "bwrap, bare,bwrap", "--seed", "7"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.systems, []string{"bwrap", "bare"}) || o.seed != 7 || o.rounds != 300 || o.warmup != 20 {
		t.Errorf("parseFlags: %+v", o)
	}
	if _, err := parseFlags([]string{"--systems", "docker"}, os.Stderr); err == nil {
		t.Error("unknown system accepted")
	}
	if _, err := parseFlags([]string{"--rounds", "0"}, os.Stderr); err == nil {
		t.Error("--rounds 0 accepted")
	}
}
