package linux

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/sandbox"
)

// hostOwner owns the host workspaces of these tests: an ordinary uid, as a
// user's project directory would be.
const hostOwner = 4242

// sandboxPasswd is a line only the sandbox's /etc/passwd has: reading it
// through a path proves the path was resolved inside the sandbox.
const sandboxPasswd = "sandbox:x:1000:1000:sandbox:/home/sandbox"

// filesSandbox creates a long-lived sandbox and returns its Files and, for
// a host workspace, the host directory behind /workspace ("" for the
// in-memory workspace).
func filesSandbox(t *testing.T, hostWorkspace bool) (*linuxSandbox, sandbox.Files, string) {
	t.Helper()
	r := newTestRuntime(t)
	spec := &sandbox.Spec{}
	ws := ""
	if hostWorkspace {
		ws = t.TempDir()
		if err := os.Chown(ws, hostOwner, hostOwner); err != nil {
			t.Fatal(err)
		}
		spec.Workspace = ws
	}
	sb, err := r.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Shutdown(context.Background()) })
	ls := sb.(*linuxSandbox)
	return ls, ls.Files(), ws
}

// workspaces runs fn with a host workspace and with the in-memory one.
func workspaces(t *testing.T, fn func(t *testing.T, sb *linuxSandbox, f sandbox.Files, ws string)) {
	for _, host := range []bool{true, false} {
		name := "memory-workspace"
		if host {
			name = "host-workspace"
		}
		t.Run(name, func(t *testing.T) {
			sb, f, ws := filesSandbox(t, host)
			fn(t, sb, f, ws)
		})
	}
}

// code returns the FileError code of err ("" if it is not one).
func code(err error) string {
	var fe *sandbox.FileError
	if errors.As(err, &fe) {
		return fe.Code
	}
	return ""
}

// wantCode fails unless err is a FileError with one of codes.
func wantCode(t *testing.T, what string, err error, codes ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want %v", what, codes)
	}
	if !slices.Contains(codes, code(err)) {
		t.Fatalf("%s: %v (code %q), want %v", what, err, code(err), codes)
	}
}

func sh(t *testing.T, sb *linuxSandbox, script string) string {
	t.Helper()
	res, err := sb.Exec(context.Background(), &sandbox.Process{Args: []string{"/bin/sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sh %q: %v %+v", script, err, res)
	}
	return res.Stdout
}

func write(t *testing.T, f sandbox.Files, path, content string) {
	t.Helper()
	if n, err := f.WriteFile(context.Background(), path, strings.NewReader(content), 0, 1<<20); err != nil || n != int64(len(content)) {
		t.Fatalf("write %s: %d %v", path, n, err)
	}
}

func read(t *testing.T, f sandbox.Files, path string) string {
	t.Helper()
	b, err := f.ReadFile(context.Background(), path, 1<<20)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// tarEntry is one entry of a test archive.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func makeTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Typeflag == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFilesOperations: every operation works in /workspace, with a host
// workspace and with the in-memory one.
func TestFilesOperations(t *testing.T) {
	workspaces(t, func(t *testing.T, sb *linuxSandbox, f sandbox.Files, ws string) {
		ctx := context.Background()
		// Write, read back, relative and absolute paths name the same file.
		write(t, f, "hello.txt", "hello\n")
		if got := read(t, f, "/workspace/hello.txt"); got != "hello\n" {
			t.Fatalf("read back %q", got)
		}
		if got := sh(t, sb, "cat /workspace/hello.txt"); got != "hello\n" {
			t.Fatalf("a sandbox process reads %q", got)
		}
		// Replacing keeps nothing of the old content; an empty file too.
		write(t, f, "hello.txt", "bye")
		if got := read(t, f, "hello.txt"); got != "bye" {
			t.Fatalf("after replace %q", got)
		}
		write(t, f, "empty", "")
		if got := read(t, f, "empty"); got != "" {
			t.Fatalf("empty file reads %q", got)
		}
		// Modes: default 0644, explicit mode taken exactly, setuid dropped.
		if _, err := f.WriteFile(ctx, "run.sh", strings.NewReader("#!/bin/sh\necho ran\n"), 0o4755, 1<<20); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]uint32{"hello.txt": 0o644, "run.sh": 0o755} {
			fi, err := f.Stat(ctx, name)
			if err != nil || fi.Mode != want || fi.Type != "file" {
				t.Fatalf("stat %s: %+v %v, want mode %o", name, fi, err, want)
			}
		}
		if got := sh(t, sb, "./run.sh"); got != "ran\n" {
			t.Fatalf("run.sh: %q", got)
		}

		// mkdir: plain, -p (existing is fine), plain on existing is EEXIST.
		if err := f.Mkdir(ctx, "d", 0o755, false); err != nil {
			t.Fatal(err)
		}
		wantCode(t, "mkdir existing", f.Mkdir(ctx, "d", 0o755, false), "EEXIST")
		if err := f.Mkdir(ctx, "/workspace/d/e/f/g", 0o700, true); err != nil {
			t.Fatal(err)
		}
		if err := f.Mkdir(ctx, "d/e/f/g", 0, true); err != nil {
			t.Fatalf("mkdir -p of an existing dir: %v", err)
		}
		wantCode(t, "mkdir -p over a file", f.Mkdir(ctx, "hello.txt", 0, true), "EEXIST")
		wantCode(t, "mkdir without parents", f.Mkdir(ctx, "x/y", 0, false), "ENOENT")
		fi, err := f.Stat(ctx, "d/e/f/g")
		if err != nil || fi.Type != "dir" || fi.Mode != 0o700 || fi.Name != "g" {
			t.Fatalf("stat d/e/f/g: %+v %v", fi, err)
		}
		fi, err = f.Stat(ctx, "d/e")
		if err != nil || fi.Mode != 0o755 {
			t.Fatalf("implicit parent: %+v %v", fi, err)
		}
		write(t, f, "d/e/f/g/leaf", "leaf")

		// list: sorted, typed, with symlink targets (never followed).
		sh(t, sb, "ln -s hello.txt /workspace/d/link && ln -s /nowhere /workspace/d/dangling && printf 12345 > /workspace/d/b && mkfifo /workspace/d/fifo")
		ents, err := f.ReadDir(ctx, "d")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, fmt.Sprintf("%s:%s:%s", e.Name, e.Type, e.Target))
		}
		want := []string{"b:file:", "dangling:symlink:/nowhere", "e:dir:", "fifo:other:", "link:symlink:hello.txt"}
		if !slices.Equal(got, want) {
			t.Fatalf("list: %v, want %v", got, want)
		}
		if ents[0].Size != 5 || ents[0].ModTime.IsZero() {
			t.Fatalf("entry b: %+v", ents[0])
		}
		fi, err = f.Stat(ctx, "d/link")
		if err != nil || fi.Type != "symlink" || fi.Target != "hello.txt" {
			t.Fatalf("stat of a symlink: %+v %v", fi, err)
		}
		// A FIFO is refused at once, not waited on.
		wantCode(t, "read a FIFO", func() error { _, err := f.ReadFile(ctx, "d/fifo", 10); return err }(), "EINVAL")
		wantCode(t, "read a directory", func() error { _, err := f.ReadFile(ctx, "d", 10); return err }(), "EISDIR")
		wantCode(t, "list a file", func() error { _, err := f.ReadDir(ctx, "hello.txt"); return err }(), "ENOTDIR")

		// move: a file, a directory, across directories; replacing a file.
		if err := f.Rename(ctx, "hello.txt", "d/e/moved.txt"); err != nil {
			t.Fatal(err)
		}
		if got := read(t, f, "d/e/moved.txt"); got != "bye" {
			t.Fatalf("moved file reads %q", got)
		}
		if err := f.Rename(ctx, "d/e", "/workspace/e2"); err != nil {
			t.Fatal(err)
		}
		write(t, f, "other", "other")
		if err := f.Rename(ctx, "other", "e2/moved.txt"); err != nil {
			t.Fatal(err)
		}
		if got := read(t, f, "e2/moved.txt"); got != "other" {
			t.Fatalf("replaced by move: %q", got)
		}
		wantCode(t, "move a missing file", f.Rename(ctx, "nope", "x"), "ENOENT")

		// remove: file, symlink (not its target), empty dir, non-empty
		// dir refused, then the whole tree.
		if err := f.Remove(ctx, "d/link", false); err != nil {
			t.Fatal(err)
		}
		if err := f.Remove(ctx, "empty", false); err != nil {
			t.Fatal(err)
		}
		wantCode(t, "remove a non-empty dir", f.Remove(ctx, "e2", false), "ENOTEMPTY", "EEXIST")
		if err := f.Mkdir(ctx, "emptydir", 0, false); err != nil {
			t.Fatal(err)
		}
		if err := f.Remove(ctx, "emptydir", false); err != nil {
			t.Fatal(err)
		}
		if err := f.Remove(ctx, "e2", true); err != nil {
			t.Fatal(err)
		}
		if err := f.Remove(ctx, "d", true); err != nil {
			t.Fatal(err)
		}
		ents, err = f.ReadDir(ctx, "/workspace")
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, e := range ents {
			got = append(got, e.Name)
		}
		if !slices.Equal(got, []string{"run.sh"}) {
			t.Fatalf("workspace after removals: %v (no temporary file may remain)", got)
		}
		if ws != "" {
			hostNames, _ := os.ReadDir(ws)
			if len(hostNames) != 1 || hostNames[0].Name() != "run.sh" {
				t.Fatalf("host workspace after removals: %v", hostNames)
			}
		}
	})
}

