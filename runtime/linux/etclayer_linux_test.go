package linux

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/sandbox"
)

// etcLayersOf lists the /etc layers under stateDir whose hostname starts
// with prefix, by hostname.
func etcLayersOf(stateDir, prefix string) map[string]string {
	out := map[string]string{}
	ents, _ := os.ReadDir(filepath.Join(stateDir, "etc"))
	for _, e := range ents {
		p := filepath.Join(stateDir, "etc", e.Name())
		if b, err := os.ReadFile(filepath.Join(p, "hostname")); err == nil && strings.HasPrefix(string(b), prefix) {
			out[strings.TrimSpace(string(b))] = p
		}
	}
	return out
}

// TestEtcLayersCollected: each distinct hostname gets an /etc layer while
// a sandbox uses it; the layer is removed when its last sandbox ends, a
// live sandbox's layer is kept, a one-shot run leaves none, and a layer
// nobody uses (left by a crashed moat) is removed by Reclaim. Control:
// the layers exist while their sandboxes live.
func TestEtcLayersCollected(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("etc-%x-", rand.Uint32())
	t.Cleanup(func() {
		for _, p := range etcLayersOf(r.stateDir, prefix) {
			_ = os.RemoveAll(p)
		}
	})
	const n = 6
	var sbs []sandbox.Sandbox
	for i := range n {
		// Two sandboxes share the last hostname.
		name := prefix + strconv.Itoa(min(i, n-2))
		sb, err := r.Create(ctx, &sandbox.Spec{Hostname: name})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Shutdown(ctx)
		sbs = append(sbs, sb)
	}
	if got := etcLayersOf(r.stateDir, prefix); len(got) != n-1 {
		t.Fatalf("%d layers for %d live hostnames: %v", len(got), n-1, got)
	}
	// End all but the first sandbox and one of the two sharing a name.
	for _, sb := range sbs[1 : n-1] {
		if err := sb.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := etcLayersOf(r.stateDir, prefix)
	if len(got) != 2 || got[prefix+"0"] == "" || got[prefix+strconv.Itoa(n-2)] == "" {
		t.Fatalf("after ending unused hostnames' sandboxes, layers %v; want those of %s0 and %s%d only", got, prefix, prefix, n-2)
	}
	// The live sandboxes still see their layer.
	for _, sb := range []sandbox.Sandbox{sbs[0], sbs[n-1]} {
		res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"cat", "/etc/hostname"}})
		if err != nil || !strings.HasPrefix(res.Stdout, prefix) {
			t.Fatalf("hostname in a live sandbox: %+v %v", res, err)
		}
	}
	for _, sb := range sbs {
		_ = sb.Shutdown(ctx)
	}
	if got := etcLayersOf(r.stateDir, prefix); len(got) != 0 {
		t.Fatalf("layers left after every sandbox ended: %v", got)
	}

	// A one-shot run leaves no layer.
	res, err := r.Run(ctx, &sandbox.Spec{Hostname: prefix + "run"}, &sandbox.Process{Args: []string{"cat", "/etc/hostname"}})
	if err != nil || res.Stdout != prefix+"run\n" {
		t.Fatalf("run: %+v %v", res, err)
	}
	if got := etcLayersOf(r.stateDir, prefix); len(got) != 0 {
		t.Fatalf("layers left after a one-shot run: %v", got)
	}

	// A layer nobody holds (a crashed moat's) goes at the next Reclaim.
	if _, err := etcLayer(r.stateDir, prefix+"crashed", sandbox.UID, sandbox.GID, false); err != nil {
		t.Fatal(err)
	}
	if got := etcLayersOf(r.stateDir, prefix); len(got) != 1 {
		t.Fatalf("control: the crashed moat's layer was not built: %v", got)
	}
	if _, err := r.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if got := etcLayersOf(r.stateDir, prefix); len(got) != 0 {
		t.Fatalf("unused layers left after Reclaim: %v", got)
	}
}

// TestLeasedLayerNames: only layers of versions that every user leases
// are collectable; an older moat's (unleased) layers are left alone.
func TestLeasedLayerNames(t *testing.T) {
	for name, want := range map[string]bool{
		"etc2-0123abcd": true, "host2-ab": true, "tmpl2-ab": true, "etc10-ab": true,
		"0123abcd": false, "host-ab": false, "tmpl-ab": false, "etc1-ab": false,
		"etc02-ab": false, "etc2": false, ".dead-etc2-ab-x": false, "other2-ab": false,
		"locale1-ab": true, "locale2-ab": true, "locale0-ab": false, "locale-ab": false,
	} {
		if got := leased(name); got != want {
			t.Errorf("leased(%q) = %v, want %v", name, got, want)
		}
	}
	if n, err := etcLayer(t.TempDir(), "h", sandbox.UID, sandbox.GID, false); err != nil || !leased(filepath.Base(n)) {
		t.Errorf("a new /etc layer %q (%v) is not collectable", n, err)
	}
}
