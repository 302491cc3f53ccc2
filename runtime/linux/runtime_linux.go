package linux

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
	"github.com/moat-sandbox/moat/runtime/linux/seccomp"
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

	// defaultHostname is a sandbox's hostname when its spec names none.
	defaultHostname = "sandbox"
)

// Option configures a Runtime.
type Option func(*Runtime)

// WithInitPath sets the binary re-executed as each sandbox's init; it must
// call Init when IsInit. Default: this process's own executable.
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
	initPath  string
	stateDir  string
	killGrace time.Duration
	log       *slog.Logger
	landlock  int
	defaults  sandbox.Limits

	cgroupsOnce sync.Once
	cgroups     *cgroupLayout
	seccompOnce sync.Once
	seccompSum  string
	sweeping    atomic.Bool
	sweeps      sync.WaitGroup

	useSpawner bool
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
	r := &Runtime{initPath: "/proc/self/exe", stateDir: DefaultStateDir, killGrace: DefaultKillGrace, log: slog.Default()}
	for _, o := range opts {
		o(r)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrUnsupported, errNotRoot)
	}
	r.landlock = landlockABI()
	if r.landlock < 1 {
		return nil, fmt.Errorf("%w: %w (moat enforces its filesystem policy twice: mounts and Landlock)", sandbox.ErrUnsupported, errNoLandlock)
	}
	if r.useSpawner {
		// Started now, while this process is small.
		if _, err := r.spawnerClient(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// startFunc starts argv from the runtime's init binary with files as its
// descriptors 0, 1, … (see Runtime.startChild).
type startFunc func(argv []string, files []*os.File, sys *syscall.SysProcAttr) (*child, error)

// startChild starts argv from the runtime's init binary: through the
// spawner with WithSpawner (a new one if the last has died), else by
// forking this process.
func (r *Runtime) startChild(argv []string, files []*os.File, sys *syscall.SysProcAttr) (*child, error) {
	if !r.useSpawner {
		return startChild(r.initPath, argv, files, sys)
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
		sc, err := startSpawner(r.initPath)
		if err != nil {
			return nil, err
		}
		r.spawner = sc
	}
	return r.spawner, nil
}

// holdSlot gives the spawner a copy of slot's lease, so that it reclaims
// the slot's cgroups should this process die.
func (r *Runtime) holdSlot(slot *uidSlot) error {
	sc, err := r.spawnerClient()
	if err != nil {
		return err
	}
	if err := sc.hold(slot, r.stateDir); err != nil {
		return err
	}
	slot.holder = sc
	return nil
}

// Close stops the runtime's spawner, if it has one.
//
// Preconditions: every sandbox of the runtime has ended (their inits are
// the spawner's children and die with it).
func (r *Runtime) Close() error {
	r.spawnMu.Lock()
	defer r.spawnMu.Unlock()
	if r.spawner != nil {
		r.spawner.close()
		r.spawner = nil
	}
	return nil
}

// Enforcement reports the protections every sandbox of this runtime gets.
func (r *Runtime) Enforcement() sandbox.Enforcement {
	return sandbox.Enforcement{
		Runtime:      "linux",
		Namespaces:   []string{"user", "mount", "pid", "net", "ipc", "uts", "cgroup"},
		User:         sandbox.UID,
		Seccomp:      r.seccompSummary(),
		LandlockABI:  min(r.landlock, 7),
		NoNewPrivs:   true,
		Capabilities: "none (bounding, ambient, inheritable empty; non-root uid)",
		Network:      "none (loopback only)",
		PivotRoot:    true,
		MaskedProc:   true,
	}
}

// seccompSummary describes the default seccomp profile in one line,
// computed once per runtime.
func (r *Runtime) seccompSummary() string {
	r.seccompOnce.Do(func() {
		sum := seccomp.Default().Summary()
		if sum.Error != "" {
			r.seccompSum = "error: " + sum.Error
			return
		}
		r.seccompSum = fmt.Sprintf("filter: %d syscalls denied, %d filtered by argument, foreign ABIs killed, unknown syscalls %s",
			sum.DeniedCount, len(sum.ArgFiltered), sum.UnknownSyscalls)
	})
	return r.seccompSum
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
// remain, are killed first) and the layers no sandbox uses. Every create
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

// create validates spec, prepares the host mount trees and starts the
// sandbox's init. It does not wait for the init to be ready.
func (r *Runtime) create(ctx context.Context, spec *sandbox.Spec, oneShot bool) (_ *linuxSandbox, retErr error) {
	created := time.Now()
	if spec == nil {
		spec = &sandbox.Spec{}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The named checks of the spec's paths come before anything else.
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = defaultHostname
	}
	if err := sandbox.CheckHostname(hostname); err != nil {
		return nil, err
	}
	if err := validateRestrictions(spec.Restrict); err != nil {
		return nil, err
	}
	netMode, err := sandbox.ParseNetMode(string(spec.Network.Mode))
	if err != nil {
		return nil, err
	}
	if netMode == sandbox.NetProxy && spec.Network.Egress == nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrInvalidSpec, errNoEgress)
	}
	srcs, err := openSources(spec)
	if err != nil {
		return nil, err
	}
	defer closeSources(srcs)
	root := spec.Root
	if root == nil {
		root = &sandbox.RootFS{Host: true}
	}
	if _, err := mergeEnv(nil, spec.Env); err != nil {
		return nil, err
	}
	workdir := spec.Workdir
	if workdir == "" {
		workdir = sandbox.WorkspaceDir
	}
	if !filepath.IsAbs(workdir) {
		return nil, fmt.Errorf("%w: workdir %q is not absolute", sandbox.ErrInvalidSpec, workdir)
	}
	if !root.Host && len(root.Layers) == 0 {
		return nil, fmt.Errorf("%w: a root filesystem without the host's needs a template layer", sandbox.ErrInvalidSpec)
	}
	limits := r.limitsFor(spec.Limits)
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	layout := r.cgroupLayout()
	var cu cleanup
	defer func() {
		if retErr != nil {
			cu.run()
		}
	}()
	layerFiles, err := openLayers(root.Layers)
	if err != nil {
		return nil, &sandbox.SetupError{Stage: "root layers", Err: err}
	}
	cu.add(func() { closeFiles(layerFiles) })
	slot, err := leaseUIDSlot(r.stateDir)
	if err != nil {
		return nil, &sandbox.SetupError{Stage: "uid range", Err: err}
	}
	cu.add(slot.release)
	base := slot.hostBase()
	if r.useSpawner {
		// The spawner keeps the lease, and reclaims the slot's cgroups,
		// should this process die.
		if err := r.holdSlot(slot); err != nil {
			return nil, &sandbox.SetupError{Stage: "uid range", Err: err}
		}
	}

	ids := &idmapCache{start: r.startChild, hostUID: base + sandbox.UID, hostGID: base + sandbox.GID}
	defer ids.close()
	trees, err := mountTrees(srcs, ids)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, t := range trees {
			unix.Close(t.fd)
		}
	}()

	hostSock, agentSock, err := guest.SocketPair()
	if err != nil {
		return nil, &sandbox.SetupError{Stage: "control socket", Err: err}
	}
	growSocketBuffers(hostSock, agentSock)
	cu.add(func() { hostSock.Close() })
	defer agentSock.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, &sandbox.SetupError{Stage: "init stderr", Err: err}
	}
	cu.add(func() { errR.Close() })
	defer errW.Close()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, &sandbox.SetupError{Stage: "open /dev/null", Err: err}
	}
	defer devNull.Close()

	// While the kernel clones and execs the init, prepare on another
	// thread what does not depend on it: the cgroup, the seccomp program
	// and the /etc layer.
	preps := make(chan *prepared, 1)
	pr := prepRequest{layout: layout, slot: slot.slot, base: base, limits: limits, hostname: hostname,
		netMode: netMode, longLived: !oneShot, root: root}
	if !root.Host {
		pr.templateFD = int(layerFiles[len(layerFiles)-1].Fd())
	}
	go func() { preps <- r.prepare(pr) }()
	var (
		prep *prepared
		proc *child
	)
	defer func() {
		if prep == nil {
			prep = <-preps
		}
		closeFDs(prep.cgFDs)
		if prep.templateUserns >= 0 {
			unix.Close(prep.templateUserns)
		}
		if retErr != nil {
			prep.cg.destroy()
			if prep.scratch != nil {
				prep.scratch.Close()
			}
			// Not before the init (killed by cu) is gone.
			if p := proc; p != nil {
				go func() { <-p.exited; prep.releaseLayers() }()
			} else {
				prep.releaseLayers()
			}
		}
	}()

	idMap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: uidsPer}}
	cloneNS := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if netMode == sandbox.NetOpen {
		cloneNS &^= unix.CLONE_NEWNET
	}
	proc, err = r.startChild([]string{"moat", InitArg}, []*os.File{devNull, devNull, errW, agentSock},
		&syscall.SysProcAttr{
			// The cgroup namespace is made by the init itself once the
			// host has moved it into its cgroup (v1 has no clone into a
			// cgroup), so that its root is the sandbox's cgroup.
			Cloneflags:                 cloneNS,
			UidMappings:                idMap,
			GidMappings:                idMap,
			GidMappingsEnableSetgroups: true,
			// Become uid 0 of the new namespace (host uid base): the host
			// root's own uid is not mapped there.
			Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
			Pdeathsig:  syscall.SIGKILL,
		})
	if err != nil {
		return nil, &sandbox.SetupError{Stage: "start init", Err: err}
	}
	cu.add(proc.killAndWait)

	// The proxy's listener exists in the sandbox's namespace before the
	// init is told to set up, so before any process of it can run.
	var (
		egress sandbox.Egress
		ln     net.Listener
	)
	if netMode == sandbox.NetProxy {
		if ln, err = listenInNetns(proc.pid, sandbox.ProxyPort); err != nil {
			return nil, &sandbox.SetupError{Stage: "egress proxy", Err: err}
		}
		egress = spec.Network.Egress
		cu.add(func() { ln.Close(); _ = egress.Close() })
	}

	prep = <-preps
	if prep.err != nil {
		return nil, prep.err
	}
	layerFDs, err := r.rootLayers(proc.pid, layerFiles, prep.baseLayer, root.Host, prep.templateUserns)
	if err != nil {
		return nil, &sandbox.SetupError{Stage: "root layers", Err: err}
	}
	defer closeFDs(layerFDs)
	cg := prep.cg
	// On cgroup v2 the host moves the whole init; on v1 the init's forking
	// thread joins by itself through prep.cgFDs (see taskFDs).
	if err := cg.addProcess(proc.pid); err != nil {
		return nil, &sandbox.SetupError{Stage: "cgroup", Err: err}
	}
	sb := newSandbox(r, proc, guest.NewConn(hostSock), errR, slot, cg, oneShot)
	sb.created = created
	sb.netMode, sb.egress = netMode, egress
	sb.scratch, sb.layers, sb.limits, sb.root = prep.scratch, layerFiles, limits, root
	sb.leases = prep.leases
	sb.env, sb.workdir = spec.Env, workdir
	if egress != nil {
		go func() {
			if err := egress.Serve(sb.id, ln); err != nil {
				r.log.Warn("egress proxy stopped", "sandbox", sb.id, "err", err)
			}
		}()
	}
	r.log.Debug("init started", "sandbox", sb.id, "after", time.Since(created).String())
	setup := &guest.Setup{
		Hostname:        hostname,
		EtcLayer:        prep.etcLayer,
		HostSystem:      root.Host,
		Layers:          len(layerFDs),
		Seccomp:         prep.seccomp,
		DiskBytes:       limits.DiskBytes,
		UID:             sandbox.UID,
		GID:             sandbox.GID,
		MemoryWorkspace: spec.Workspace == "",
		LandlockABI:     r.landlock,
		OneShot:         oneShot,
		Restrict:        guestRestrictions(spec.Restrict),
		SharedNet:       netMode == sandbox.NetOpen,
		WritableRoot:    !root.Host,
	}
	fds := make([]int, len(trees))
	for i, t := range trees {
		setup.Mounts = append(setup.Mounts, t.mount)
		fds[i] = t.fd
	}
	fds = append(fds, layerFDs...)
	fds = append(fds, int(prep.scratch.Fd()))
	setup.CgroupJoinFDs = len(prep.cgFDs)
	setup.CallCgroups = !oneShot && cg.callCgroupsOK()
	fds = append(fds, prep.cgFDs...)
	if err := sb.conn.Send(&guest.Message{Type: guest.MsgSetup, Setup: setup}, fds...); err != nil {
		return nil, &sandbox.SetupError{Stage: "send setup", Err: err}
	}
	sb.enforcement = r.Enforcement()
	sb.enforcement.Limits = limits
	sb.enforcement.Network = networkDescription(netMode)
	if netMode == sandbox.NetOpen {
		sb.enforcement.Namespaces = []string{"user", "mount", "pid", "ipc", "uts", "cgroup"}
	}
	if cg != nil {
		sb.enforcement.Cgroup = layout.describe()
	}
	sb.enforcement.UIDRange = fmt.Sprintf("0:%d:%d", base, uidsPer)
	switch {
	case oneShot:
		sb.enforcement.CallTree = "sandbox (a one-shot sandbox ends with its call)"
	case setup.CallCgroups:
		sb.enforcement.CallTree = "cgroup per call (v1 pids): a timeout or cancel kills the call's whole tree"
	default:
		sb.enforcement.CallTree = "process group: a timeout or cancel kills the call's process group; descendants that left it live until the sandbox ends"
	}
	sb.enforcement.RootFS = rootDescription(root, limits.DiskBytes)
	sb.enforcement.WorkspaceIDMap = "idmapped"
	if spec.Workspace == "" {
		sb.enforcement.WorkspaceIDMap = "owned (in-memory workspace)"
	}
	sb.start()
	r.sweepInBackground()
	return sb, nil
}

