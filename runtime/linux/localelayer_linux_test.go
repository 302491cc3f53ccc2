package linux

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/runtime/linux/sandboxinit"
	"github.com/moat-sandbox/moat/sandbox"
)

// hostLocale is the compiled locale the tests copy (Debian's libc-bin
// ships it as a directory).
const hostLocale = "C.utf8"

// localeDirCopy returns a root-owned directory holding a copy of the
// host's compiled locale hostLocale, skipping the test if the host has no
// such directory or no localedef.
func localeDirCopy(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	if _, _, err := findLocaledef(localedefPaths); err != nil {
		t.Skip(err)
	}
	src := filepath.Join(sandboxinit.LocaleDir, hostLocale)
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		t.Skipf("the host has no compiled locale %s", src)
	}
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, hostLocale), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLocaleInputs: the inputs are the locale directories and localedef;
// their key changes when a file changes; a locale directory someone other
// than root may write, or that holds a symlink, is left out; a directory
// with an archive of its own, or a host without localedef, needs or
// gets no layer. Control: the unchanged inputs keep their key.
func TestLocaleInputs(t *testing.T) {
	dir := localeDirCopy(t)
	in, err := findLocaleInputs(dir, localedefPaths)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, hostLocale)}; !slices.Equal(in.dirs, want) {
		t.Fatalf("locale dirs %v, want %v", in.dirs, want)
	}
	again, err := findLocaleInputs(dir, localedefPaths)
	if err != nil || again.key != in.key {
		t.Fatalf("control: unchanged inputs: key %q then %q (%v)", in.key, again.key, err)
	}

	lcTime := filepath.Join(dir, hostLocale, "LC_TIME")
	if err := os.Chtimes(lcTime, time.Time{}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if changed, err := findLocaleInputs(dir, localedefPaths); err != nil || changed.key == in.key {
		t.Errorf("a changed LC_TIME keeps the key %q (%v)", in.key, err)
	}

	// A second locale, one others may write and one with a symlink.
	for _, name := range []string{"xx_XX.utf8", "yy_YY.utf8", "zz_ZZ.utf8"} {
		if err := os.CopyFS(filepath.Join(dir, name), os.DirFS(filepath.Join(dir, hostLocale))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "yy_YY.utf8", "LC_CTYPE"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "zz_ZZ.utf8", "LC_NAME2")); err != nil {
		t.Fatal(err)
	}
	got, err := findLocaleInputs(dir, localedefPaths)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, hostLocale), filepath.Join(dir, "xx_XX.utf8")}; !slices.Equal(got.dirs, want) {
		t.Errorf("locale dirs %v, want %v (no writable or symlinked locale)", got.dirs, want)
	}

	if _, err := findLocaleInputs(dir, []string{"/nonexistent/localedef"}); !errors.Is(err, errNoLocaleLayer) {
		t.Errorf("without localedef: %v, want errNoLocaleLayer", err)
	}
	if _, err := findLocaleInputs(filepath.Join(dir, "none"), localedefPaths); !errors.Is(err, errNoLocaleLayer) {
		t.Errorf("without a locale directory: %v, want errNoLocaleLayer", err)
	}
	if err := os.WriteFile(filepath.Join(dir, localeArchive), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := findLocaleInputs(dir, localedefPaths); !errors.Is(err, errNoLocaleLayer) {
		t.Errorf("with an archive of its own: %v, want errNoLocaleLayer", err)
	}
}