// TestFilesTarRoundTrip: a tree with a symlink, an executable and an empty
// directory goes out as tar and back in unchanged.
func TestFilesTarRoundTrip(t *testing.T) {
	workspaces(t, func(t *testing.T, sb *linuxSandbox, f sandbox.Files, ws string) {
		ctx := context.Background()
		sh(t, sb, `mkdir -p /workspace/src/sub/empty && cd /workspace/src &&
			printf '#!/bin/sh\necho tool\n' > tool && chmod 0755 tool &&
			echo data > sub/data && chmod 0640 sub/data && ln -s sub/data link && ln -s /etc/passwd abs`)
		var arc bytes.Buffer
		if err := f.GetTar(ctx, "src", &arc, 1<<20); err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(bytes.NewReader(arc.Bytes()))
		var names []string
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			desc := fmt.Sprintf("%s %c %o", h.Name, h.Typeflag, h.Mode)
			if h.Linkname != "" {
				desc += " -> " + h.Linkname
			}
			names = append(names, desc)
		}
		want := []string{"src/ 5 755", "src/abs 2 777 -> /etc/passwd", "src/link 2 777 -> sub/data",
			"src/sub/ 5 755", "src/sub/data 0 640", "src/sub/empty/ 5 755", "src/tool 0 755"}
		if !slices.Equal(names, want) {
			t.Fatalf("archive:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
		}
		if err := f.Mkdir(ctx, "dst", 0, false); err != nil {
			t.Fatal(err)
		}
		if err := f.PutTar(ctx, "dst", bytes.NewReader(arc.Bytes()), 1<<20); err != nil {
			t.Fatal(err)
		}
		got := sh(t, sb, "cd /workspace/dst/src && stat -c '%n %F %a' tool sub sub/data sub/empty link abs && readlink link abs && ./tool && cat link")
		wantOut := "tool regular file 755\nsub directory 755\nsub/data regular file 640\nsub/empty directory 755\n" +
			"link symbolic link 777\nabs symbolic link 777\nsub/data\n/etc/passwd\ntool\ndata\n"
		if got != wantOut {
			t.Fatalf("extracted tree:\n%s\nwant:\n%s", got, wantOut)
		}
		// A single file goes out as one entry; a symlink as a symlink.
		arc.Reset()
		if err := f.GetTar(ctx, "src/link", &arc, 1<<20); err != nil {
			t.Fatal(err)
		}
		h, err := tar.NewReader(&arc).Next()
		if err != nil || h.Name != "link" || h.Typeflag != tar.TypeSymlink || h.Linkname != "sub/data" {
			t.Fatalf("archive of a symlink: %+v %v", h, err)
		}
		// The content cap of GetTar.
		err = f.GetTar(ctx, "src", io.Discard, 5)
		if !errors.Is(err, sandbox.ErrTooBig) {
			t.Fatalf("GetTar over its limit: %v", err)
		}
		if ws != "" {
			st, err := os.Lstat(filepath.Join(ws, "dst/src/tool"))
			if err != nil || st.Sys().(*syscall.Stat_t).Uid != hostOwner || st.Mode().Perm() != 0o755 {
				t.Fatalf("extracted file on the host: %v %v", st, err)
			}
		}
	})
}

