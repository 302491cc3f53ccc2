package linux

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// maxFDsPerSandbox is what a live sandbox may cost its runtime in
// descriptors: the control socket, the init's pidfd and the scratch
// tmpfs. Everything else is shared by the runtime's sandboxes (the uid
// slots' lock file, one lock per layer) or gone once the sandbox is ready
// (the init's stderr pipe).
const maxFDsPerSandbox = 3

// fdCount is how many descriptors this process has open.
func fdCount(t *testing.T) int {
	t.Helper()
	return len(openFDs(t))
}

// fdsTo lists this process's descriptors open on path.
func fdsTo(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, fd := range openFDs(t) {
		if strings.HasSuffix(fd, " "+path) {
			out = append(out, fd)
		}
	}
	return out
}

// TestDescriptorsPerSandbox: a daemon's runtime (WithSpawner) holds at
// most maxFDsPerSandbox descriptors per live sandbox, besides those its
// sandboxes share (the uid slots' lock file, one per layer); each
// sandbox's go when it ends, the shared ones with the last.
func TestDescriptorsPerSandbox(t *testing.T) {
	r := newSpawnerRuntime(t)
	ctx := context.Background()
	spec := &sandbox.Spec{Limits: sandbox.Limits{Pids: 64}}
	create := func() *linuxSandbox {
		t.Helper()
		sb, err := r.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		r.sweeps.Wait()
		ls := sb.(*linuxSandbox)
		<-ls.errDone // the stderr pipe is closed once the init is ready
		return ls
	}
	end := func(sb *linuxSandbox) {
		t.Helper()
		if err := sb.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		<-sb.Done()
	}
	// What the first sandbox opens for the runtime's life (the cgroup
	// library's handles, the poller…) is not the sandbox's.
	end(create())
	base := openFDs(t)
	// The first live sandbox opens what they all share.
	first := create()
	defer first.Shutdown(ctx)
	if first.slot.holder == nil {
		t.Fatal("control: the spawner holds no lease")
	}
	shared := openFDs(t)

	const n = 24
	var sbs []*linuxSandbox
	defer func() {
		for _, sb := range sbs {
			_ = sb.Shutdown(ctx)
		}
	}()
	for range n {
		sbs = append(sbs, create())
	}
	res, err := sbs[n-1].Exec(ctx, &sandbox.Process{Args: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("control: exec: %v %+v", err, res)
	}
	grown := fdCount(t) - len(shared)
	t.Logf("%d descriptors for %d more live sandboxes (%.2f each); %d shared", grown, n, float64(grown)/n, len(shared)-len(base)-maxFDsPerSandbox)
	if grown > maxFDsPerSandbox*n {
		t.Errorf("%d live sandboxes hold %d descriptors, more than %d each:\nbefore %q\nafter  %q",
			n, grown, maxFDsPerSandbox, shared, openFDs(t))
	}
	for _, sb := range sbs {
		end(sb)
	}
	if got := openFDs(t); !slices.Equal(got, shared) {
		t.Errorf("descriptors left once the sandboxes ended:\nbefore %q\nafter  %q", shared, got)
	}
	end(first)
	if got := openFDs(t); !slices.Equal(got, base) {
		t.Errorf("descriptors left once every sandbox ended:\nbefore %q\nafter  %q", base, got)
	}
}

// TestLayerLockedOncePerRuntime: sandboxes of one runtime that use the
// same layer share one descriptor and lock on it; while any of them
// lives, another process cannot take the layer (its collector leaves it),
// and once the last has ended the layer is collected (a per-hostname
// /etc layer). Control: a layer nobody uses is collected.
func TestLayerLockedOncePerRuntime(t *testing.T) {
	r := newSpawnerRuntime(t)
	other := newTestRuntime(t) // another moat on the host
	ctx := context.Background()
	prefix := fmt.Sprintf("lock-%x-", rand.Uint32())
	t.Cleanup(func() {
		for _, p := range etcLayersOf(r.stateDir, prefix) {
			_ = os.RemoveAll(p)
		}
	})
	name := prefix + "shared"
	var sbs []sandbox.Sandbox
	defer func() {
		for _, sb := range sbs {
			_ = sb.Shutdown(ctx)
		}
	}()
	for range 3 {
		sb, err := r.Create(ctx, &sandbox.Spec{Hostname: name})
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
	}
	layer := etcLayersOf(r.stateDir, prefix)[name]
	if layer == "" {
		t.Fatal("control: no /etc layer for the sandboxes' hostname")
	}
	if got := fdsTo(t, layer); len(got) != 1 {
		t.Errorf("3 sandboxes of one runtime hold %d descriptors on their /etc layer, want 1: %q", len(got), got)
	}
	base := sbs[0].(*linuxSandbox).leases
	for _, l := range base {
		if got := fdsTo(t, l.path); len(got) != 1 {
			t.Errorf("layer %s: %d descriptors, want 1: %q", l.path, len(got), got)
		}
	}
	// Another process's lock: flock(1) asks for it exclusively, as a
	// collector does.
	if flock, err := exec.LookPath("flock"); err == nil {
		if err := exec.Command(flock, "--nonblock", "--exclusive", layer, "true").Run(); err == nil {
			t.Error("another process took a layer in use exclusively")
		}
	}
	if _, err := other.Reclaim(); err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs[:2] {
		if err := sb.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layer); err != nil {
		t.Fatalf("a layer in use was removed: %v", err)
	}
	res, err := sbs[2].Exec(ctx, &sandbox.Process{Args: []string{"cat", "/etc/hostname"}})
	if err != nil || res.Stdout != name+"\n" {
		t.Fatalf("the last sandbox's /etc: %+v %v", res, err)
	}
	if got := fdsTo(t, layer); len(got) != 1 {
		t.Errorf("one sandbox left: %d descriptors on its layer, want 1", len(got))
	}
	if err := sbs[2].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layer); !os.IsNotExist(err) {
		t.Errorf("the layer outlived its last sandbox: %v", err)
	}
	if got := fdsTo(t, layer); len(got) != 0 {
		t.Errorf("descriptors left on the removed layer: %q", got)
	}
	if n := r.layers.count(); n != 0 {
		t.Errorf("%d layers still locked with no sandbox", n)
	}

	// Control: the collector does remove a layer nobody uses.
	p, err := etcLayer(r.stateDir, prefix+"unused", sandbox.UID, sandbox.GID, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("an unused layer was not collected: %v", err)
	}
}

