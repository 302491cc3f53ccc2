package linux

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
	"github.com/moat-sandbox/moat/sandbox"
)

// build is one sandbox being created: what each phase of create makes
// for the next ones, and the two stacks that undo it.
type build struct {
	r       *Runtime
	spec    *sandbox.Spec
	oneShot bool
	created time.Time

	// Set by validate.
	hostname string
	netMode  sandbox.NetMode
	root     *sandbox.RootFS
	workdir  string
	limits   sandbox.Limits
	budget   *linuxBudget // Spec.Budget's, referenced (acquireBudget); nil for none

	// Set by prepare.
	layers     []*layerLease // the spec's root layers, locked shared; the sandbox keeps them
	slot       *uidSlot
	trees      []hostTree
	hostSock   *os.File // the host's end of the control socket; the sandbox keeps it
	agentSock  *os.File // the init's end
	errR, errW *os.File // the init's stderr
	devNull    *os.File
	provs      chan *provisioned // provision's outcome, collected by provisioned
	prov       *provisioned

	// Set by startInit.
	proc        *child
	egress      sandbox.Egress // network mode proxy
	ln          net.Listener   // the egress proxy's listener in the init's network namespace
	layerFDs    []int          // the root's layers, idmapped through the init's user namespace
	callCgroups bool           // the sandbox's calls get cgroups of their own

	// undo holds what undoes the sandbox's parts: it runs if create fails
	// and is released once the sandbox owns them. temps holds what only
	// create uses (the trees' descriptors, the init's ends of the socket
	// and pipe…): it runs however create ends, after undo.
	undo, temps cleanup
}

// create builds a sandbox in named phases and starts its init; it does
// not wait for the init to be ready. Each phase adds to b.undo what
// undoes it, so a half-built sandbox is rolled back in one place, the
// last part made first: the init is killed and reaped before its cgroup
// is removed, its layers released and its uid slot freed.
func (r *Runtime) create(ctx context.Context, spec *sandbox.Spec, oneShot bool) (*linuxSandbox, error) {
	b, err := r.validate(ctx, spec, oneShot)
	if err != nil {
		return nil, err
	}
	defer b.temps.Clean()
	defer b.undo.Clean()
	if err := b.prepare(); err != nil {
		return nil, err
	}
	if err := b.startInit(); err != nil {
		return nil, err
	}
	sb := b.newSandbox()
	if err := b.sendSetup(sb.conn); err != nil {
		return nil, err
	}
	sb.enforcement = b.reportEnforcement()
	b.undo.Release()
	b.serveEgress(sb.id)
	sb.start()
	r.sweepInBackground()
	return sb, nil
}