// prepared is what create readies while the init is being started.
type prepared struct {
	cg        *sandboxCgroup
	cgFDs     []int
	seccomp   []byte
	etcLayer  string
	baseLayer string
	leases    []*layerLease // on etcLayer and baseLayer, held while the sandbox lives
	scratch   *os.File
	// templateUserns idmaps the template's layer when its user is not the
	// sandbox user (see templateUser); -1 otherwise.
	templateUserns int
	err            error
}

// releaseLayers drops the leases on the layers (see layerLease).
func (p *prepared) releaseLayers() {
	for _, l := range p.leases {
		l.release()
	}
	p.leases = nil
}

// prepRequest is what prepare needs to know.
type prepRequest struct {
	layout     *cgroupLayout
	slot       int
	base       uint32 // host id of the sandbox's uid 0
	limits     sandbox.Limits
	hostname   string
	netMode    sandbox.NetMode
	longLived  bool
	root       *sandbox.RootFS
	templateFD int // the template root's directory (root.Host false)
}

// prepare creates the sandbox's cgroup (and, on v1, opens the files the
// init joins it through), assembles the seccomp program, finds or builds
// the /etc and base layers and creates the scratch tmpfs. On error it
// undoes what it did.
func (r *Runtime) prepare(q prepRequest) *prepared {
	p := &prepared{templateUserns: -1}
	var err error
	if p.cg, err = newCgroup(q.layout, q.slot, q.limits, q.longLived); err != nil {
		p.err = &sandbox.SetupError{Stage: "cgroup", Err: err}
		return p
	}
	fail := func(stage string, err error) *prepared {
		closeFDs(p.cgFDs)
		p.cg.destroy()
		p.releaseLayers()
		if p.scratch != nil {
			p.scratch.Close()
		}
		if p.templateUserns >= 0 {
			unix.Close(p.templateUserns)
		}
		return &prepared{templateUserns: -1, err: &sandbox.SetupError{Stage: stage, Err: err}}
	}
	if p.cgFDs, err = p.cg.taskFDs(); err != nil {
		return fail("cgroup", err)
	}
	prog, err := seccomp.Default().Assemble()
	if err != nil {
		return fail("seccomp", err)
	}
	p.seccomp = encodeBPF(prog)
	hostDNS := q.netMode == sandbox.NetOpen
	// Each layer is leased for the sandbox's life. The /etc layer and a
	// template's base layer exist per hostname: when the sandbox ends, the
	// one of a hostname of its own is removed unless another sandbox uses
	// it. The few layers every sandbox shares (the default hostname's, the
	// host template's base) are kept for the next sandbox; Reclaim
	// removes those too when unused.
	perHost := q.hostname != defaultHostname
	if q.root.Host {
		l, err := leaseLayer(perHost, func() (string, error) {
			return etcLayer(r.stateDir, q.hostname, sandbox.UID, sandbox.GID, hostDNS)
		})
		if err != nil {
			return fail("etc layer", err)
		}
		p.etcLayer, p.leases = l.path, append(p.leases, l)
	}
	var tu *templateUser
	if !q.root.Host {
		// The template's user owns, as the sandbox user, what it owns
		// in the template's layer.
		if tu, err = resolveTemplateUser(q.templateFD, q.root.User); err != nil {
			return fail("template user", err)
		}
		if tu.swaps() {
			if p.templateUserns, err = swapUserns(r.startChild, q.base, tu); err != nil {
				return fail("template user", err)
			}
		}
	}
	l, err := leaseLayer(perHost && !q.root.Host, func() (string, error) {
		if q.root.Host {
			return hostBaseLayer(r.stateDir)
		}
		return templateBaseLayer(r.stateDir, q.templateFD, q.hostname, hostDNS, tu)
	})
	if err != nil {
		return fail("base layer", err)
	}
	p.baseLayer, p.leases = l.path, append(p.leases, l)
	if p.scratch, err = newScratch(q.limits.DiskBytes, q.base); err != nil {
		return fail("scratch tmpfs", err)
	}
	return p
}