// TestSpecLayersLockedOnce: sandboxes made from one template hold one
// lock on its layer between them, which a store's removal cannot take
// while any lives; the last to end releases it.
func TestSpecLayersLockedOnce(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	tmpl := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tmpl, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	var sbs []sandbox.Sandbox
	defer func() {
		for _, sb := range sbs {
			_ = sb.Shutdown(ctx)
		}
	}()
	for range 2 {
		sb, err := r.Create(ctx, &sandbox.Spec{Root: &sandbox.RootFS{Layers: []string{tmpl}}})
		if err != nil {
			testutil.SkipOrFail(t, "a sandbox from a template: "+err.Error())
		}
		sbs = append(sbs, sb)
	}
	if got := fdsTo(t, tmpl); len(got) != 1 {
		t.Errorf("2 sandboxes of one template: %d descriptors on it, want 1: %q", len(got), got)
	}
	locked := func() bool {
		f, err := os.Open(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
	}
	if err := sbs[0].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if !locked() {
		t.Error("a template in use could be locked exclusively")
	}
	if err := sbs[1].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if locked() {
		t.Error("the template is still locked after its last sandbox ended")
	}
	if got := fdsTo(t, tmpl); len(got) != 0 {
		t.Errorf("descriptors left on the template: %q", got)
	}
}