// TestFilesAtomicWrite: a reader never sees a partial file. A process in
// the sandbox reads the file in a loop while the host replaces it many
// times; a caller's reader that stalls half-way leaves the old content
// whole.
func TestFilesAtomicWrite(t *testing.T) {
	sb, f, _ := filesSandbox(t, true)
	ctx := context.Background()
	const size = 1 << 20
	a, b := strings.Repeat("A", size), strings.Repeat("B", size)
	write(t, f, "atomic", a)

	ready := make(chan struct{})
	var once sync.Once
	out := writerFunc(func(p []byte) (int, error) {
		once.Do(func() { close(ready) })
		return len(p), nil
	})
	type outcome struct {
		res *sandbox.Result
		err error
	}
	done := make(chan outcome, 1)
	var stdout bytes.Buffer
	go func() {
		script := fmt.Sprintf(`
import os, sys
n = %d
sys.stderr.write("ready\n"); sys.stderr.flush()
reads = bad = 0
while not os.path.exists("/workspace/stop"):
    with open("/workspace/atomic", "rb") as f:
        d = f.read()
    reads += 1
    if len(d) != n or (d != b"A" * n and d != b"B" * n):
        bad += 1
print(reads, bad)
`, size)
		res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"python3", "-c", script}, Stderr: out, Stdout: &stdout})
		done <- outcome{res, err}
	}()
	<-ready
	for i := range 40 {
		content := a
		if i%2 == 0 {
			content = b
		}
		write(t, f, "atomic", content)
	}
	write(t, f, "stop", "")
	o := <-done
	if o.err != nil || o.res.ExitCode != 0 {
		t.Fatalf("reader: %v %+v", o.err, o.res)
	}
	var reads, bad int
	if _, err := fmt.Sscan(stdout.String(), &reads, &bad); err != nil || reads == 0 || bad != 0 {
		t.Fatalf("reader saw %d partial files in %d reads (%q)", bad, reads, stdout.String())
	}

	// A writer whose source stalls half-way: the file is still the old one,
	// whole; once the source ends, the new one, whole.
	write(t, f, "atomic", a)
	half := make(chan struct{})
	release := make(chan struct{})
	src := io.MultiReader(strings.NewReader(b[:size/2]), readerFunc(func(p []byte) (int, error) {
		close(half)
		<-release
		return 0, io.EOF
	}))
	wrote := make(chan error, 1)
	go func() {
		_, err := f.WriteFile(ctx, "atomic", io.MultiReader(src, strings.NewReader(b[size/2:])), 0, size)
		wrote <- err
	}()
	<-half
	if got := read(t, f, "atomic"); got != a {
		t.Fatalf("during a stalled write the file has %d bytes, not the old content", len(got))
	}
	close(release)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if got := read(t, f, "atomic"); got != b {
		t.Fatalf("after the write the file has %d bytes, not the new content", len(got))
	}
	// A source that fails half-way commits nothing.
	_, err := f.WriteFile(ctx, "atomic", io.MultiReader(strings.NewReader("partial"), readerFunc(func([]byte) (int, error) {
		return 0, errors.New("source broke")
	})), 0, size)
	if err == nil || !strings.Contains(err.Error(), "source broke") {
		t.Fatalf("failing source: %v", err)
	}
	if got := read(t, f, "atomic"); got != b {
		t.Fatal("a failed write changed the file")
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestFilesHostOwnership: what the sandbox user creates in a host
// workspace belongs to the workspace's owner on the host.
func TestFilesHostOwnership(t *testing.T) {
	_, f, ws := filesSandbox(t, true)
	ctx := context.Background()
	write(t, f, "owned", "x")
	if err := f.Mkdir(ctx, "ownedDir/sub", 0, true); err != nil {
		t.Fatal(err)
	}
	if err := f.PutTar(ctx, "ownedDir", bytes.NewReader(makeTar(t, tarEntry{name: "t/file", body: "x"})), 1<<20); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"owned", "ownedDir", "ownedDir/sub", "ownedDir/t", "ownedDir/t/file"} {
		st, err := os.Lstat(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != hostOwner || s.Gid != hostOwner {
			t.Fatalf("%s is owned by %d:%d on the host, want %d", p, s.Uid, s.Gid, hostOwner)
		}
	}
}

// TestFilesKernelPolicy: file operations get exactly a sandbox process's
// rights: read-only system directories, hidden secrets, the init's /proc
// closed, the user's own private files readable.
func TestFilesKernelPolicy(t *testing.T) {
	sb, f, _ := filesSandbox(t, true)
	ctx := context.Background()
	for _, p := range []string{"/etc/x", "/usr/x", "/x", "/etc/passwd", "/usr/bin/sh"} {
		_, err := f.WriteFile(ctx, p, strings.NewReader("x"), 0, 10)
		wantCode(t, "write "+p, err, "EROFS", "EACCES")
		if !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("write %s: %v is not fs.ErrPermission", p, err)
		}
	}
	wantCode(t, "write /", func() error { _, err := f.WriteFile(ctx, "/", strings.NewReader("x"), 0, 10); return err }(), "EISDIR")
	wantCode(t, "mkdir /usr/x", f.Mkdir(ctx, "/usr/x", 0, true), "EROFS", "EACCES")
	wantCode(t, "remove /usr/bin/sh", f.Remove(ctx, "/usr/bin/sh", false), "EROFS", "EACCES")
	wantCode(t, "remove -r /usr/local", f.Remove(ctx, "/usr/local", true), "EROFS", "EACCES")
	wantCode(t, "move /etc/passwd", f.Rename(ctx, "/etc/passwd", "/workspace/passwd"), "EROFS", "EACCES", "EXDEV")
	wantCode(t, "tar into /etc", f.PutTar(ctx, "/etc", bytes.NewReader(makeTar(t, tarEntry{name: "evil", body: "x"})), 1<<20), "EROFS", "EACCES")
	// The host's secrets are not there at all.
	_, err := f.ReadFile(ctx, "/etc/shadow", 1<<20)
	wantCode(t, "read /etc/shadow", err, "ENOENT")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read /etc/shadow: %v is not fs.ErrNotExist", err)
	}
	// The init's /proc entries: what a sandbox process cannot read, the
	// file operations cannot either, although they run in the init.
	probes := []struct{ what, shell string }{
		{"read /proc/1/environ", "cat /proc/1/environ"},
		{"list /proc/1/fd", "ls /proc/1/fd"},
		{"stat /proc/1/exe", "readlink /proc/1/exe"},
		{"read /proc/1/maps", "cat /proc/1/maps"},
	}
	for _, p := range probes {
		// Control: a process of the sandbox, as uid 1000, is refused.
		res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"/bin/sh", "-c", p.shell}})
		if err != nil || res.ExitCode == 0 {
			t.Fatalf("control %q: a sandbox process succeeded: %v %+v", p.shell, err, res)
		}
		op, path, _ := strings.Cut(p.what, " ")
		switch op {
		case "read":
			_, err = f.ReadFile(ctx, path, 1<<20)
		case "list":
			_, err = f.ReadDir(ctx, path)
		case "stat":
			_, err = f.Stat(ctx, path)
		}
		wantCode(t, p.what, err, "EACCES")
		if !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("%s: %v is not fs.ErrPermission", p.what, err)
		}
	}
	for _, p := range []string{"/proc/self/environ", "/proc/thread-self/status", "/dev/fd/0"} {
		_, err := f.ReadFile(ctx, p, 1<<20)
		wantCode(t, "read "+p, err, "EACCES", "ELOOP")
	}
	// Other /proc files work as for a sandbox process.
	if got := read(t, f, "/proc/sys/kernel/ostype"); got != "Linux\n" {
		t.Fatalf("/proc/sys/kernel/ostype: %q", got)
	}
	// A file created 0600 by the sandbox user is the file operations' own.
	sh(t, sb, "umask 077 && echo private > /workspace/private && echo private > /tmp/private")
	for _, p := range []string{"/workspace/private", "/tmp/private"} {
		if got := read(t, f, p); got != "private\n" {
			t.Fatalf("read %s: %q", p, got)
		}
	}
	if _, err := f.WriteFile(ctx, "/home/sandbox/mine", strings.NewReader("x"), 0o600, 10); err != nil {
		t.Fatalf("write to the home directory: %v", err)
	}
}

