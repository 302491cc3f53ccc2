package linux

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/sandbox"
)

// listenInNetns returns a TCP listener on port of every address of the
// network namespace of process pid (a sandbox's loopback: it has no other
// interface), owned by this process. Connections the sandbox makes to it
// are accepted on the host, by the egress proxy, with no bridge process in
// between; nothing inside the sandbox holds the socket, so the sandbox
// cannot close, steal or rebind the port.
//
// Preconditions: the caller has CAP_SYS_ADMIN over the namespace's owning
// user namespace (root on the host) and pid is not reaped yet.
func listenInNetns(pid, port int) (net.Listener, error) {
	target, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's network namespace: %w", err)
	}
	defer target.Close()

	// setns changes the calling thread only, so it happens on a goroutine
	// of its own, locked to its thread. A thread that cannot return to
	// the host's namespace stays locked when the goroutine ends, so the Go
	// runtime ends the thread rather than reuse it (threads the runtime
	// starts meanwhile are cloned from its template thread, not this one).
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("open the host's network namespace: %w", err)}
			return
		}
		defer home.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("enter the sandbox's network namespace: %w", err)}
			return
		}
		// Larger loopback segments before the listener exists, so that
		// every proxied connection gets them; a kernel that refuses
		// keeps 64 KiB segments, which is only slower.
		_ = raiseLoopbackGSO()
		ln, lerr := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			if ln != nil {
				ln.Close()
			}
			done <- result{err: fmt.Errorf("return to the host's network namespace: %w", err)}
			return // the thread stays locked and ends with this goroutine
		}
		runtime.UnlockOSThread()
		if lerr != nil {
			lerr = fmt.Errorf("listen on port %d in the sandbox: %w", port, lerr)
		}
		done <- result{ln, lerr}
	}()
	r := <-done
	return r.ln, r.err
}

// errNoEgress: a proxy-mode spec without the egress proxy to serve it.
var errNoEgress = errors.New("network mode proxy needs an egress proxy (Network.Egress)")

// networkDescription is Enforcement.Network for a mode.
func networkDescription(m sandbox.NetMode) string {
	switch m {
	case sandbox.NetProxy:
		return fmt.Sprintf("proxy (own network namespace, loopback only; the egress proxy at 127.0.0.1:%d is the only way out)", sandbox.ProxyPort)
	case sandbox.NetOpen:
		return "open (the host's network namespace)"
	}
	return "none (loopback only)"
}

// DetachNetwork turns a mode-proxy sandbox into a mode-none one (the
// reverse of AttachNetwork): the egress proxy's listener inside its
// network namespace and every connection through it are closed
// (Egress.Close), so the namespace is loopback only again; processes
// started from now on get no proxy environment. A mode-none sandbox is
// left as it is; a mode-open one cannot leave the host's namespace
// (ErrInvalidSpec).
func (s *linuxSandbox) DetachNetwork() error {
	s.mu.Lock()
	switch s.netMode {
	case sandbox.NetNone:
		s.mu.Unlock()
		return nil
	case sandbox.NetOpen:
		s.mu.Unlock()
		return fmt.Errorf("%w: a sandbox in network mode open shares the host's network namespace and cannot leave it", sandbox.ErrInvalidSpec)
	}
	egress := s.egress
	s.netMode, s.egress = sandbox.NetNone, nil
	s.enforcement.Network = networkDescription(sandbox.NetNone)
	s.mu.Unlock()
	if egress != nil {
		return egress.Close()
	}
	return nil
}
