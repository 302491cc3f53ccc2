package linux

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/runtime/linux/leaninit"
	"github.com/moat-sandbox/moat/sandbox"
)

// Defaults of the runtime.
const (
	// DefaultDiskBytes sizes the tmpfs behind /tmp, the home dir,
	// /dev/shm and an in-memory workspace when neither the spec nor the
	// runtime's defaults do.
	DefaultDiskBytes = 1 << 30
	// DefaultKillGrace is how long a process has between SIGTERM and
	// SIGKILL when its call times out or is cancelled.
	DefaultKillGrace = 2 * time.Second
	// DefaultStateDir holds moat's host-side runtime state (uid leases).
	DefaultStateDir = "/run/moat"

	// selfExe is this process's own executable, the default helper binary.
	selfExe = "/proc/self/exe"

	// defaultHostname is a sandbox's hostname when its spec names none.
	defaultHostname = "sandbox"
)

// Option configures a Runtime.
type Option func(*Runtime)

// WithInitPath sets the binary re-executed as each sandbox's init and the
// runtime's other helpers; it must call RunHelper first thing. Default:
// this process's own executable, and for the init the lean init embedded
// in moat (package leaninit) when moat was built with it.
func WithInitPath(p string) Option { return func(r *Runtime) { r.initPath = p } }

// WithStateDir sets the host directory for runtime state.
func WithStateDir(d string) Option { return func(r *Runtime) { r.stateDir = d } }

// WithKillGrace sets the SIGTERM→SIGKILL grace period.
func WithKillGrace(d time.Duration) Option { return func(r *Runtime) { r.killGrace = d } }

// WithDefaults sets the limits a spec gets for every field it leaves zero
// (an operator's config file). A zero here means no limit, except
// DiskBytes, which falls back to DefaultDiskBytes.
func WithDefaults(l sandbox.Limits) Option { return func(r *Runtime) { r.defaults = l } }

// WithSpawner makes the runtime start its sandboxes' inits (and its other
// helper processes) from a spawner: a small process it starts once, in New,
// instead of by forking itself. A long-lived process whose memory grows
// with the sandboxes it holds (the daemon) should use it: a fork into a new
// user namespace copies the parent's page tables, so without it every
// create gets slower as the process grows. A one-shot caller (moat run)
// should not: it would pay one more process start. Close stops the
// spawner.
func WithSpawner() Option { return func(r *Runtime) { r.useSpawner = true } }

// WithLogger sets the logger for runtime events.
func WithLogger(l *slog.Logger) Option { return func(r *Runtime) { r.log = l } }

// Runtime is the Linux namespace runtime. It is safe for concurrent use.
type Runtime struct {
	initPath string
	// initExe is the executable of every sandbox's init: the lean init
	// installed under stateDir, or initPath (see resolveInit).
	initExe   string
	stateDir  string
	killGrace time.Duration
	log       *slog.Logger
	landlock  int
	defaults  sandbox.Limits

	cgroupsOnce sync.Once
	cgroups     *cgroupLayout
	seccompOnce sync.Once
	seccompSum  string
	locale      localeState // the locale layer's failed inputs (localelayer_linux.go)
	sweeping    atomic.Bool
	sweeps      sync.WaitGroup

	slots  slotLeases // the uid slots this runtime holds (uidslot_linux.go)
	layers layerLocks // the layers its sandboxes use (layerlocks_linux.go)

	budgetsMu sync.Mutex
	budgets   map[string]*linuxBudget // live budgets by id (budget_linux.go)

	useSpawner bool
	framed     bool // WithFramedStreams (streams_linux.go)
	spawnMu    sync.Mutex
	spawner    *spawnerClient // nil until started, or without WithSpawner
}

// cgroupLayout returns the host's cgroup hierarchies, found once.
func (r *Runtime) cgroupLayout() *cgroupLayout {
	r.cgroupsOnce.Do(func() { r.cgroups = findCgroups() })
	return r.cgroups
}