// plantLinks creates escape symlinks in the workspace: on the host (when
// ws is set), with tar, and with a sandbox process. It returns their names
// and the name of the magic one(s).
func plantLinks(t *testing.T, sb *linuxSandbox, f sandbox.Files, ws string) (links, magic []string) {
	t.Helper()
	ctx := context.Background()
	if ws != "" {
		for name, target := range map[string]string{"h-root": "/", "h-up": "../../..", "h-proc": "/proc/self/root"} {
			if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(filepath.Join(ws, name), hostOwner, hostOwner); err != nil {
				t.Fatal(err)
			}
		}
		links = append(links, "h-root", "h-up")
		magic = append(magic, "h-proc")
	}
	arc := makeTar(t, tarEntry{name: "t-root", typ: tar.TypeSymlink, link: "/"},
		tarEntry{name: "t-up", typ: tar.TypeSymlink, link: "../../../../.."},
		tarEntry{name: "t-proc", typ: tar.TypeSymlink, link: "/proc/self/root"})
	if err := f.PutTar(ctx, "/workspace", bytes.NewReader(arc), 1<<20); err != nil {
		t.Fatal(err)
	}
	sh(t, sb, "ln -s / /workspace/s-root && ln -s /proc/1/root /workspace/s-proc")
	links = append(links, "t-root", "t-up", "s-root")
	magic = append(magic, "t-proc", "s-proc")
	return links, magic
}

