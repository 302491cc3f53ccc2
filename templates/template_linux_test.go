package templates_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/templates"
)

// busyboxRoot builds a minimal root: the static busybox and links to it.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		testutil.SkipOrFail(t, "busybox-static is not installed (make test-deps installs it): "+err.Error())
	}
	dir := t.TempDir()
	for _, d := range []string{"bin", "etc", "app"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "bin/busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"sh", "echo", "cat", "ls", "id", "touch", "find", "sort", "md5sum", "mkdir", "rm", "mv", "ln", "chmod", "stat", "hostname", "mkfifo", "true"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\napp:x:500:500::/app:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app/hello"), []byte("hello from the template\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(dir, "app"), 500, 500); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestTemplateFromDirectory(t *testing.T) {
	e := newEnv(t)
	src := busyboxRoot(t)
	tm, err := e.st.Import(context.Background(), templates.ImportRequest{Name: "bb", Kind: templates.SourceDir, Path: src,
		Env: []string{"GREETING=hi"}, Workdir: "/app"})
	if err != nil {
		t.Fatal(err)
	}
	if tm.Layer == "" || tm.Entries < 20 {
		t.Fatalf("template: %+v", tm)
	}
	// Same content, another name: one layer.
	tm2, err := e.st.Import(context.Background(), templates.ImportRequest{Name: "bb2", Kind: templates.SourceDir, Path: src})
	if err != nil || tm2.Layer != tm.Layer {
		t.Fatalf("second import: %v %+v", err, tm2)
	}
	if _, err := e.st.Import(context.Background(), templates.ImportRequest{Name: "bb", Kind: templates.SourceDir, Path: src}); !errors.Is(err, templates.ErrExists) {
		t.Fatalf("import over an existing name: %v", err)
	}
	root := e.st.Root(tm)
	sb, err := e.rt.Create(context.Background(), &sandbox.Spec{Root: root, Env: tm.Env, Workdir: tm.Workdir})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Shutdown(context.Background())
	out := sh(t, sb, `echo $GREETING; pwd; cat hello; id -u; stat -c '%u %U' /bin/busybox /app; grep sandbox /etc/passwd; hostname; ls /workspace && echo ws`)
	// The image names no user: what its root owns is the sandbox user's;
	// what another user (app) owns stays that user's.
	want := "hi\n/app\nhello from the template\n1000\n1000 sandbox\n500 app\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\nsandbox\nws\n"
	if out != want {
		t.Fatalf("inside the template:\n got %q\nwant %q", out, want)
	}
	// The sandbox user writes what the image's root owns, into its own
	// upper layer; app's directory stays app's; nothing reaches the
	// template's layer.
	res, err := sb.Exec(context.Background(), &sandbox.Process{Args: []string{"/bin/sh", "-c", "echo x > /app/new"}})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("writing in app's directory: %v exit %d", err, res.ExitCode)
	}
	sh(t, sb, "echo mine > /workspace/f; echo x > /bin/new; echo y >> /etc/passwd")
	layer := filepath.Join(e.st.Dir(), "layers", strings.TrimPrefix(tm.Layer, "sha256:"))
	for _, p := range []string{"workspace", "bin/new", "app/new"} {
		if _, err := os.Lstat(filepath.Join(layer, p)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the sandbox wrote %s into the template's layer: %v", p, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(layer, "etc/passwd")); err != nil || strings.Contains(string(b), "y\n") {
		t.Fatalf("the template's passwd changed: %q %v", b, err)
	}
	// In use: the layer stays; one name goes, the other keeps the layer.
	if err := e.st.RemoveTemplate("bb"); !errors.Is(err, templates.ErrInUse) {
		t.Fatalf("remove in use: %v", err)
	}
	_ = sb.Shutdown(context.Background())
	if err := e.st.RemoveTemplate("bb"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layer); err != nil {
		t.Fatalf("layer of bb2 removed with bb: %v", err)
	}
	if err := e.st.RemoveTemplate("bb2"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layer); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("layer kept after its last template: %v", err)
	}
	if err := e.st.RemoveTemplate(templates.HostTemplate); !errors.Is(err, templates.ErrInvalid) {
		t.Fatalf("remove host: %v", err)
	}
}

// TestImportFailureLeavesNothing: a refused import leaves no template, no
// layer and no work directory.
func TestImportFailureLeavesNothing(t *testing.T) {
	e := newEnv(t)
	for _, req := range []templates.ImportRequest{
		{Name: "Bad Name", Kind: templates.SourceDir, Path: "/usr"},
		{Name: "host", Kind: templates.SourceDir, Path: "/usr"},
		{Name: "x", Kind: templates.SourceDir, Path: "/nonexistent"},
		{Name: "y", Kind: "zip", Path: "/usr"},
		{Name: "z", Kind: templates.SourceOCI, Path: "/etc/hostname"},
	} {
		if _, err := e.st.Import(context.Background(), req); err == nil {
			t.Errorf("%+v: imported", req)
		}
	}
	ts, err := e.st.Templates()
	if err != nil || len(ts) != 1 {
		t.Fatalf("templates after failures: %v %v", ts, err)
	}
	for _, d := range []string{"layers", "tmp"} {
		if ents, _ := os.ReadDir(filepath.Join(e.st.Dir(), d)); len(ents) != 0 {
			t.Errorf("%s/ not empty: %v", d, ents)
		}
	}
}