// rootLayers returns the root overlay's lower layers, top first, as
// detached idmapped mounts for the init with pid: the spec's layers with
// the base layer at the bottom (host template) or just above the
// template's root. The template's root is idmapped through templateUserns
// when it is not -1, every other layer through the sandbox's namespace.
func (r *Runtime) rootLayers(pid int, layers []*os.File, baseLayer string, host bool, templateUserns int) (_ []int, retErr error) {
	userns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox user namespace: %w", err)
	}
	defer unix.Close(userns)
	baseFD, err := unix.Open(baseLayer, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	defer unix.Close(baseFD)
	type src struct {
		fd   int
		name string
	}
	var order []src
	for _, f := range layers {
		order = append(order, src{int(f.Fd()), f.Name()})
	}
	base := src{baseFD, baseLayer}
	if host {
		order = append(order, base)
	} else {
		n := len(order)
		order = append(order[:n-1:n-1], base, order[n-1])
	}
	var fds []int
	defer func() {
		if retErr != nil {
			closeFDs(fds)
		}
	}()
	for i, l := range order {
		ns := userns
		if !host && i == len(order)-1 && templateUserns >= 0 {
			ns = templateUserns
		}
		fd, err := idmapLayer(l.fd, ns, l.name)
		if err != nil {
			return nil, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// rootDescription names the root filesystem for the enforcement report.
func rootDescription(root *sandbox.RootFS, upperBytes int64) string {
	name := root.Template
	if name == "" {
		name = "host"
	}
	snapshots := len(root.Layers)
	if !root.Host {
		snapshots-- // the bottom layer is the template's root
	}
	d := fmt.Sprintf("overlay: template %s, %d snapshot layer(s), idmapped read-only lower layers, private upper layer (tmpfs, %d bytes)",
		name, snapshots, upperBytes)
	if !root.Host {
		user := root.User
		if user == "" {
			user = "root"
		}
		d += fmt.Sprintf("; writable root (the template's user %q owns as uid %d; not /dev, /proc, read-only binds)", user, sandbox.UID)
	}
	return d
}

// defaultEnv is the environment every process starts from; the host's
// environment never reaches a sandbox.
func defaultEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + sandbox.HomeDir,
		"TMPDIR=/tmp",
		"USER=sandbox",
		"LOGNAME=sandbox",
		"SHELL=/bin/sh",
		"NO_COLOR=1",
		"TERM=dumb",
		"LANG=C.UTF-8",
		"PAGER=cat",
		"GIT_PAGER=cat",
	}
}

// mergeEnv applies KEY=VALUE overrides on top of base; a later key wins.
func mergeEnv(base, over []string) ([]string, error) {
	out := append([]string(nil), base...)
	idx := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = i
	}
	if err := sandbox.CheckEnv(over); err != nil {
		return nil, err
	}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out, nil
}

// cleanup runs rollback steps in reverse order (gVisor's pkg/cleanup idea):
// a half-built sandbox is undone in one place.
type cleanup struct{ fns []func() }

func (c *cleanup) add(f func()) { c.fns = append(c.fns, f) }

func (c *cleanup) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}
