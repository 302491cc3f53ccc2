package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
)

// controlFD is the descriptor number of the control socket in the init.
const controlFD = 3

// Main runs a sandbox's pid 1: it receives the setup message, builds and
// pivots into the root, hardens itself, reports ready and then serves
// process requests. It never returns.
//
// Preconditions: started by Runtime with the control socket on fd 3, in
// fresh user, mount, pid, net, ipc, uts and cgroup namespaces.
func Main() {
	// Capability sets are per thread: setup, hardening and every fork of
	// a sandbox process happen on this one thread, which is never handed
	// back to the Go scheduler.
	runtime.LockOSThread()
	// Close every descriptor the init inherited beyond stdio and the
	// control socket, before anything else can use one: a directory fd
	// leaked by whoever started moat would otherwise be a way out of the
	// root, e.g. as a process's cwd through /proc/self/fd/N
	// (CVE-2024-21626).
	if err := unix.CloseRange(controlFD+1, ^uint(0), 0); err != nil {
		fmt.Fprintln(os.Stderr, "moat init: close inherited descriptors:", err)
		os.Exit(1)
	}
	conn, err := guest.FileConn(controlFD)
	if err != nil {
		fmt.Fprintln(os.Stderr, "moat init:", err)
		os.Exit(1)
	}
	s, homeFD, ruleset, err := initSandbox(conn)
	if err != nil {
		info := &guest.ErrInfo{Stage: "setup", Message: err.Error(), Code: 125}
		var se *stageError
		if errors.As(err, &se) {
			info.Stage, info.Message = se.stage, se.err.Error()
		}
		if serr := conn.Send(&guest.Message{Type: guest.MsgError, Error: info}); serr != nil {
			// The host reads stderr's tail when no report came.
			fmt.Fprintf(os.Stderr, "moat init: %s: %s (reporting it: %v)\n", info.Stage, info.Message, serr)
		}
		os.Exit(1)
	}
	agent := guest.NewAgent(conn, s)
	if homeFD >= 0 {
		agent.SetCallCgroupHome(homeFD)
	}
	// The file workers' threads are not this one's clones: each enforces
	// the Landlock ruleset on itself (landlock_linux.go).
	agent.SetThreadHardening(func() error { return restrictThread(ruleset) })
	if err := agent.Serve(); err != nil {
		fmt.Fprintln(os.Stderr, "moat init:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// initSandbox receives the setup message, builds the root and hardens the
// init; it returns the setup the agent then serves, with call cgroups the
// pids cgroup's "tasks" file the agent moves back to (else -1), and the
// Landlock ruleset (see harden).
func initSandbox(conn *guest.Conn) (*guest.Setup, int, int, error) {
	var phases []guest.Phase
	mark := func(name string) { phases = append(phases, guest.Phase{Name: name, At: time.Now().UnixMicro()}) }
	mark("init started")
	s, fds, err := receiveSetup(conn)
	if err != nil {
		return nil, -1, -1, err
	}
	homeFD, err := joinCgroup(s, fds.CgroupJoin)
	closeFDs(fds.CgroupJoin)
	fds.CgroupJoin = nil
	if err == nil {
		err = isolateFDs()
	}
	if err != nil {
		closeSetupFDs(fds)
		return nil, -1, -1, err
	}
	mark("setup received")
	restricted, err := buildRoot(s, fds)
	errFD := -1
	if err == nil {
		errFD, err = openStderrFile(fds.Scratch)
	}
	closeSetupFDs(fds)
	mark("root built")
	if err != nil {
		return nil, -1, -1, err
	}
	fail := func(err error) (*guest.Setup, int, int, error) {
		unix.Close(errFD)
		return nil, -1, -1, err
	}
	if err := checkCwdInRoot(); err != nil {
		return fail(err)
	}
	ruleset, err := harden(s, s.Mounts, s.LandlockABI)
	if err != nil {
		return fail(err)
	}
	mark("hardened")
	// Ready: the host stops reading the pipe (see StderrFile).
	if err := redirectStderr(errFD); err != nil {
		return nil, -1, -1, err
	}
	return s, homeFD, ruleset, conn.Send(&guest.Message{Type: guest.MsgReady, Phases: phases, Restrict: restricted})
}

// receiveSetup reads the setup message and its descriptors, by role.
func receiveSetup(conn *guest.Conn) (*guest.Setup, guest.SetupFDs, error) {
	m, fds, err := conn.Recv()
	if err != nil {
		return nil, guest.SetupFDs{}, stageErr("receive setup", err)
	}
	if m.Type != guest.MsgSetup || m.Setup == nil {
		closeFDs(fds)
		return nil, guest.SetupFDs{}, stageErr("receive setup", fmt.Errorf("unexpected message %q", m.Type))
	}
	in, err := m.Setup.UnpackFDs(fds)
	if err != nil {
		closeFDs(fds)
		return nil, guest.SetupFDs{}, stageErr("receive setup", err)
	}
	return m.Setup, in, nil
}

// joinCgroup moves this thread into the sandbox's cgroup through the
// cgroup v1 "tasks" files the host passed (on v2 the host has moved the
// whole init already) and makes the init's cgroup namespace, rooted
// there. With s.CallCgroups it returns a copy of the last file (the pids
// hierarchy's), which the agent moves its forking thread back to; else
// -1. The caller keeps ownership of join.
//
// Preconditions: the init's main thread, locked (see Init), before any
// sandbox process exists.
func joinCgroup(s *guest.Setup, join []int) (int, error) {
	homeFD := -1
	if s.CallCgroups && len(join) > 0 {
		fd, err := unix.FcntlInt(uintptr(join[len(join)-1]), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return -1, stageErr("join cgroup", err)
		}
		homeFD = fd
	}
	for _, fd := range join {
		if _, err := unix.Write(fd, []byte("0")); err != nil {
			closeHome(homeFD)
			return -1, stageErr("join cgroup", err)
		}
	}
	// This thread is in the sandbox's cgroup now: a cgroup namespace made
	// now is rooted there.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		closeHome(homeFD)
		return -1, stageErr("cgroup namespace", err)
	}
	return homeFD, nil
}

func closeHome(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// isolateFDs makes every descriptor above stdio close-on-exec: none may
// reach anything the sandbox runs (CVE-2024-21626 leaked a host directory
// fd as a usable cwd).
func isolateFDs() error {
	return stageErr("close-on-exec", unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC))
}

// closeSetupFDs closes the setup's descriptors the init has not used up.
func closeSetupFDs(f guest.SetupFDs) {
	closeFDs(f.Trees)
	closeFDs(f.Layers)
	unix.Close(f.Scratch)
	closeFDs(f.CgroupJoin)
}

// checkCwdInRoot verifies that the init's working directory is inside the
// new root: getcwd fails (or returns "(unreachable)") for a cwd outside it.
func checkCwdInRoot() error {
	buf := make([]byte, 4096)
	n, err := unix.Getcwd(buf)
	if err != nil {
		return stageErr("check cwd", err)
	}
	if cwd := string(buf[:n-1]); cwd != "/" {
		return stageErr("check cwd", fmt.Errorf("cwd %q is not the sandbox root", cwd))
	}
	return nil
}
