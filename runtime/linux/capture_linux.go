package linux

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/sandbox"
)

// The optional abilities of this runtime and its sandboxes (see
// sandbox/optional.go).
var (
	_ sandbox.DiffExporter        = (*linuxSandbox)(nil)
	_ sandbox.Claimable           = (*linuxSandbox)(nil)
	_ sandbox.EnforcementReporter = (*linuxSandbox)(nil)
	_ sandbox.Reclaimer           = (*Runtime)(nil)
)

// ExportDiff pauses the sandbox with the cgroup freezer, copies what
// changed in the upper layer of its root since the export opts.Since into
// dst (see diff_linux.go), resumes it and completes the diff with its
// whiteouts and opaque markers. File operations of the host (which the
// init runs outside the freezer) are held off while the upper layer is
// read.
//
// Preconditions: the sandbox is long-lived (a one-shot sandbox has nothing
// to export once its call is over).
func (s *linuxSandbox) ExportDiff(ctx context.Context, dst string, opts sandbox.DiffOptions) (*sandbox.DiffStats, error) {
	if s.closing.Load() {
		return nil, sandbox.ErrClosed
	}
	if s.cg == nil {
		return nil, fmt.Errorf("export diff: %w", sandbox.ErrNoFreezer)
	}
	s.capture.Lock()
	defer s.capture.Unlock()
	prev, err := s.diff.base(opts.Since)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var c *diffCopy
	err = s.paused(func(upper *os.File) error {
		var err error
		c, err = s.diff.copyUpper(ctx, upper, s.slot.hostBase(), dst, prev, opts.Limits)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("export diff: %w", err)
	}
	markers, gone, err := diffMarkers(dst, prev, c.seen)
	if err != nil {
		return nil, fmt.Errorf("export diff: %w", err)
	}
	st := c.stats
	return &sandbox.DiffStats{
		Mark:          s.diff.keep(opts.Since, c.seen),
		Digest:        diffDigest(st.Digest, markers),
		Bytes:         st.Bytes,
		DiskBytes:     st.DiskBytes,
		Entries:       st.Entries + gone,
		Whiteouts:     c.whiteouts + gone,
		Skipped:       st.SkippedCount,
		StrippedSetid: st.StrippedSetid,
	}, nil
}

// paused freezes the sandbox's cgroup, calls fn with the upper layer of its
// root (the host's own descriptor of it, owners in host ids) and thaws the
// cgroup when fn returns. fn must not keep upper.
func (s *linuxSandbox) paused(fn func(upper *os.File) error) error {
	if err := s.cg.freeze(true); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	defer func() {
		if err := s.cg.freeze(false); err != nil {
			s.r.log.Error("could not resume a sandbox paused for a diff export", "sandbox", s.id, "err", err)
		}
	}()
	fd, err := unix.Openat(int(s.scratch.Fd()), scratchUpper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open upper layer: %w", err)
	}
	upper := os.NewFile(uintptr(fd), "upper")
	defer upper.Close()
	return fn(upper)
}

// SetLimits replaces the sandbox's limits: the cgroup's and the size of
// its upper layer.
func (s *linuxSandbox) SetLimits(l sandbox.Limits) error {
	l = s.r.limitsFor(l)
	if err := l.Validate(); err != nil {
		return err
	}
	if s.closing.Load() {
		return sandbox.ErrClosed
	}
	if err := s.cg.setLimits(s.r.cgroupLayout(), l); err != nil {
		return err
	}
	s.mu.Lock()
	old := s.limits.DiskBytes
	s.mu.Unlock()
	if l.DiskBytes != old {
		if err := resizeScratch(s.scratch, l.DiskBytes); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.limits = l
	s.enforcement.Limits = l
	s.enforcement.RootFS = rootDescription(s.root, l.DiskBytes)
	s.mu.Unlock()
	return nil
}

// errNetChange: only none → proxy can be changed on a live sandbox.
var errNetChange = errors.New("a live sandbox's network can only go from mode none to mode proxy")

// AttachNetwork turns a mode-none sandbox into a mode-proxy one: the
// proxy's listener is created inside its network namespace and served by
// n.Egress, and processes started from now on get the proxy environment.
func (s *linuxSandbox) AttachNetwork(n sandbox.Network) error {
	mode, err := sandbox.ParseNetMode(string(n.Mode))
	if err != nil {
		return err
	}
	s.mu.Lock()
	cur := s.netMode
	s.mu.Unlock()
	if mode == cur && mode != sandbox.NetProxy {
		return nil
	}
	if cur != sandbox.NetNone || mode != sandbox.NetProxy {
		return fmt.Errorf("%w: %w (from %s to %s)", sandbox.ErrInvalidSpec, errNetChange, cur, mode)
	}
	if n.Egress == nil {
		return fmt.Errorf("%w: %w", sandbox.ErrInvalidSpec, errNoEgress)
	}
	ln, err := listenInNetns(s.proc.pid, sandbox.ProxyPort)
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	s.mu.Lock()
	s.netMode, s.egress = mode, n.Egress
	s.enforcement.Network = networkDescription(mode)
	s.mu.Unlock()
	go func() {
		if err := n.Egress.Serve(s.id, ln); err != nil {
			s.r.log.Warn("egress proxy stopped", "sandbox", s.id, "err", err)
		}
	}()
	return nil
}

// Ping checks that the sandbox's agent answers a request.
func (s *linuxSandbox) Ping(ctx context.Context) error {
	select {
	case <-s.exited:
		return sandbox.ErrClosed
	default:
	}
	_, err := s.Files().Stat(ctx, "/")
	return err
}
