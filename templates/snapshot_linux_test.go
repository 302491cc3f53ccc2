package templates_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/runtime/linux"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/templates"
)

func TestMain(m *testing.M) {
	linux.RunHelper()
	os.Exit(m.Run())
}

// env is a runtime and a private store.
type env struct {
	t  *testing.T
	rt *linux.Runtime
	st *templates.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testutil.RequireRoot(t)
	rt, err := linux.New(linux.WithKillGrace(200 * time.Millisecond))
	if err != nil {
		testutil.SkipOrFail(t, err.Error())
	}
	st, err := templates.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, rt: rt, st: st}
}

// create starts a long-lived sandbox on root and shuts it down at the
// test's end.
func (e *env) create(root *sandbox.RootFS) sandbox.Sandbox {
	e.t.Helper()
	sb, err := e.rt.Create(context.Background(), &sandbox.Spec{Root: root, Limits: sandbox.Limits{Pids: 64}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sb.Shutdown(context.Background()) })
	return sb
}

// sh runs a script in sb and fails the test unless it exits 0.
func sh(t *testing.T, sb sandbox.Sandbox, script string) string {
	t.Helper()
	res, err := sb.Exec(context.Background(), &sandbox.Process{Args: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d: %s%s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// listing describes every entry of the sandbox's writable places: path,
// type, mode, owner, size, link target and content hash.
const listing = `cd / && find workspace home/sandbox tmp -printf '%p %y %m %u:%g %l\n' | sort && find workspace home/sandbox tmp -type f -exec md5sum {} + | sort`

func (e *env) capture(sb sandbox.Sandbox, l *templates.Lineage) *templates.Snapshot {
	e.t.Helper()
	sn, err := e.st.Capture(context.Background(), sb.(sandbox.DiffExporter), l, templates.CaptureInfo{Sandbox: sb.ID(), Tenant: "t"})
	if err != nil {
		e.t.Fatal(err)
	}
	return sn
}

func (e *env) fork(sn *templates.Snapshot) sandbox.Sandbox {
	e.t.Helper()
	root, err := e.st.SnapshotRoot(sn)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.create(root)
}

func hostTemplate(e *env) *templates.Template {
	t, err := e.st.Template(templates.HostTemplate)
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

// TestRollbackExact: a sandbox made from a snapshot holds exactly the
// snapshot's files, through a chain of diff snapshots covering adds,
// changes, deletes, renames, permission changes and symlinks.
func TestRollbackExact(t *testing.T) {
	e := newEnv(t)
	tmpl := hostTemplate(e)
	sb := e.create(e.st.Root(tmpl))
	l := templates.NewLineage(tmpl, nil)
	sh(t, sb, `cd /workspace && mkdir -p d/e keep && echo one > a && echo two > b && echo deep > d/e/f &&
		ln -s a link && echo secret > p && chmod 600 p && echo x > keep/x && mkfifo fifo 2>/dev/null; rm -f fifo;
		echo home > /home/sandbox/.rc && echo t > /tmp/t`)
	want1 := sh(t, sb, listing)
	s1 := e.capture(sb, l)
	if s1.Parent != "" || s1.Depth != 1 {
		t.Fatalf("first snapshot: %+v", s1)
	}

	sh(t, sb, `cd /workspace && echo changed > a && rm b && mv d d2 && chmod 644 p && rm link && ln -s d2/e/f link &&
		echo new > c && rm -r keep && mkdir keep && echo y > keep/y && rm /tmp/t && chmod 700 d2`)
	want2 := sh(t, sb, listing)
	s2 := e.capture(sb, l)
	if s2.Parent != s1.ID || s2.Depth != 2 {
		t.Fatalf("second snapshot: parent %q depth %d, want %s 2", s2.Parent, s2.Depth, s1.ID)
	}
	if s2.Whiteouts == 0 {
		t.Errorf("second snapshot has no whiteouts: %+v", s2)
	}
	// The diff holds what changed, not the unchanged home file.
	if _, err := os.Lstat(filepath.Join(e.st.Dir(), "layers", strings.TrimPrefix(s2.Layer, "sha256:"), "home/sandbox/.rc")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unchanged file copied into the diff snapshot: %v", err)
	}
	sh(t, sb, `cd /workspace && rm -rf * && echo later > later`)

	for _, c := range []struct {
		sn   *templates.Snapshot
		want string
	}{{s1, want1}, {s2, want2}} {
		got := sh(t, e.fork(c.sn), listing)
		if got != c.want {
			t.Errorf("sandbox from %s:\n got:\n%s\nwant:\n%s", c.sn.ID, got, c.want)
		}
	}
	if got := sh(t, sb, "ls /workspace"); got != "later\n" {
		t.Errorf("the original sandbox changed: %q", got)
	}
}

// TestForkIndependent: sandboxes forked from one snapshot do not see each
// other's writes, nor the parent's writes after the snapshot, nor does the
// parent see theirs.
func TestForkIndependent(t *testing.T) {
	e := newEnv(t)
	tmpl := hostTemplate(e)
	parent := e.create(e.st.Root(tmpl))
	sh(t, parent, "echo base > /workspace/f")
	sn := e.capture(parent, templates.NewLineage(tmpl, nil))
	a, b := e.fork(sn), e.fork(sn)
	sh(t, a, "echo a > /workspace/f && echo a > /workspace/only-a")
	sh(t, parent, "echo parent > /workspace/f")
	if got := sh(t, b, "cat /workspace/f; ls /workspace"); got != "base\nf\n" {
		t.Errorf("fork b sees %q", got)
	}
	if got := sh(t, a, "cat /workspace/f"); got != "a\n" {
		t.Errorf("fork a sees %q", got)
	}
	if got := sh(t, parent, "cat /workspace/f; ls /workspace"); got != "parent\nf\n" {
		t.Errorf("parent sees %q", got)
	}
	// A snapshot in use cannot be removed; once its sandboxes are gone it can.
	if err := e.st.RemoveSnapshot(sn.ID); !errors.Is(err, templates.ErrInUse) {
		t.Fatalf("remove in use: %v", err)
	}
	for _, sb := range []sandbox.Sandbox{a, b} {
		_ = sb.Shutdown(context.Background())
	}
	if err := e.st.RemoveSnapshot(sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Snapshot(sn.ID); !errors.Is(err, templates.ErrNotFound) {
		t.Fatalf("removed snapshot still there: %v", err)
	}
}

// TestRestoreNotSteeredBySymlinks: symlinks a sandbox plants before a
// snapshot (to the host's /, to a host directory, to /proc/1/root) stay
// symlinks inside the snapshot and are resolved inside the restored
// sandbox's own root; nothing is written outside the store. The control
// shows the same links do lead outside when followed on the host.
func TestRestoreNotSteeredBySymlinks(t *testing.T) {
	e := newEnv(t)
	outside := t.TempDir()
	sentinel := filepath.Join(outside, "sentinel")
	if err := os.WriteFile(sentinel, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl := hostTemplate(e)
	sb := e.create(e.st.Root(tmpl))
	sh(t, sb, "cd /workspace && ln -s "+outside+" out && ln -s / root && ln -s /proc/1/root init && ln -s "+sentinel+" sentinel && mkdir -p sub && ln -s ../../.. sub/up")
	sn := e.capture(sb, templates.NewLineage(tmpl, nil))
	layer := filepath.Join(e.st.Dir(), "layers", strings.TrimPrefix(sn.Layer, "sha256:"), "workspace")
	for _, name := range []string{"out", "root", "init", "sentinel", "sub/up"} {
		fi, err := os.Lstat(filepath.Join(layer, name))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s in the snapshot: %v %v (want a symlink)", name, fi, err)
		}
	}
	restored := e.fork(sn)
	// Writes through the links land inside the sandbox (or fail); the
	// host's directory stays as it was.
	res, err := restored.Exec(context.Background(), &sandbox.Process{Args: []string{"/bin/sh", "-c",
		"echo pwned > /workspace/sentinel; echo pwned > /workspace/out/new; echo pwned > /workspace/sub/up/tmp/x; ls /workspace/out/ 2>&1; true"}})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(sentinel); string(b) != "host\n" {
		t.Fatalf("host sentinel changed: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("host directory gained entries: %v (sandbox said %s%s)", ents, res.Stdout, res.Stderr)
	}
	// Control: followed on the host, the snapshot's link reaches outside.
	if target, err := os.Readlink(filepath.Join(layer, "out")); err != nil || target != outside {
		t.Fatalf("control: link target %q %v", target, err)
	}
	if _, err := os.Stat(filepath.Join(layer, "sentinel")); err != nil {
		t.Fatalf("control: the planted link should resolve on the host: %v", err)
	}
}

// TestCaptureRefusesWithoutFreezerOrAfterShutdown: a shut-down sandbox
// cannot be captured.
func TestCaptureAfterShutdown(t *testing.T) {
	e := newEnv(t)
	tmpl := hostTemplate(e)
	sb := e.create(e.st.Root(tmpl))
	_ = sb.Shutdown(context.Background())
	_, err := e.st.Capture(context.Background(), sb.(sandbox.DiffExporter), templates.NewLineage(tmpl, nil), templates.CaptureInfo{})
	if !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("capture after shutdown: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.st.Dir(), "tmp")); len(ents) != 0 {
		t.Fatalf("capture left work behind: %v", ents)
	}
}

// TestCaptureQuota: Capture counts the tenant's snapshots by what they
// allocate. A tenant over its quota (an operator lowered it) is refused
// before anything is copied; one whose capture would pass it is refused
// while copying; both with ErrQuota and nothing left in the store; other
// tenants are not counted.
func TestCaptureQuota(t *testing.T) {
	e := newEnv(t)
	tmpl := hostTemplate(e)
	sb := e.create(e.st.Root(tmpl))
	l := templates.NewLineage(tmpl, nil)
	sh(t, sb, `head -c 1M /dev/urandom > /workspace/a && truncate -s 1G /workspace/holes`)
	info := templates.CaptureInfo{Sandbox: sb.ID(), Tenant: "t", Quota: 2 << 20}
	s1, err := e.st.Capture(context.Background(), sb.(sandbox.DiffExporter), l, info)
	if err != nil {
		t.Fatalf("1 MiB of data and 1 GiB of holes under a 2 MiB quota: %v", err)
	}
	used, err := e.st.TenantUsage("t")
	if err != nil || used != s1.DiskBytes || used < 1<<20 || used > 2<<20 || s1.Bytes < 1<<30 {
		t.Fatalf("usage %d (%v); snapshot %+v", used, err, s1)
	}
	if other, _ := e.st.TenantUsage("u"); other != 0 {
		t.Fatalf("tenant u uses %d", other)
	}
	listStore := func() []string {
		var out []string
		for _, sub := range []string{"layers", "snapshots", "tmp"} {
			ents, _ := os.ReadDir(filepath.Join(e.st.Dir(), sub))
			for _, en := range ents {
				out = append(out, sub+"/"+en.Name())
			}
		}
		return out
	}
	before := listStore()
	sh(t, sb, `head -c 2M /dev/urandom > /workspace/b`)
	for _, c := range []struct {
		name  string
		quota int64
		want  string
	}{{"over", 2 << 20, "needs more than the"}, {"used up", used, "quota is used up"}} {
		info.Quota = c.quota
		_, err := e.st.Capture(context.Background(), sb.(sandbox.DiffExporter), l, info)
		if !errors.Is(err, templates.ErrQuota) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want ErrQuota saying %q", c.name, err, c.want)
		}
		if after := listStore(); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Fatalf("%s: the store holds %v, was %v", c.name, after, before)
		}
	}
	// The lineage did not move: with room, the next capture is the diff
	// since s1.
	info.Quota = 8 << 20
	s2, err := e.st.Capture(context.Background(), sb.(sandbox.DiffExporter), l, info)
	if err != nil || s2.Parent != s1.ID {
		t.Fatalf("with room: %+v %v", s2, err)
	}
	if err := e.st.RemoveSnapshot(s2.ID); err != nil {
		t.Fatal(err)
	}
	if now, _ := e.st.TenantUsage("t"); now != used {
		t.Fatalf("usage after removing s2: %d, want %d", now, used)
	}
}