// limitsFor fills the zero fields of l from the runtime's defaults.
func (r *Runtime) limitsFor(l sandbox.Limits) sandbox.Limits {
	l = l.Or(r.defaults)
	if l.DiskBytes <= 0 {
		l.DiskBytes = DefaultDiskBytes
	}
	return l
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New returns a Linux runtime after checking, cheaply, the protections
// every sandbox needs. It fails closed: a host that lacks one gets an error
// wrapping sandbox.ErrUnsupported.
func New(opts ...Option) (*Runtime, error) {
	r := &Runtime{initPath: selfExe, stateDir: DefaultStateDir, killGrace: DefaultKillGrace, log: slog.Default()}
	for _, o := range opts {
		o(r)
	}
	r.slots.stateDir = r.stateDir
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrUnsupported, errNotRoot)
	}
	r.landlock = landlockABI()
	if r.landlock < 1 {
		return nil, fmt.Errorf("%w: %w (moat enforces its filesystem policy twice: mounts and Landlock)", sandbox.ErrUnsupported, errNoLandlock)
	}
	r.resolveInit()
	if r.useSpawner {
		// Started now, while this process is small.
		if _, err := r.spawnerClient(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// resolveInit sets r.initExe: the lean init embedded in this binary,
// installed under the state directory (installLeanInit), unless
// WithInitPath chose another binary or this one was built without it;
// else initPath, which runs the same init code (Init) after its package
// inits. A lean init that cannot be installed is logged and skipped.
func (r *Runtime) resolveInit() {
	r.initExe = r.initPath
	bin, ok := leaninit.Embedded()
	if !ok || r.initPath != selfExe {
		return
	}
	p, err := installLeanInit(r.stateDir, bin)
	if err != nil {
		r.log.Warn("moat: starting sandboxes with the whole moat binary as their init", "err", err)
		return
	}
	r.initExe = p
}

// startFunc starts argv from the runtime's init binary with files as its
// descriptors 0, 1, … (see Runtime.startChild).
type startFunc func(argv []string, files []*os.File, sys *syscall.SysProcAttr) (*child, error)

// startChild starts argv from the runtime's init binary: through the
// spawner with WithSpawner (a new one if the last has died), else by
// forking this process.
func (r *Runtime) startChild(argv []string, files []*os.File, sys *syscall.SysProcAttr) (*child, error) {
	if !r.useSpawner {
		exe := r.initPath
		if len(argv) > 1 && argv[1] == InitArg {
			exe = r.initExe
		}
		return startChild(exe, argv, files, sys)
	}
	sc, err := r.spawnerClient()
	if err != nil {
		return nil, err
	}
	return sc.start(argv, files, sys)
}

func (r *Runtime) spawnerClient() (*spawnerClient, error) {
	r.spawnMu.Lock()
	defer r.spawnMu.Unlock()
	if r.spawner == nil || !r.spawner.alive() {
		sc, err := startSpawner(r.initPath, r.initExe)
		if err != nil {
			return nil, err
		}
		r.spawner = sc
	}
	return r.spawner, nil
}

// holdSlot gives the spawner a lease of its own on slot (see
// slotLeases.shareSlot), so that it reclaims the slot's cgroups (under
// budget, "" for none) should this process die.
func (r *Runtime) holdSlot(slot *uidSlot, budget string) error {
	sc, err := r.spawnerClient()
	if err != nil {
		return err
	}
	lease, err := r.slots.shareSlot(slot)
	if err != nil {
		return err
	}
	defer lease.Close() // the spawner has its own copy once sent
	if err := sc.hold(slot.slot, lease, budget, r.stateDir); err != nil {
		return err
	}
	slot.holder = sc
	return nil
}

// Close removes the runtime's budgets that no sandbox uses and stops its
// spawner, if it has one.
//
// Preconditions: every sandbox of the runtime has ended (their inits are
// the spawner's children and die with it).
func (r *Runtime) Close() error {
	r.closeBudgets()
	r.spawnMu.Lock()
	defer r.spawnMu.Unlock()
	if r.spawner != nil {
		r.spawner.close()
		r.spawner = nil
	}
	return nil
}

// sweepInBackground reclaims leftovers of crashed moats off the start path
// of the sandbox being created; at most one sweep runs at a time. A sweep
// cut short (a one-shot CLI exiting) is finished by a later one.
func (r *Runtime) sweepInBackground() {
	if !r.sweeping.CompareAndSwap(false, true) {
		return
	}
	r.sweeps.Add(1)
	go func() {
		defer r.sweeps.Done()
		defer r.sweeping.Store(false)
		if n, err := r.Reclaim(); err != nil || n > 0 {
			r.log.Debug("reclaimed leftover cgroups", "count", n, "err", err)
		}
	}()
}

// Reclaim removes what crashed moat processes left on this host: the
// cgroups of every uid slot no live moat holds (their processes, if any
// remain, are killed first), inside budgets too, the budgets no live moat
// owns once they are empty, and the layers no sandbox uses. Every create
// also does this; a daemon calls it at start. With WithSpawner there is
// normally nothing left to do: the spawner outlives a killed runtime
// briefly and reclaims its sandboxes itself (see spawner_linux.go); this
// catches what it could not (a runtime that died mid-create, a spawner
// killed with SIGKILL). Sandbox processes, mounts and network namespaces
// need no reclaiming: each sandbox's init dies with its parent
// (PDEATHSIG) and takes them with it.
func (r *Runtime) Reclaim() (int, error) {
	n, err := sweepCgroups(r.cgroupLayout(), r.stateDir)
	if m := collectLayers(r.stateDir); m > 0 {
		r.log.Debug("removed unused layers", "count", m)
	}
	return n, err
}

// Create builds a sandbox and waits until its init reports ready.
func (r *Runtime) Create(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.create(ctx, spec, false)
	if err != nil {
		return nil, err
	}
	if err := sb.waitReady(ctx); err != nil {
		_ = sb.Shutdown(context.Background())
		return nil, err
	}
	return sb, nil
}

// Run creates a one-shot sandbox, runs proc in it and tears it down. Setup
// and start are pipelined: the process request is queued before the init
// has finished building the root.
func (r *Runtime) Run(ctx context.Context, spec *sandbox.Spec, proc *sandbox.Process) (*sandbox.Result, error) {
	start := time.Now()
	sb, err := r.create(ctx, spec, true)
	if err != nil {
		return sandbox.SetupResult(err), err
	}
	res, err := sb.exec(ctx, proc, start)
	_ = sb.Shutdown(context.Background())
	// The sweep of leftovers ran beside the sandbox; a one-shot caller
	// that exits next must not cut it short.
	r.sweeps.Wait()
	return res, err
}
