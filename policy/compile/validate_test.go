package compile

import (
	"errors"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// compileWithin compiles spec (a dry run: nothing is created on the
// host) and fails the test if the compiler has not returned within d.
func compileWithin(t *testing.T, d time.Duration, spec *sandbox.Spec, o Options) (*sandbox.Spec, *Report, error) {
	t.Helper()
	type out struct {
		spec *sandbox.Spec
		rep  *Report
		err  error
	}
	ch := make(chan out, 1)
	go func() {
		eff, err := policy.Compile(Context(spec, "/nonexistent-home"))
		if err != nil {
			// The policy refuses the context itself (a relative
			// workspace): the compiler must refuse the spec on its own.
			if eff, err = policy.Compile(Context(&sandbox.Spec{}, "/nonexistent-home")); err != nil {
				ch <- out{err: err}
				return
			}
		}
		o.DryRun = true
		s, r, err := Policy(eff, spec, o)
		ch <- out{s, r, err}
	}()
	select {
	case o := <-ch:
		return o.spec, o.rep, o.err
	case <-time.After(d):
		t.Fatalf("Compile(%.200q) did not return within %v: it loops", mustSpec(spec), d)
	}
	return nil, nil, nil
}

func mustSpec(s *sandbox.Spec) string {
	var b strings.Builder
	b.WriteString("ws=" + s.Workspace)
	for _, x := range s.Binds {
		b.WriteString(" bind=" + x.Source + ":" + x.Target)
	}
	return b.String()
}

// TestCompileBadPaths: a relative, unclean or empty-looking bind target
// (which made the compiler's walk up with path.Dir loop forever at ".")
// is refused at once with ErrInvalidSpec; a valid spec compiles.
func TestCompileBadPaths(t *testing.T) {
	ws := tree(t, ".git/config", "a/b")
	src := tree(t, ".git/config", ".bashrc", "sub/.git/config")
	for _, target := range []string{".", "rel", "./x", "../x", "x/", "/x/../y", "/x//y", "/a\x00b", "/proc/x", "/"} {
		_, _, err := compileWithin(t, 5*time.Second, &sandbox.Spec{Workspace: ws,
			Binds: []sandbox.Bind{{Source: src, Target: target, Writable: true}}}, Options{})
		if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "bind target") {
			t.Errorf("target %q: %v, want ErrInvalidSpec naming the bind target", target, err)
		}
	}
	for _, spec := range []*sandbox.Spec{
		{Workspace: "rel/ws"},
		{Workspace: ws + "/"},
		{Workspace: "/dev"},
		{Binds: []sandbox.Bind{{Source: "/sys", Target: "/s"}}},
		{Binds: []sandbox.Bind{{Source: "rel", Target: "/s"}}},
	} {
		if _, _, err := compileWithin(t, 5*time.Second, spec, Options{}); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", mustSpec(spec), err)
		}
	}
	if _, _, err := compileWithin(t, 5*time.Second, &sandbox.Spec{Workspace: ws}, Options{Hide: []string{"rel"}}); err == nil || errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("a relative hidden path (the operator's): %v", err)
	}
	// Control: the same bind with a clean absolute target compiles and
	// protects what it holds.
	out, _, err := compileWithin(t, 5*time.Second, &sandbox.Spec{Workspace: ws,
		Binds: []sandbox.Bind{{Source: src, Target: "/data", Writable: true}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m := restrictions(out.Restrict); m["/data/.bashrc"] == "" {
		t.Errorf("control: %v", out.Restrict)
	}
}

// TestAddTerminates: the compiler's walk up from a restricted path ends
// for any string, even one that is not a clean absolute path.
func TestAddTerminates(t *testing.T) {
	for _, p := range []string{"", ".", "rel", "rel/x", "./x", "../x", "/", "/a", "//a", "/a/../b"} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			c := &compiler{o: Options{MaxRestrict: 10}, rep: &Report{}, spec: &sandbox.Spec{Restrict: []sandbox.Restriction{{Path: "/a", Mode: sandbox.Pin}}}, seen: map[string]bool{}}
			c.add(p, sandbox.Hide)
			for _, r := range c.spec.Restrict {
				if !path.IsAbs(r.Path) || path.Clean(r.Path) != r.Path || r.Path == "/" {
					t.Errorf("add(%q) restricted %q", p, r.Path)
				}
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("add(%q) loops", p)
		}
	}
}
