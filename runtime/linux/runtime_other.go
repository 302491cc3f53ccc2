//go:build !linux

package linux

import (
	"context"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"time"

	moatruntime "github.com/moat-sandbox/moat/runtime"
	"github.com/moat-sandbox/moat/sandbox"
)

// Off Linux the runtime exists so that programs build, and says plainly
// that it cannot run: every constructor fails with errPlatform.
var errPlatform = fmt.Errorf("%w: moat's linux runtime needs Linux (namespaces, Landlock, seccomp); this is %s", sandbox.ErrUnsupported, goruntime.GOOS)

// Defaults of the runtime (see runtime_linux.go).
const (
	DefaultDiskBytes = 1 << 30
	DefaultKillGrace = 2 * time.Second
	DefaultStateDir  = "/run/moat"
)

// Option configures a Runtime.
type Option func(*Runtime)

// WithInitPath is only meaningful on Linux.
func WithInitPath(p string) Option { return func(*Runtime) {} }

// WithStateDir is only meaningful on Linux.
func WithStateDir(d string) Option { return func(*Runtime) {} }

// WithKillGrace is only meaningful on Linux.
func WithKillGrace(d time.Duration) Option { return func(*Runtime) {} }

// WithDefaults is only meaningful on Linux.
func WithDefaults(l sandbox.Limits) Option { return func(*Runtime) {} }

// WithSpawner is only meaningful on Linux.
func WithSpawner() Option { return func(*Runtime) {} }

// WithLogger is only meaningful on Linux.
func WithLogger(l *slog.Logger) Option { return func(*Runtime) {} }

// Runtime is the Linux namespace runtime; off Linux none can be made.
type Runtime struct{}

var _ sandbox.Runtime = (*Runtime)(nil)

// New always fails off Linux, with an error wrapping
// sandbox.ErrUnsupported.
func New(opts ...Option) (*Runtime, error) { return nil, errPlatform }

// Close does nothing.
func (r *Runtime) Close() error { return nil }

// Reclaim has nothing to reclaim off Linux.
func (r *Runtime) Reclaim() (int, error) { return 0, errPlatform }

// Enforcement reports that nothing is enforced: no protection.
func (r *Runtime) Enforcement() sandbox.Enforcement {
	return sandbox.Enforcement{Runtime: Name, Protections: []sandbox.Protection{}}
}

// NewBudget always fails off Linux (sandbox.Budgeter).
func (r *Runtime) NewBudget(id string, l sandbox.Limits) (sandbox.Budget, error) {
	return nil, errPlatform
}

// Create always fails off Linux.
func (r *Runtime) Create(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	return nil, errPlatform
}

// Run always fails off Linux.
func (r *Runtime) Run(ctx context.Context, spec *sandbox.Spec, proc *sandbox.Process) (*sandbox.Result, error) {
	return nil, errPlatform
}

// RunHelper returns at once: off Linux this runtime starts no helpers.
func RunHelper() {}

// Probe reports the one thing that matters off Linux.
func Probe() []Check {
	return []Check{{Name: "os", OK: false, Required: true, Detail: errPlatform.Error()}}
}

// open is the runtime's registry Factory; off Linux it always fails.
func open(moatruntime.Options) (sandbox.Runtime, error) { return nil, errPlatform }