// validate checks spec against what the runtime accepts (sandbox's named
// checks of paths, hostname, environment and limits; restrictions, network
// mode, workdir, root) and resolves its defaults, before anything is made.
// It returns the build the other phases fill.
//
// Preconditions: none (a nil spec is the defaults).
func (r *Runtime) validate(ctx context.Context, spec *sandbox.Spec, oneShot bool) (*build, error) {
	b := &build{r: r, spec: spec, oneShot: oneShot, created: time.Now()}
	if b.spec == nil {
		b.spec = &sandbox.Spec{}
	}
	spec = b.spec
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The named checks of the spec's paths come before anything else.
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	b.hostname = spec.Hostname
	if b.hostname == "" {
		b.hostname = defaultHostname
	}
	if err := sandbox.CheckHostname(b.hostname); err != nil {
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
	b.netMode = netMode
	b.root = spec.Root
	if b.root == nil {
		b.root = &sandbox.RootFS{Host: true}
	}
	if _, err := mergeEnv(nil, spec.Env); err != nil {
		return nil, err
	}
	b.workdir = spec.Workdir
	if b.workdir == "" {
		b.workdir = sandbox.WorkspaceDir
	}
	if !filepath.IsAbs(b.workdir) {
		return nil, fmt.Errorf("%w: workdir %q is not absolute", sandbox.ErrInvalidSpec, b.workdir)
	}
	if !b.root.Host && len(b.root.Layers) == 0 {
		return nil, fmt.Errorf("%w: a root filesystem without the host's needs a template layer", sandbox.ErrInvalidSpec)
	}
	b.limits = r.limitsFor(spec.Limits)
	if err := b.limits.Validate(); err != nil {
		return nil, err
	}
	// Last: nothing here may fail after the reference is taken, which
	// undo gives back if a later phase does.
	if spec.Budget != "" {
		if b.budget, err = r.acquireBudget(spec.Budget); err != nil {
			return nil, err
		}
		b.undo.Add(b.budget.release)
	}
	return b, nil
}

// prepare makes what the host holds before the init exists: it opens the
// spec's host paths (O_PATH, no symlinks, checked) and the root's layers
// (locked shared), leases a uid slot, turns the host paths into detached
// idmapped mount trees, and makes the control socket pair, the init's
// stderr pipe and its /dev/null. It starts provisioning the cgroup, the
// seccomp program, the /etc and base layers and the scratch tmpfs on
// another goroutine (provision), which startInit collects.
//
// Preconditions: b was validated; nothing of the sandbox exists yet.
func (b *build) prepare() error {
	srcs, err := openSources(b.spec)
	if err != nil {
		return err
	}
	b.temps.Add(func() { closeSources(srcs) })
	if b.layers, err = b.r.layers.open(b.root.Layers); err != nil {
		return &sandbox.SetupError{Stage: "root layers", Err: err}
	}
	b.undo.Add(func() { releaseLayers(b.layers) })
	if b.slot, err = b.r.slots.lease(); err != nil {
		return &sandbox.SetupError{Stage: "uid range", Err: err}
	}
	b.undo.Add(b.slot.release)
	base := b.slot.hostBase()
	if b.r.useSpawner {
		// The spawner keeps the lease, and reclaims the slot's cgroups,
		// should this process die.
		budget := ""
		if b.budget != nil {
			budget = b.budget.id
		}
		if err := b.r.holdSlot(b.slot, budget); err != nil {
			return &sandbox.SetupError{Stage: "uid range", Err: err}
		}
	}
	ids := &idmapCache{start: b.r.startChild, hostUID: base + sandbox.UID, hostGID: base + sandbox.GID}
	b.trees, err = mountTrees(srcs, ids)
	ids.close()
	if err != nil {
		return err
	}
	b.temps.Add(func() {
		for _, t := range b.trees {
			unix.Close(t.fd)
		}
	})
	if b.hostSock, b.agentSock, err = guest.SocketPair(); err != nil {
		return &sandbox.SetupError{Stage: "control socket", Err: err}
	}
	growSocketBuffers(b.hostSock, b.agentSock)
	b.undo.Add(func() { b.hostSock.Close() })
	b.temps.Add(func() { b.agentSock.Close() })
	if b.errR, b.errW, err = os.Pipe(); err != nil {
		return &sandbox.SetupError{Stage: "init stderr", Err: err}
	}
	b.undo.Add(func() { b.errR.Close() })
	b.temps.Add(func() { b.errW.Close() })
	if b.devNull, err = os.Open(os.DevNull); err != nil {
		return &sandbox.SetupError{Stage: "open /dev/null", Err: err}
	}
	b.temps.Add(func() { b.devNull.Close() })

	// While the kernel clones and execs the init, provision on another
	// thread what does not depend on it.
	q := provisionRequest{layout: b.r.cgroupLayout(), slot: b.slot.slot, base: base, limits: b.limits,
		hostname: b.hostname, netMode: b.netMode, longLived: !b.oneShot, root: b.root, budget: b.budget}
	if !b.root.Host {
		q.templateFD = int(b.layers[len(b.layers)-1].file().Fd())
	}
	b.provs = make(chan *provisioned, 1)
	go func() { b.provs <- b.r.provision(q) }()
	// Registered before the init starts, so that on failure the init is
	// gone before its cgroup and layers are.
	b.undo.Add(func() { b.provisioned().rollback() })
	b.temps.Add(func() { b.provisioned().closeTransient() })
	return nil
}

// provisioned waits for the provisioning prepare started and returns it.
func (b *build) provisioned() *provisioned {
	if b.prov == nil {
		b.prov = <-b.provs
	}
	return b.prov
}

// startInit starts the sandbox's init (moat __moat_init, the control
// socket on its fd 3) in new user, mount, pid, ipc, uts and, unless the
// network mode is open, net namespaces; makes the egress proxy's listener
// in its network namespace (mode proxy), before any sandbox process can
// exist; collects the provisioning; idmaps the root's layers through the
// init's user namespace; and, on cgroup v2, moves the init into the
// sandbox's cgroup (on v1 the init joins by itself, see taskFDs).
//
// Preconditions: prepare succeeded.
func (b *build) startInit() error {
	base := b.slot.hostBase()
	idMap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: uidsPer}}
	cloneNS := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if b.netMode == sandbox.NetOpen {
		cloneNS &^= unix.CLONE_NEWNET
	}
	proc, err := b.r.startChild([]string{"moat", InitArg}, []*os.File{b.devNull, b.devNull, b.errW, b.agentSock},
		&syscall.SysProcAttr{
			// The cgroup namespace is made by the init itself once it is
			// in its cgroup (v1 has no clone into a cgroup), so that its
			// root is the sandbox's cgroup.
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
		return &sandbox.SetupError{Stage: "start init", Err: err}
	}
	b.proc = proc
	b.undo.Add(proc.killAndWait)
	if b.netMode == sandbox.NetProxy {
		ln, err := listenInNetns(proc.pid, sandbox.ProxyPort)
		if err != nil {
			return &sandbox.SetupError{Stage: "egress proxy", Err: err}
		}
		egress := b.spec.Network.Egress
		b.ln, b.egress = ln, egress
		b.undo.Add(func() { ln.Close(); _ = egress.Close() })
	}
	prov := b.provisioned()
	if prov.err != nil {
		return prov.err
	}
	layerFDs, err := b.r.rootLayers(proc.pid, b.layers, prov.baseLayer, b.root.Host, prov.templateUserns)
	if err != nil {
		return &sandbox.SetupError{Stage: "root layers", Err: err}
	}
	b.layerFDs = layerFDs
	b.temps.Add(func() { closeFDs(layerFDs) })
	if err := prov.cg.addProcess(proc.pid); err != nil {
		return &sandbox.SetupError{Stage: "cgroup", Err: err}
	}
	b.callCgroups = !b.oneShot && prov.cg.callCgroupsOK()
	return nil
}

