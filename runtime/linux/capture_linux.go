package linux

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/sandbox"
)

var (
	_ sandbox.Capturer  = (*linuxSandbox)(nil)
	_ sandbox.Claimable = (*linuxSandbox)(nil)
)

// Capture pauses the sandbox with the cgroup freezer, hands fn the upper
// layer of its root and resumes it. File operations of the host (which the
// init runs outside the freezer) are held off for the duration.
//
// Preconditions: the sandbox is long-lived (a one-shot sandbox has nothing
// to capture once its call is over).
func (s *linuxSandbox) Capture(ctx context.Context, fn func(upper *os.File, idBase uint32) error) error {
	if s.closing.Load() {
		return sandbox.ErrClosed
	}
	if s.cg == nil {
		return fmt.Errorf("capture: %w", sandbox.ErrNoFreezer)
	}
	s.capture.Lock()
	defer s.capture.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.cg.freeze(true); err != nil {
		return fmt.Errorf("capture: pause: %w", err)
	}
	defer func() {
		if err := s.cg.freeze(false); err != nil {
			s.r.log.Error("resuming a sandbox after a capture failed", "sandbox", s.id, "err", err)
		}
	}()
	fd, err := unix.Openat(int(s.scratch.Fd()), scratchUpper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("capture: open upper layer: %w", err)
	}
	upper := os.NewFile(uintptr(fd), "upper")
	defer upper.Close()
	return fn(upper, s.slot.hostBase())
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