// TestFilesSymlinkEscapes: symlinks planted in the workspace, pointing at
// "/", up the tree or at /proc/self/root, lead every operation to the
// sandbox's root, never the host's; magic links are refused. Each refused
// or contained operation has a control showing the same operation working
// on a benign target.
func TestFilesSymlinkEscapes(t *testing.T) {
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(hostPasswd, []byte(sandboxPasswd)) {
		t.Skip("the host's /etc/passwd has the sandbox's line; the content check would prove nothing")
	}
	hostProbe, err := os.CreateTemp("/tmp", "moat-escape-probe-")
	if err != nil {
		t.Fatal(err)
	}
	hostProbe.WriteString("host")
	hostProbe.Close()
	defer os.Remove(hostProbe.Name())
	probe := filepath.Base(hostProbe.Name())

	workspaces(t, func(t *testing.T, sb *linuxSandbox, f sandbox.Files, ws string) {
		ctx := context.Background()
		links, magic := plantLinks(t, sb, f, ws)
		for _, l := range links {
			// read: the sandbox's passwd.
			if got := read(t, f, l+"/etc/passwd"); !strings.Contains(got, sandboxPasswd) {
				t.Fatalf("read %s/etc/passwd: not the sandbox's passwd: %q", l, got)
			}
			// list: the sandbox's root.
			ents, err := f.ReadDir(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name)
			}
			if !slices.Contains(names, "workspace") || slices.Contains(names, "var") || slices.Contains(names, "root") {
				t.Fatalf("list %s: %v is not the sandbox's root", l, names)
			}
			// write: into the sandbox (the workspace, through the link),
			// never into the host's /etc.
			write(t, f, l+"/workspace/via-"+l, "x")
			if ws != "" {
				if _, err := os.Stat(filepath.Join(ws, "via-"+l)); err != nil {
					t.Fatalf("write through %s did not land in the workspace: %v", l, err)
				}
			}
			_, err = f.WriteFile(ctx, l+"/etc/evil", strings.NewReader("x"), 0, 10)
			wantCode(t, "write "+l+"/etc/evil", err, "EROFS", "EACCES")
			// remove and move: a host file of the same path is never
			// reached; control: the sandbox's own file of that path is.
			wantCode(t, "remove "+l+"/tmp/probe", f.Remove(ctx, l+"/tmp/"+probe, false), "ENOENT")
			wantCode(t, "move "+l+"/tmp/probe", f.Rename(ctx, l+"/tmp/"+probe, "/tmp/stolen"), "ENOENT")
			write(t, f, "/tmp/"+probe, "sandbox")
			if err := f.Rename(ctx, l+"/tmp/"+probe, l+"/tmp/"+probe+".moved"); err != nil {
				t.Fatalf("control move through %s: %v", l, err)
			}
			if err := f.Remove(ctx, l+"/tmp/"+probe+".moved", false); err != nil {
				t.Fatalf("control remove through %s: %v", l, err)
			}
			// tar_in: into the sandbox's /tmp; refused in its /etc.
			if err := f.PutTar(ctx, l+"/tmp", bytes.NewReader(makeTar(t, tarEntry{name: "tarred-" + l, body: "x"})), 1<<20); err != nil {
				t.Fatal(err)
			}
			if got := read(t, f, "/tmp/tarred-"+l); got != "x" {
				t.Fatalf("tar through %s: %q", l, got)
			}
			wantCode(t, "tar into "+l+"/etc", f.PutTar(ctx, l+"/etc", bytes.NewReader(makeTar(t, tarEntry{name: "evil", body: "x"})), 1<<20), "EROFS", "EACCES")
			// remove -r of the link removes the link only.
			if err := f.Remove(ctx, l, true); err != nil {
				t.Fatalf("remove -r %s: %v", l, err)
			}
			if _, err := f.Stat(ctx, "/workspace"); err != nil {
				t.Fatal(err)
			}
		}
		// Magic links (/proc/self/root, /proc/1/root) are refused for
		// every operation, directly or planted; the control is the same
		// operation on the plain path.
		direct := []string{"/proc/self/root", "/proc/1/root", "/proc/self/cwd"}
		for _, l := range append(magic, direct...) {
			_, err := f.ReadFile(ctx, l+"/etc/passwd", 1<<20)
			wantCode(t, "read "+l+"/etc/passwd", err, "ELOOP", "EACCES")
			_, err = f.ReadDir(ctx, l)
			wantCode(t, "list "+l, err, "ELOOP", "EACCES")
			_, err = f.WriteFile(ctx, l+"/workspace/evil", strings.NewReader("x"), 0, 10)
			wantCode(t, "write "+l+"/workspace/evil", err, "ELOOP", "EACCES")
			wantCode(t, "tar into "+l, f.PutTar(ctx, l+"/workspace", bytes.NewReader(makeTar(t, tarEntry{name: "evil", body: "x"})), 1<<20), "ELOOP", "EACCES")
			wantCode(t, "mkdir "+l+"/workspace/evil", f.Mkdir(ctx, l+"/workspace/evil", 0, true), "ELOOP", "EACCES")
		}
		if got := read(t, f, "/etc/passwd"); !strings.Contains(got, sandboxPasswd) {
			t.Fatalf("control: /etc/passwd %q", got)
		}
		if _, err := f.Stat(ctx, "/workspace/evil"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("/workspace/evil: %v", err)
		}
		// ".." cannot climb out either.
		if got := read(t, f, "../../../../etc/passwd"); !strings.Contains(got, sandboxPasswd) {
			t.Fatalf("../../../../etc/passwd: %q", got)
		}
		if got := read(t, f, "/proc/self/../../etc/passwd"); !strings.Contains(got, sandboxPasswd) {
			t.Fatalf("/proc/self/../../etc/passwd: %q", got)
		}
	})
	// The host was never touched.
	if b, err := os.ReadFile(hostProbe.Name()); err != nil || string(b) != "host" {
		t.Fatalf("host probe file: %q %v", b, err)
	}
	for _, p := range []string{"/etc/evil", "/workspace/via-h-root", "/tmp/tarred-h-root", "/tmp/tarred-t-root"} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s exists on the host", p)
		}
	}
}

