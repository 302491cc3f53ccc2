package linux

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/sandbox"
)

// openFDs lists this process's open descriptors.
func openFDs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		out = append(out, e.Name()+" "+target)
	}
	return out
}

// children lists this process's child processes, over all its threads.
func children(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread has exited
		}
		out = append(out, strings.Fields(string(b))...)
	}
	slices.Sort(out)
	return out
}

// TestCreateFailureRollsBack: a create that fails in a host-side phase
// leaves nothing behind in this process: no descriptor, no child. In
// prepare (a root layer that does not exist) nothing of the sandbox runs
// yet; in startInit (a template user the template's /etc/passwd does not
// know, found out by the provisioning while the init starts) the init has
// started and the cgroup exists, and both go.
func TestCreateFailureRollsBack(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	// What a first create makes once per process (the cgroup library's
	// handle on the cgroup root, shared layers…) is not a leak.
	if _, err := r.Run(ctx, &sandbox.Spec{Limits: sandbox.Limits{Pids: 64}}, &sandbox.Process{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	r.sweeps.Wait()
	emptyTemplate := t.TempDir()
	cases := []struct {
		name, stage string
		spec        *sandbox.Spec
	}{
		{"prepare", "root layers", &sandbox.Spec{Limits: sandbox.Limits{Pids: 64},
			Root: &sandbox.RootFS{Layers: []string{filepath.Join(emptyTemplate, "missing")}}}},
		{"start init", "template user", &sandbox.Spec{Limits: sandbox.Limits{Pids: 64},
			Root: &sandbox.RootFS{Layers: []string{emptyTemplate}, User: "nosuchuser"}}},
	}
	fds, kids := openFDs(t), children(t)
	for _, c := range cases {
		for _, oneShot := range []bool{true, false} {
			sb, err := r.create(ctx, c.spec, oneShot)
			var se *sandbox.SetupError
			if !errors.As(err, &se) || se.Stage != c.stage {
				if sb != nil {
					_ = sb.Shutdown(ctx)
				}
				t.Fatalf("%s: create: %v, want a setup error at stage %q", c.name, err, c.stage)
			}
			if got := openFDs(t); !slices.Equal(got, fds) {
				t.Errorf("%s (one-shot %v): descriptors left open:\nbefore %q\nafter  %q", c.name, oneShot, fds, got)
			}
			if got := children(t); !slices.Equal(got, kids) {
				t.Errorf("%s (one-shot %v): children left: before %v, after %v", c.name, oneShot, kids, got)
			}
		}
	}
}