// TestLocaleLayerCache: a layer is built once and reused; other inputs
// get another layer; a layer someone other than root could have written
// is refused; a localedef that fails leaves nothing behind; an unused
// layer is collected, a leased one kept.
func TestLocaleLayerCache(t *testing.T) {
	dir := localeDirCopy(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	in, err := findLocaleInputs(dir, localedefPaths)
	if err != nil {
		t.Fatal(err)
	}
	p, err := localeLayer(ctx, stateDir, in)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(p, localeArchive)
	var first unix.Stat_t
	if err := unix.Lstat(archive, &first); err != nil {
		t.Fatal(err)
	}
	if first.Uid != 0 || first.Mode&0o777 != localeArchiveMode || first.Size == 0 {
		t.Fatalf("archive uid %d mode %o size %d", first.Uid, first.Mode&0o777, first.Size)
	}
	if ents, _ := os.ReadDir(p); len(ents) != 1 {
		t.Errorf("layer holds %d entries, want the archive only", len(ents))
	}
	p2, err := localeLayer(ctx, stateDir, in)
	var second unix.Stat_t
	if err == nil {
		err = unix.Lstat(filepath.Join(p2, localeArchive), &second)
	}
	if err != nil || p2 != p || second.Ino != first.Ino {
		t.Fatalf("second call: %s (inode %d), want %s (inode %d) reused (%v)", p2, second.Ino, p, first.Ino, err)
	}

	// Changed inputs: another layer.
	if err := os.Chtimes(filepath.Join(dir, hostLocale, "LC_TIME"), time.Time{}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	in2, err := findLocaleInputs(dir, localedefPaths)
	if err != nil {
		t.Fatal(err)
	}
	p3, err := localeLayer(ctx, stateDir, in2)
	if err != nil || p3 == p {
		t.Fatalf("changed inputs: layer %s (%v), want a new one beside %s", p3, err, p)
	}

	// An archive others may write is not used.
	if err := os.Chmod(archive, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := localeLayer(ctx, stateDir, in); !errors.Is(err, errUntrustedLocaleLayer) {
		t.Errorf("writable archive: %v, want errUntrustedLocaleLayer", err)
	}
	if err := os.Chmod(archive, localeArchiveMode); err != nil {
		t.Fatal(err)
	}

	// A failing localedef: an error, and nothing left.
	bad := *in
	bad.localedef, bad.key = "/bin/false", "failing"
	if _, err := localeLayer(ctx, stateDir, &bad); err == nil {
		t.Error("a failing localedef built a layer")
	}
	names := func() []string {
		var out []string
		ents, _ := os.ReadDir(filepath.Join(stateDir, localeLayerDir))
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	if got := names(); len(got) != 2 {
		t.Errorf("layers %v, want the two built", got)
	}

	// Collection: the leased layer stays, the other goes; then it goes too.
	var locks layerLocks
	l, err := locks.lease(false, func() (string, error) { return localeLayer(ctx, stateDir, in2) })
	if err != nil {
		t.Fatal(err)
	}
	if n := collectLayers(stateDir); n != 1 {
		t.Errorf("collected %d layers, want the unused one", n)
	}
	if got := names(); !slices.Equal(got, []string{filepath.Base(p3)}) {
		t.Errorf("after collection: %v, want the leased %s", got, filepath.Base(p3))
	}
	l.release()
	if n := collectLayers(stateDir); n != 1 || len(names()) != 0 {
		t.Errorf("collected %d, left %v; want the released layer gone", n, names())
	}
}

// localeCheck is a sandbox's view of its locale: the processes' maps
// show what glibc opened.
const localeCheck = `grep -c ' /usr/lib/locale/locale-archive$' /proc/self/maps; ` +
	`grep ' /usr/lib/locale ' /proc/self/mountinfo; ls -A /usr/lib/locale; ` +
	`if touch /usr/lib/locale/x 2>/dev/null; then echo WRITABLE; fi; locale >/dev/null`

// TestLocaleLayerInSandbox: on a host without a locale archive, a
// host-template sandbox's programs map the archive the runtime built for
// LANG=C.UTF-8 (the default), setlocale works, the host's locale
// directories are still there, the mount is read-only, nosuid and nodev,
// and nothing is written in the host's /usr. Control: with LANG=C, glibc
// opens no archive.
func TestLocaleLayerInSandbox(t *testing.T) {
	r := newTestRuntime(t)
	if _, err := findLocaleInputs(sandboxinit.LocaleDir, localedefPaths); err != nil {
		t.Skip(err)
	}
	hostEntries, err := os.ReadDir(sandboxinit.LocaleDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := r.Create(ctx, &sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Shutdown(ctx)
	res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"sh", "-c", localeCheck}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if lines[0] != "1" {
		t.Errorf("grep did not map the locale archive: %q", res.Stdout)
	}
	if len(lines) < 2 || !strings.Contains(lines[1], " ro,") || !strings.Contains(lines[1], "nosuid") ||
		!strings.Contains(lines[1], "nodev") {
		t.Errorf("locale mount is not ro, nosuid, nodev: %q", res.Stdout)
	}
	for _, e := range hostEntries {
		if !slices.Contains(lines, e.Name()) {
			t.Errorf("host locale entry %s missing in the sandbox: %q", e.Name(), res.Stdout)
		}
	}
	if !slices.Contains(lines, localeArchive) || slices.Contains(lines, "WRITABLE") {
		t.Errorf("want the archive, read-only: %q", res.Stdout)
	}
	if _, err := os.Lstat(filepath.Join(sandboxinit.LocaleDir, localeArchive)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the host's %s has an archive now (%v)", sandboxinit.LocaleDir, err)
	}
	if _, err := os.Lstat(filepath.Join(sandboxinit.LocaleDir, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the sandbox wrote in the host's %s (%v)", sandboxinit.LocaleDir, err)
	}

	if py, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"sh", "-c",
		`command -v python3 >/dev/null || exit 0; python3 -c 'import locale; print(locale.setlocale(locale.LC_ALL, ""))'`}}); err != nil ||
		py.ExitCode != 0 || (py.Stdout != "" && py.Stdout != "C.UTF-8\n") {
		t.Errorf("python3 setlocale: %+v %v", py, err)
	}

	ctl, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"grep", "-c", " /usr/lib/locale/locale-archive$", "/proc/self/maps"},
		Env: []string{"LANG=C"}})
	if err != nil || strings.TrimSpace(ctl.Stdout) != "0" {
		t.Errorf("control: LANG=C maps the archive: %+v %v", ctl, err)
	}
}

// TestLocaleLayerWithoutLocaledef: a host without localedef, or whose
// localedef fails, runs sandboxes as before, without the layer; a failed
// build is tried once per runtime, not per sandbox.
func TestLocaleLayerWithoutLocaledef(t *testing.T) {
	r := newTestRuntime(t)
	if _, err := findLocaleInputs(sandboxinit.LocaleDir, localedefPaths); err != nil {
		t.Skip(err)
	}
	// A localedef that counts its runs and fails.
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	failing := filepath.Join(dir, "localedef")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho run >>"+count+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, defs := range [][]string{{"/nonexistent/localedef"}, {failing}, {failing}} {
		r.locale.localedefs = defs
		res, err := r.Run(ctx, &sandbox.Spec{}, &sandbox.Process{Args: []string{"sh", "-c", localeCheck}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("localedef %v: %+v %v", defs, res, err)
		}
		if strings.Contains(res.Stdout, " /usr/lib/locale ") || !strings.HasPrefix(res.Stdout, "0\n") {
			t.Errorf("localedef %v: a locale layer: %q", defs, res.Stdout)
		}
	}
	b, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	in, err := findLocaleInputs(sandboxinit.LocaleDir, []string{failing})
	if err != nil {
		t.Fatal(err)
	}
	if runs := strings.Count(string(b), "run"); runs != len(in.dirs) {
		t.Errorf("the failing localedef ran %d times for %d locales, want once each", runs, len(in.dirs))
	}
}