// newSandbox makes the host's handle on the sandbox, which takes over
// the init, the control socket, the uid slot, the cgroup, the scratch
// tmpfs and the layers when create succeeds.
//
// Preconditions: startInit succeeded.
func (b *build) newSandbox() *linuxSandbox {
	prov := b.prov
	sb := newSandbox(b.r, b.proc, guest.NewConn(b.hostSock), b.errR, b.slot, prov.cg, b.oneShot)
	sb.created = b.created
	sb.netMode, sb.egress = b.netMode, b.egress
	sb.scratch, sb.limits, sb.root = prov.scratch, b.limits, b.root
	sb.leases = append(slices.Clip(b.layers), prov.leases...)
	sb.budget = b.budget
	sb.env, sb.workdir = b.spec.Env, b.workdir
	b.r.log.Debug("init started", "sandbox", sb.id, "after", time.Since(b.created).String())
	return sb
}

// sendSetup sends the init its setup on conn: how to build the root and
// harden itself, with the descriptors it builds from (guest.SetupFDs:
// the host trees, the root's layers, the scratch tmpfs, the cgroup v1
// files it joins through).
//
// Preconditions: startInit succeeded; nothing was sent on conn yet.
func (b *build) sendSetup(conn *guest.Conn) error {
	prov := b.prov
	// An imported template's root, or layers over the host's system
	// directories (a build's source, a host sandbox's snapshot): their
	// own directories are the sandbox's to write, into the upper layer
	// (the host's system directories stay read-only mounts).
	writableRoot := !b.root.Host || len(b.root.Layers) > 0
	setup := &guest.Setup{
		Hostname:        b.hostname,
		EtcLayer:        prov.etcLayer,
		LocaleLayer:     prov.localeLayer,
		HostSystem:      b.root.Host,
		Seccomp:         prov.seccomp,
		DiskBytes:       b.limits.DiskBytes,
		UID:             sandbox.UID,
		GID:             sandbox.GID,
		MemoryWorkspace: b.spec.Workspace == "",
		LandlockABI:     b.r.landlock,
		OneShot:         b.oneShot,
		Restrict:        guestRestrictions(b.spec.Restrict),
		SharedNet:       b.netMode == sandbox.NetOpen,
		WritableRoot:    writableRoot,
		CallCgroups:     b.callCgroups,
	}
	out := guest.SetupFDs{Layers: b.layerFDs, Scratch: int(prov.scratch.Fd()), CgroupJoin: prov.cgFDs}
	for _, t := range b.trees {
		setup.Mounts = append(setup.Mounts, t.mount)
		out.Trees = append(out.Trees, t.fd)
	}
	fds, err := setup.PackFDs(out)
	if err != nil {
		return &sandbox.SetupError{Stage: "send setup", Err: err}
	}
	if err := conn.Send(&guest.Message{Type: guest.MsgSetup, Setup: setup}, fds...); err != nil {
		return &sandbox.SetupError{Stage: "send setup", Err: err}
	}
	return nil
}