// TestFilesRemoveTreeWithLinks: removing a tree that holds symlinks to
// directories outside it removes the links only.
func TestFilesRemoveTreeWithLinks(t *testing.T) {
	sb, f, ws := filesSandbox(t, true)
	ctx := context.Background()
	sh(t, sb, `mkdir -p /workspace/keep/deep /workspace/tree/a/b && echo kept > /workspace/keep/deep/file &&
		echo kept > /tmp/keepfile &&
		ln -s /usr /workspace/tree/usr && ln -s /workspace/keep /workspace/tree/a/keep &&
		ln -s ../../../keep /workspace/tree/a/b/rel && ln -s /tmp/keepfile /workspace/tree/a/b/file &&
		ln -s / /workspace/tree/root`)
	if err := f.Remove(ctx, "tree", true); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Stat(ctx, "tree"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("tree after remove -r: %v", err)
	}
	if got := read(t, f, "keep/deep/file"); got != "kept\n" {
		t.Fatalf("a directory behind a link lost its content: %q", got)
	}
	if got := read(t, f, "/tmp/keepfile"); got != "kept\n" {
		t.Fatalf("a file behind a link: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "keep/deep/file")); err != nil || string(b) != "kept\n" {
		t.Fatalf("host view of keep: %q %v", b, err)
	}
	if _, err := f.Stat(ctx, "/usr/bin/sh"); err != nil {
		t.Fatal(err)
	}
	// The link itself given as the path: removed, not followed.
	sh(t, sb, "ln -s /workspace/keep /workspace/keeplink")
	if err := f.Remove(ctx, "keeplink", true); err != nil {
		t.Fatal(err)
	}
	if got := read(t, f, "keep/deep/file"); got != "kept\n" {
		t.Fatalf("remove -r of a link followed it: %q", got)
	}
}

// TestFilesHostileTar: archives that try to escape or smuggle special
// files are refused with EBADTAR (or ETOOBIG) naming the entry, and
// nothing is written outside the extraction directory.
func TestFilesHostileTar(t *testing.T) {
	sb, f, ws := filesSandbox(t, true)
	ctx := context.Background()
	if err := f.Mkdir(ctx, "x", 0, false); err != nil {
		t.Fatal(err)
	}
	good := tarEntry{name: "ok-before", body: "ok"}
	after := tarEntry{name: "never", body: "x"}
	cases := []struct {
		name    string
		entries []tarEntry
		code    string
		naming  string
	}{
		{"dotdot", []tarEntry{good, {name: "../escape", body: "x"}, after}, "EBADTAR", "../escape"},
		{"absolute", []tarEntry{good, {name: "/abs", body: "x"}, after}, "EBADTAR", "/abs"},
		{"inner dotdot", []tarEntry{good, {name: "a/../../b", body: "x"}, after}, "EBADTAR", "a/../../b"},
		{"dotdot dir", []tarEntry{good, {name: "../escape/", typ: tar.TypeDir, mode: 0o755}, after}, "EBADTAR", "../escape/"},
		{"through symlink", []tarEntry{good, {name: "s", typ: tar.TypeSymlink, link: "/"}, {name: "s/etc/evil", body: "x"}, after}, "EBADTAR", "s/etc/evil"},
		{"through relative symlink", []tarEntry{good, {name: "u", typ: tar.TypeSymlink, link: "../.."}, {name: "u/escape", body: "x"}, after}, "EBADTAR", "u/escape"},
		{"dir through symlink", []tarEntry{good, {name: "s2", typ: tar.TypeSymlink, link: "/tmp"}, {name: "s2/evil/", typ: tar.TypeDir, mode: 0o755}, after}, "EBADTAR", "s2/evil/"},
		{"hardlink absolute", []tarEntry{good, {name: "evil", typ: tar.TypeLink, link: "/etc/passwd"}, after}, "EBADTAR", "evil"},
		{"hardlink dotdot", []tarEntry{good, {name: "evil", typ: tar.TypeLink, link: "../../etc/passwd"}, after}, "EBADTAR", "evil"},
		{"hardlink through symlink", []tarEntry{good, {name: "s3", typ: tar.TypeSymlink, link: "/etc"}, {name: "evil", typ: tar.TypeLink, link: "s3/passwd"}, after}, "EBADTAR", "evil"},
		{"char device", []tarEntry{good, {name: "evil", typ: tar.TypeChar}, after}, "EBADTAR", "evil"},
		{"block device", []tarEntry{good, {name: "evil", typ: tar.TypeBlock}, after}, "EBADTAR", "evil"},
		{"fifo", []tarEntry{good, {name: "evil", typ: tar.TypeFifo}, after}, "EBADTAR", "evil"},
	}
	for i, c := range cases {
		dir := fmt.Sprintf("x/%d", i)
		if err := f.Mkdir(ctx, dir, 0, false); err != nil {
			t.Fatal(err)
		}
		err := f.PutTar(ctx, dir, bytes.NewReader(makeTar(t, c.entries...)), 1<<20)
		wantCode(t, c.name, err, c.code)
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", c.naming)) {
			t.Fatalf("%s: the error does not name the entry %q: %v", c.name, c.naming, err)
		}
		// Entries before the refused one are there, none after it.
		if got := read(t, f, dir+"/ok-before"); got != "ok" {
			t.Fatalf("%s: entry before: %q", c.name, got)
		}
		if _, err := f.Stat(ctx, dir+"/never"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: an entry after the refused one was extracted: %v", c.name, err)
		}
	}
	// Planted before: a symlink already in the extraction directory is
	// not written through either.
	sh(t, sb, "mkdir /workspace/x/pre && ln -s /tmp /workspace/x/pre/link")
	err := f.PutTar(ctx, "x/pre", bytes.NewReader(makeTar(t, tarEntry{name: "link/evil", body: "x"})), 1<<20)
	wantCode(t, "through a planted symlink", err, "EBADTAR")
	// But an entry replaces a symlink of its own name (the link, not its
	// target, is replaced).
	sh(t, sb, "echo target > /tmp/target && ln -s /tmp/target /workspace/x/pre/replace")
	if err := f.PutTar(ctx, "x/pre", bytes.NewReader(makeTar(t, tarEntry{name: "replace", body: "new"})), 1<<20); err != nil {
		t.Fatal(err)
	}
	if got := read(t, f, "/tmp/target"); got != "target\n" {
		t.Fatalf("extraction wrote through a symlink: %q", got)
	}
	if fi, err := f.Stat(ctx, "x/pre/replace"); err != nil || fi.Type != "file" {
		t.Fatalf("replaced entry: %+v %v", fi, err)
	}

	// setuid, setgid and sticky bits are dropped, not refused.
	arc := makeTar(t, tarEntry{name: "suid", body: "x", mode: 0o4755}, tarEntry{name: "sgid/", typ: tar.TypeDir, mode: 0o2775},
		tarEntry{name: "sticky/", typ: tar.TypeDir, mode: 0o1777}, tarEntry{name: "ro/", typ: tar.TypeDir, mode: 0o555},
		tarEntry{name: "ro/inside", body: "x", mode: 0o444})
	if err := f.Mkdir(ctx, "x/modes", 0, false); err != nil {
		t.Fatal(err)
	}
	if err := f.PutTar(ctx, "x/modes", bytes.NewReader(arc), 1<<20); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{"suid": 0o755, "sgid": 0o755, "sticky": 0o755, "ro": 0o555, "ro/inside": 0o444} {
		fi, err := f.Stat(ctx, "x/modes/"+name)
		if err != nil || fi.Mode != want {
			t.Fatalf("%s: %+v %v, want mode %o", name, fi, err, want)
		}
	}
	if st, err := os.Stat(filepath.Join(ws, "x/modes/suid")); err != nil || st.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
		t.Fatalf("host view of suid: %v %v", st, err)
	}

	// Sizes: a 200 MB entry over a 1 MB limit is refused before it is
	// written; so is an archive whose entries add up past the limit.
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 200 << 20}); err != nil {
		t.Fatal(err)
	}
	huge := io.MultiReader(bytes.NewReader(hdr.Bytes()), io.LimitReader(zeros{}, 200<<20), bytes.NewReader(make([]byte, 1024)))
	err = f.PutTar(ctx, "x", huge, 1<<20)
	if !errors.Is(err, sandbox.ErrTooBig) || !strings.Contains(err.Error(), `"huge"`) {
		t.Fatalf("200 MB entry: %v", err)
	}
	half := strings.Repeat("h", 600<<10)
	err = f.PutTar(ctx, "x", bytes.NewReader(makeTar(t, tarEntry{name: "h1", body: half}, tarEntry{name: "h2", body: half})), 1<<20)
	if !errors.Is(err, sandbox.ErrTooBig) {
		t.Fatalf("entries over the limit together: %v", err)
	}
	if _, err := f.Stat(ctx, "x/h2"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("x/h2: %v", err)
	}

	// Truncated streams: inside an entry, and at an entry boundary
	// without the end-of-archive marker.
	full := makeTar(t, tarEntry{name: "t1", body: strings.Repeat("t", 1000)}, tarEntry{name: "t2", body: "x"})
	for name, cut := range map[string][]byte{"mid-entry": full[:900], "at a boundary": full[:512+1024], "mid-header": full[:100]} {
		if err := f.Mkdir(ctx, "x/trunc", 0, true); err != nil {
			t.Fatal(err)
		}
		err := f.PutTar(ctx, "x/trunc", bytes.NewReader(cut), 1<<20)
		wantCode(t, "truncated "+name, err, "EBADTAR")
		if err := f.Remove(ctx, "x/trunc", true); err != nil {
			t.Fatal(err)
		}
	}
	// Not a tar at all.
	wantCode(t, "garbage", f.PutTar(ctx, "x", strings.NewReader(strings.Repeat("garbage!", 200)), 1<<20), "EBADTAR")
	// The extraction directory must exist.
	wantCode(t, "missing directory", f.PutTar(ctx, "nope", bytes.NewReader(makeTar(t, good)), 1<<20), "ENOENT")

	// Control: the same shapes, benign, extract.
	benign := makeTar(t, tarEntry{name: "./", typ: tar.TypeDir, mode: 0o755}, tarEntry{name: "./a/b/c", body: "deep"},
		tarEntry{name: "s", typ: tar.TypeSymlink, link: "/"}, tarEntry{name: "hl", typ: tar.TypeLink, link: "a/b/c"},
		tarEntry{name: "dir/", typ: tar.TypeDir, mode: 0o700})
	if err := f.Mkdir(ctx, "x/benign", 0, false); err != nil {
		t.Fatal(err)
	}
	if err := f.PutTar(ctx, "x/benign", bytes.NewReader(benign), 1<<20); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, sb, "cd /workspace/x/benign && cat a/b/c hl && readlink s && stat -c %h a/b/c"); got != "deepdeep/\n2\n" {
		t.Fatalf("benign archive: %q", got)
	}

	// Nothing escaped: no such names anywhere in the workspace outside
	// the extraction directory, nor in the host's /etc or /.
	bad := map[string]bool{"evil": true, "escape": true, "abs": true, "b": true, "never": true, "huge": true}
	err = filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(ws, p)
		if bad[d.Name()] && !strings.HasPrefix(rel, "x/benign/") {
			return fmt.Errorf("%s exists in the host workspace", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = filepath.WalkDir("/etc", func(p string, d fs.DirEntry, err error) error {
		if err == nil && (d.Name() == "evil" || d.Name() == "escape") {
			t.Errorf("%s exists on the host", p)
		}
		return nil
	})
	for _, p := range []string{"/abs", "/b", "/escape", "/evil", "/tmp/evil"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists on the host", p)
		}
	}
	// Nor in the sandbox outside the workspace.
	if out := sh(t, sb, "ls -d /abs /b /escape /evil /tmp/evil /etc/evil 2>/dev/null; true"); out != "" {
		t.Fatalf("in the sandbox: %q", out)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestFilesSizesAndErrors: size caps, argument checks and the mapping of
// errors to fs and sandbox sentinels.
func TestFilesSizesAndErrors(t *testing.T) {
	sb, f, _ := filesSandbox(t, false)
	ctx := context.Background()
	write(t, f, "ten", "0123456789")
	if b, err := f.ReadFile(ctx, "ten", 10); err != nil || string(b) != "0123456789" {
		t.Fatalf("read at the limit: %q %v", b, err)
	}
	_, err := f.ReadFile(ctx, "ten", 9)
	if !errors.Is(err, sandbox.ErrTooBig) {
		t.Fatalf("read over the limit: %v", err)
	}
	// /proc files report size 0: the cap applies to what is read.
	if _, err := f.ReadFile(ctx, "/proc/self/../cpuinfo", 10); !errors.Is(err, sandbox.ErrTooBig) {
		t.Fatalf("read of a growing file over the limit: %v", err)
	}
	if n, err := f.WriteFile(ctx, "ten", strings.NewReader("01234567890"), 0, 10); !errors.Is(err, sandbox.ErrTooBig) || n != 0 {
		t.Fatalf("write over the limit: %d %v", n, err)
	}
	if got := read(t, f, "ten"); got != "0123456789" {
		t.Fatalf("the old file after a refused write: %q", got)
	}
	if n, err := f.WriteFile(ctx, "ten", strings.NewReader("abcdefghij"), 0, 10); err != nil || n != 10 {
		t.Fatalf("write at the limit: %d %v", n, err)
	}

	_, err = f.ReadFile(ctx, "missing", 10)
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		t.Fatalf("missing file: %v", err)
	}
	var fe *sandbox.FileError
	if !errors.As(err, &fe) || fe.Op != "read" || fe.Path != "missing" || fe.Code != "ENOENT" {
		t.Fatalf("FileError: %+v", fe)
	}
	if _, err := f.Stat(ctx, "/workspace/missing/deeper"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat missing: %v", err)
	}
	if err := f.Mkdir(ctx, "ten", 0, false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("mkdir over a file: %v", err)
	}
	if _, err := f.WriteFile(ctx, "/etc/hosts", strings.NewReader("x"), 0, 10); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("write /etc/hosts: %v", err)
	}
	// Arguments are checked before anything is sent.
	bad := []struct {
		what string
		err  error
	}{
		{"read max 0", func() error { _, err := f.ReadFile(ctx, "ten", 0); return err }()},
		{"read max -1", func() error { _, err := f.ReadFile(ctx, "ten", -1); return err }()},
		{"write max 0", func() error { _, err := f.WriteFile(ctx, "ten", strings.NewReader(""), 0, 0); return err }()},
		{"put tar max 0", f.PutTar(ctx, "/workspace", bytes.NewReader(nil), 0)},
		{"get tar max 0", f.GetTar(ctx, "/workspace", io.Discard, 0)},
		{"empty path", func() error { _, err := f.Stat(ctx, ""); return err }()},
		{"NUL in path", func() error { _, err := f.Stat(ctx, "a\x00b"); return err }()},
		{"NUL in target", f.Rename(ctx, "ten", "a\x00b")},
	}
	for _, b := range bad {
		wantCode(t, b.what, b.err, "EINVAL")
	}
	if got := read(t, f, "ten"); got != "abcdefghij" {
		t.Fatalf("after refused calls: %q", got)
	}
	// A cancelled context ends the wait.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.Stat(cctx, "ten"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled stat: %v", err)
	}

	// Many operations at once are queued and answered in order.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d", i)
			content := strings.Repeat(name, 1000)
			if _, err := f.WriteFile(ctx, name, strings.NewReader(content), 0, 1<<20); err != nil {
				errs <- err
				return
			}
			b, err := f.ReadFile(ctx, name, 1<<20)
			if err == nil && string(b) != content {
				err = fmt.Errorf("%s: read back %d bytes", name, len(b))
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// After Shutdown every operation says the sandbox is closed.
	if err := sb.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	closed := []struct {
		what string
		err  error
	}{
		{"read", func() error { _, err := f.ReadFile(ctx, "ten", 10); return err }()},
		{"write", func() error { _, err := f.WriteFile(ctx, "ten", strings.NewReader("x"), 0, 10); return err }()},
		{"list", func() error { _, err := f.ReadDir(ctx, "/"); return err }()},
		{"stat", func() error { _, err := f.Stat(ctx, "/"); return err }()},
		{"mkdir", f.Mkdir(ctx, "d", 0, false)},
		{"remove", f.Remove(ctx, "ten", false)},
		{"move", f.Rename(ctx, "ten", "eleven")},
		{"put tar", f.PutTar(ctx, "/workspace", bytes.NewReader(nil), 10)},
		{"get tar", f.GetTar(ctx, "/workspace", io.Discard, 10)},
	}
	for _, c := range closed {
		if !errors.Is(c.err, sandbox.ErrClosed) {
			t.Fatalf("%s after Shutdown: %v", c.what, c.err)
		}
	}
}

