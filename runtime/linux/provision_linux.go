package linux

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/runtime/linux/seccomp"
	"github.com/moat-sandbox/moat/sandbox"
)

// provisioned is what provision made while the init was being started.
// Partly filled when err is set: rollback undoes whatever it holds.
type provisioned struct {
	cg        *sandboxCgroup
	cgFDs     []int // cgroup v1 "tasks" files the init joins through
	seccomp   []byte
	etcLayer  string
	baseLayer string
	// localeLayer is the locale archive stacked over the host's
	// /usr/lib/locale (host template; "" for none, see leaseLocaleLayer).
	localeLayer string
	leases      []*layerLease // on etcLayer, baseLayer and localeLayer, held while the sandbox lives
	scratch     *os.File
	// templateUserns idmaps the template's layer when its user is not the
	// sandbox user (see templateUser); -1 otherwise.
	templateUserns int
	err            error
}

// closeTransient closes what only the init's setup needs: the cgroup join
// files and the template's user namespace. Safe to call more than once.
func (p *provisioned) closeTransient() {
	closeFDs(p.cgFDs)
	p.cgFDs = nil
	if p.templateUserns >= 0 {
		unix.Close(p.templateUserns)
		p.templateUserns = -1
	}
}

// rollback undoes everything p holds: a sandbox that failed to be made.
//
// Preconditions: no init of the sandbox runs any more (its overlay may
// hold the layers).
func (p *provisioned) rollback() {
	p.closeTransient()
	p.cg.destroy()
	if p.scratch != nil {
		p.scratch.Close()
		p.scratch = nil
	}
	p.releaseLayers()
}

// releaseLayers drops the leases on the layers (see layerLease).
func (p *provisioned) releaseLayers() {
	releaseLayers(p.leases)
	p.leases = nil
}

// provisionRequest is what provision needs to know.
type provisionRequest struct {
	layout     *cgroupLayout
	slot       int
	base       uint32 // host id of the sandbox's uid 0
	limits     sandbox.Limits
	hostname   string
	netMode    sandbox.NetMode
	longLived  bool
	budget     *linuxBudget // the budget the sandbox's cgroup goes in; nil for none
	root       *sandbox.RootFS
	templateFD int // the template root's directory (root.Host false)
}

// provision creates the sandbox's cgroup (and, on v1, opens the files the
// init joins it through), assembles the seccomp program, finds or builds
// the /etc, locale and base layers and creates the scratch tmpfs: the parts of a
// sandbox that do not depend on its init, made while the init starts. On
// error the result holds what was made so far, for rollback.
func (r *Runtime) provision(q provisionRequest) *provisioned {
	p := &provisioned{templateUserns: -1}
	fail := func(stage string, err error) *provisioned {
		p.err = &sandbox.SetupError{Stage: stage, Err: err}
		return p
	}
	var err error
	if p.cg, err = newCgroup(q.layout, q.slot, q.limits, q.longLived, q.budget); err != nil {
		return fail("cgroup", err)
	}
	if p.cgFDs, err = p.cg.taskFDs(); err != nil {
		return fail("cgroup", err)
	}
	prog, err := seccomp.Default().Assemble()
	if err != nil {
		return fail("seccomp", err)
	}
	p.seccomp = seccomp.Encode(prog)
	hostDNS := q.netMode == sandbox.NetOpen
	// Each layer is leased for the sandbox's life. The /etc layer and a
	// template's base layer exist per hostname: when the sandbox ends, the
	// one of a hostname of its own is removed unless another sandbox uses
	// it. The few layers every sandbox shares (the default hostname's, the
	// host template's base) are kept for the next sandbox; Reclaim
	// removes those too when unused.
	perHost := q.hostname != defaultHostname
	if q.root.Host {
		l, err := r.layers.lease(perHost, func() (string, error) {
			return etcLayer(r.stateDir, q.hostname, sandbox.UID, sandbox.GID, hostDNS)
		})
		if err != nil {
			return fail("etc layer", err)
		}
		p.etcLayer, p.leases = l.path, append(p.leases, l)
		if l := r.leaseLocaleLayer(); l != nil {
			p.localeLayer, p.leases = l.path, append(p.leases, l)
		}
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
	l, err := r.layers.lease(perHost && !q.root.Host, func() (string, error) {
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
func (r *Runtime) rootLayers(pid int, layers []*layerLease, baseLayer string, host bool, templateUserns int) (_ []int, retErr error) {
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
	for _, l := range layers {
		order = append(order, src{int(l.file().Fd()), l.path})
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