// reportEnforcement is the sandbox's enforcement report: its limits, its
// network, its root, what a call's timeout kills and the protections it
// has (see Runtime.protections). The restrictions' outcome is added when
// the init reports ready (linuxSandbox.Enforcement).
//
// Preconditions: sendSetup succeeded.
func (b *build) reportEnforcement() sandbox.Enforcement {
	f := sandboxFacts{
		netMode:   b.netMode,
		uidMap:    fmt.Sprintf("0:%d:%d", b.slot.hostBase(), uidsPer),
		hostname:  b.hostname,
		workspace: "idmapped",
	}
	if b.prov.cg != nil {
		f.cgroup = b.r.cgroupLayout().describe()
	}
	if b.budget != nil {
		f.budget = b.budget.describe()
	}
	if b.spec.Workspace == "" {
		f.workspace = "owned (in-memory workspace)"
	}
	e := sandbox.Enforcement{
		Runtime:     Name,
		Limits:      b.limits,
		User:        sandbox.UID,
		Network:     networkDescription(b.netMode),
		RootFS:      rootDescription(b.root, b.limits.DiskBytes),
		Protections: b.r.protections(f),
	}
	switch {
	case b.oneShot:
		e.CallTree = "sandbox (a one-shot sandbox ends with its call)"
	case b.callCgroups:
		e.CallTree = "cgroup per call (v1 pids): a timeout or cancel kills the call's whole tree"
	default:
		e.CallTree = "process group: a timeout or cancel kills the call's process group; descendants that left it live until the sandbox ends"
	}
	return e
}

// serveEgress starts the egress proxy on its listener (network mode
// proxy); the sandbox closes it at Shutdown.
func (b *build) serveEgress(id string) {
	if b.egress == nil {
		return
	}
	egress, ln, log := b.egress, b.ln, b.r.log
	go func() {
		if err := egress.Serve(id, ln); err != nil {
			log.Warn("egress proxy stopped", "sandbox", id, "err", err)
		}
	}()
}