// TestFilesWorkerNotSignalable: the file operations' thread lives in the
// sandbox's pid 1 with the sandbox user's effective uid; a sandbox process
// still cannot signal it (a signal to a thread id reaches the whole init,
// which Go ends on SIGTERM).
func TestFilesWorkerNotSignalable(t *testing.T) {
	sb, f, _ := filesSandbox(t, false)
	ctx := context.Background()
	if _, err := f.Stat(ctx, "/"); err != nil { // starts the worker
		t.Fatal(err)
	}
	out := sh(t, sb, `n=0; for t in /proc/1/task/*; do n=$((n+1)); for s in TERM INT HUP QUIT ABRT; do kill -s $s ${t##*/} 2>/dev/null && echo "signalled ${t##*/} with $s"; done; done; echo "$n threads"`)
	if strings.Contains(out, "signalled") || strings.HasPrefix(out, "0 threads") {
		t.Fatalf("signals to the init's threads: %q", out)
	}
	// Control: the same loop signals a process of the sandbox.
	if got := sh(t, sb, `sleep 100 & kill -s TERM $! && echo signalled; wait`); got != "signalled\n" {
		t.Fatalf("control: %q", got)
	}
	if _, err := f.Stat(ctx, "/"); err != nil {
		t.Fatalf("after the attempts: %v", err)
	}
}

