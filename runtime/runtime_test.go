package runtime

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// fake is a runtime that records the options it was opened with.
type fake struct{ opts Options }

func (f *fake) Create(context.Context, *sandbox.Spec) (sandbox.Sandbox, error) { return nil, nil }
func (f *fake) Run(context.Context, *sandbox.Spec, *sandbox.Process) (*sandbox.Result, error) {
	return nil, nil
}
func (f *fake) Enforcement() sandbox.Enforcement { return sandbox.Enforcement{Runtime: "fake"} }

// reset empties the registry for one test and restores it after.
func reset(t *testing.T) {
	t.Helper()
	mu.Lock()
	saved := [...]any{factories, probers, helpers}
	factories, probers, helpers = map[string]Factory{}, map[string]Prober{}, map[string]func(){}
	mu.Unlock()
	t.Cleanup(func() {
		mu.Lock()
		factories, probers, helpers = saved[0].(map[string]Factory), saved[1].(map[string]Prober), saved[2].(map[string]func())
		mu.Unlock()
	})
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

func TestOpenReturnsRegisteredRuntime(t *testing.T) {
	reset(t)
	var got *fake
	Register("fake", func(o Options) (sandbox.Runtime, error) { got = &fake{opts: o}; return got, nil })
	opts := Options{Defaults: sandbox.Limits{Pids: 64}, KillGrace: time.Second, StateDir: "/x", LongLived: true}
	rt, err := Open("fake", opts)
	if err != nil {
		t.Fatal(err)
	}
	if rt != got || rt.Enforcement().Runtime != "fake" {
		t.Fatalf("Open returned %v, want the factory's runtime", rt)
	}
	if got.opts.Defaults.Pids != 64 || got.opts.KillGrace != time.Second || got.opts.StateDir != "/x" || !got.opts.LongLived {
		t.Errorf("factory got %+v, want %+v", got.opts, opts)
	}
	if got.opts.Logger == nil {
		t.Error("a nil Logger is not replaced by slog.Default()")
	}
	// A factory's error comes back as is.
	boom := errors.New("boom")
	Register("broken", func(Options) (sandbox.Runtime, error) { return nil, boom })
	if _, err := Open("broken", Options{}); !errors.Is(err, boom) {
		t.Errorf("Open(broken): %v, want %v", err, boom)
	}
	if n := Names(); !slices.Equal(n, []string{"broken", "fake"}) {
		t.Errorf("Names() = %v", n)
	}
	if !Known("fake") || Known("nosuch") {
		t.Error("Known is wrong")
	}
}

func TestRegisterDuplicatePanics(t *testing.T) {
	reset(t)
	f := func(Options) (sandbox.Runtime, error) { return &fake{}, nil }
	Register("a", f)
	mustPanic(t, "a second Register(a)", func() { Register("a", f) })
	mustPanic(t, "Register with a nil factory", func() { Register("b", nil) })
	mustPanic(t, "Register with no name", func() { Register("", f) })
	RegisterProbe("a", func() []Check { return nil })
	mustPanic(t, "a second RegisterProbe(a)", func() { RegisterProbe("a", func() []Check { return nil }) })
	RegisterHelper("a", func() {})
	mustPanic(t, "a second RegisterHelper(a)", func() { RegisterHelper("a", func() {}) })
}

func TestUnknownNameListsRegistered(t *testing.T) {
	reset(t)
	_, err := Open("nosuch", Options{})
	if err == nil || !strings.Contains(err.Error(), `unknown runtime "nosuch"`) || !strings.Contains(err.Error(), "none") {
		t.Errorf("empty registry: %v", err)
	}
	f := func(Options) (sandbox.Runtime, error) { return &fake{}, nil }
	Register("vm", f)
	Register("linux", f)
	_, err = Open("nosuch", Options{})
	var ue *UnknownError
	if !errors.As(err, &ue) || ue.Name != "nosuch" || !slices.Equal(ue.Known, []string{"linux", "vm"}) {
		t.Fatalf("Open(nosuch): %#v", err)
	}
	if want := `unknown runtime "nosuch" (known runtimes: linux, vm)`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if _, err := Probe("nosuch"); !errors.As(err, &ue) {
		t.Errorf("Probe(nosuch): %v", err)
	}
}

func TestProbeAndHelpers(t *testing.T) {
	reset(t)
	f := func(Options) (sandbox.Runtime, error) { return &fake{}, nil }
	Register("a", f)
	Register("b", f)
	if c, err := Probe("a"); err != nil || c != nil {
		t.Errorf("a runtime without a probe: %v %v", c, err)
	}
	RegisterProbe("b", func() []Check { return []Check{{Name: "kvm", OK: true}} })
	if c, err := Probe("b"); err != nil || len(c) != 1 || c[0].Name != "kvm" {
		t.Errorf("Probe(b): %v %v", c, err)
	}
	var ran []string
	RegisterHelper("b", func() { ran = append(ran, "b") })
	RegisterHelper("a", func() { ran = append(ran, "a") })
	RunHelpers()
	if !slices.Equal(ran, []string{"a", "b"}) {
		t.Errorf("helpers ran %v, want [a b]", ran)
	}
}
