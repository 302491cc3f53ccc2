// Package runtime is moat's registry of sandbox runtimes, as gVisor's is
// of platforms: each runtime registers itself by name in an init function
// (Register), and a program opens the one its operator chose by name
// (Open, the --runtime flag) without importing it. A program links a
// runtime in by importing its package for the side effect:
//
//	import _ "github.com/moat-sandbox/moat/runtime/linux"
//
// so another runtime (a microVM) is one more import. Besides its Factory a
// runtime may register a probe of what the host offers it (RegisterProbe,
// for moat doctor) and the entry point of the helper processes it starts
// from this binary (RegisterHelper, run by RunHelpers first thing in main).
package runtime

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// Default is the runtime moat opens when none is named.
const Default = "linux"

// Options configure a runtime when it is opened; a zero field means the
// runtime's own default. They are the settings every runtime understands;
// what only one runtime has stays behind that runtime's own package.
type Options struct {
	// Defaults are the limits a spec gets for every field it leaves zero
	// (the operator's config file).
	Defaults sandbox.Limits
	// KillGrace is the SIGTERM→SIGKILL grace period.
	KillGrace time.Duration
	// Logger gets the runtime's events; nil means slog.Default().
	Logger *slog.Logger
	// StateDir is the host directory for the runtime's state.
	StateDir string
	// LongLived says the caller holds the runtime for long and creates
	// many sandboxes with it (the daemon), so the runtime may pay a cost
	// now to make each create cheaper (linux: its spawner). A one-shot
	// caller (moat run) leaves it false. A runtime that holds resources
	// implements io.Closer; the caller closes it once every sandbox has
	// ended.
	LongLived bool
}

// Factory opens a runtime. It fails (wrapping sandbox.ErrUnsupported
// where that is the reason) when the host cannot enforce what the
// runtime promises.
type Factory func(opts Options) (sandbox.Runtime, error)

// Check is one probed host capability, for moat doctor.
type Check struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Detail   string `json:"detail"`
	Required bool   `json:"required"`
}

// Prober examines what the host offers a runtime. It creates nothing
// lasting and works where the runtime's Factory would fail (it says why).
type Prober func() []Check

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
	probers   = map[string]Prober{}
	helpers   = map[string]func(){}
)

// Register makes a runtime available by name. It is meant for init
// functions, and panics when f is nil, the name is empty or the name is
// registered already (as database/sql.Register does).
func Register(name string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" || f == nil {
		panic("runtime: Register needs a name and a factory")
	}
	if _, dup := factories[name]; dup {
		panic("runtime: Register called twice for runtime " + name)
	}
	factories[name] = f
}

// RegisterProbe sets the probe of runtime name (see Prober). It panics on
// a nil probe or a second probe for the same name.
func RegisterProbe(name string, p Prober) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" || p == nil {
		panic("runtime: RegisterProbe needs a name and a probe")
	}
	if _, dup := probers[name]; dup {
		panic("runtime: RegisterProbe called twice for runtime " + name)
	}
	probers[name] = p
}

// RegisterHelper sets the entry point of the helper processes runtime
// name starts by re-executing this binary (a sandbox's init…): h must
// return at once when this process is not one of them, and never return
// when it is. It panics on a nil h or a second one for the same name.
func RegisterHelper(name string, h func()) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" || h == nil {
		panic("runtime: RegisterHelper needs a name and a function")
	}
	if _, dup := helpers[name]; dup {
		panic("runtime: RegisterHelper called twice for runtime " + name)
	}
	helpers[name] = h
}

// RunHelpers runs this process as a registered runtime's helper when it
// was started as one, and then never returns; otherwise it returns at
// once. Programs call it first thing in main, test binaries in TestMain.
func RunHelpers() {
	mu.RLock()
	hs := make([]func(), 0, len(helpers))
	for _, name := range sortedKeys(helpers) {
		hs = append(hs, helpers[name])
	}
	mu.RUnlock()
	for _, h := range hs {
		h()
	}
}

// Names returns the registered runtimes' names, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	return sortedKeys(factories)
}

// Open opens the runtime registered as name with opts. An unknown name is
// an error that lists the registered ones.
func Open(name string, opts Options) (sandbox.Runtime, error) {
	mu.RLock()
	f, ok := factories[name]
	mu.RUnlock()
	if !ok {
		return nil, unknown(name)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return f(opts)
}

// Probe runs runtime name's probe; a runtime without one has no checks.
// An unknown name is the error Open gives.
func Probe(name string) ([]Check, error) {
	mu.RLock()
	_, ok := factories[name]
	p := probers[name]
	mu.RUnlock()
	if !ok {
		return nil, unknown(name)
	}
	if p == nil {
		return nil, nil
	}
	return p(), nil
}

// UnknownError is the error for a runtime name nothing registered.
type UnknownError struct {
	Name  string
	Known []string // the registered names, sorted
}

func (e *UnknownError) Error() string {
	known := "none"
	if len(e.Known) > 0 {
		known = strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("unknown runtime %q (known runtimes: %s)", e.Name, known)
}

// Known reports whether a runtime is registered as name.
func Known(name string) bool {
	mu.RLock()
	defer mu.RUnlock()
	_, ok := factories[name]
	return ok
}

func unknown(name string) error {
	return &UnknownError{Name: name, Known: Names()}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