// TestFilesWriteReplacesSymlink: writing to a path whose last component is
// a symlink replaces the link; its target is untouched.
func TestFilesWriteReplacesSymlink(t *testing.T) {
	sb, f, ws := filesSandbox(t, true)
	sh(t, sb, "echo target > /tmp/target && ln -s /tmp/target /workspace/link")
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "hostlink")); err != nil {
		t.Fatal(err)
	}
	// Owned by the workspace's owner: an inode whose host owner has no
	// id in the sandbox cannot be replaced there (EOVERFLOW), by a
	// process or by the file operations.
	if err := os.Lchown(filepath.Join(ws, "hostlink"), hostOwner, hostOwner); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"link", "hostlink"} {
		write(t, f, l, "replaced")
		fi, err := f.Stat(context.Background(), l)
		if err != nil || fi.Type != "file" {
			t.Fatalf("%s after write: %+v %v", l, fi, err)
		}
	}
	if got := read(t, f, "/tmp/target"); got != "target\n" {
		t.Fatalf("the link's target changed: %q", got)
	}
	if b, err := os.ReadFile("/etc/passwd"); err != nil || bytes.Contains(b, []byte("replaced")) {
		t.Fatalf("host /etc/passwd: %v", err)
	}
}

// TestFilesLargeDirectory: a listing is bounded; one too large for a
// single answer is ETOOBIG, never a hang or a partial list.
func TestFilesLargeDirectory(t *testing.T) {
	sb, f, _ := filesSandbox(t, false)
	ctx := context.Background()
	sh(t, sb, "mkdir /workspace/many && cd /workspace/many && seq -w 1 2000 | xargs touch")
	ents, err := f.ReadDir(ctx, "many")
	if err != nil || len(ents) != 2000 || ents[0].Name != "0001" || ents[1999].Name != "2000" {
		t.Fatalf("2000 entries: %d %v", len(ents), err)
	}
	sh(t, sb, "cd /workspace/many && seq -w 2001 30000 | xargs touch")
	if _, err := f.ReadDir(ctx, "many"); !errors.Is(err, sandbox.ErrTooBig) {
		t.Fatalf("30000 entries: %v", err)
	}
	// remove -r copes with it.
	if err := f.Remove(ctx, "many", true); err != nil {
		t.Fatal(err)
	}
}
