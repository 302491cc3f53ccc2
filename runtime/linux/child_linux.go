package linux

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// child is a process this runtime started with syscall.ForkExec. The os
// package's process handling is not used: its first use probes pidfd
// support by forking a throwaway child, a cost paid on every moat run.
type child struct {
	pid    int
	exited chan struct{} // closed once the child has been reaped
	status unix.WaitStatus
	// pidfd refers to a child the spawner started (the spawner reaps it);
	// nil for a child of this process.
	pidfd *os.File
}

// startChild forks and execs argv0 with attr and reaps it in the
// background.
func startChild(argv0 string, argv []string, files []*os.File, sys *syscall.SysProcAttr) (*child, error) {
	fds := make([]uintptr, len(files))
	for i, f := range files {
		fds[i] = f.Fd()
	}
	pid, err := syscall.ForkExec(argv0, argv, &syscall.ProcAttr{Env: []string{}, Files: fds, Sys: sys})
	if err != nil {
		return nil, err
	}
	c := &child{pid: pid, exited: make(chan struct{})}
	go c.reap()
	return c, nil
}

// reap waits for the child to exit and reaps it. It waits on a pidfd in
// Go's poller, so that a daemon holding many sandboxes does not keep one
// OS thread blocked in wait4 per init; without pidfds it blocks in wait4.
func (c *child) reap() {
	defer close(c.exited)
	reaped := func() bool {
		var ws unix.WaitStatus
		for {
			wpid, err := unix.Wait4(c.pid, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if wpid == c.pid {
				c.status = ws
			}
			// ECHILD cannot happen while we are its only reaper; treat
			// it as the end rather than wait forever.
			return wpid == c.pid || err != nil
		}
	}
	if fd, err := unix.PidfdOpen(c.pid, unix.PIDFD_NONBLOCK); err == nil {
		f := os.NewFile(uintptr(fd), "pidfd")
		defer f.Close()
		if rc, err := f.SyscallConn(); err == nil {
			// The pidfd turns readable when the child exits.
			if err := rc.Read(func(uintptr) bool { return reaped() }); err == nil {
				return
			}
		}
	}
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(c.pid, &ws, 0, nil); err != unix.EINTR {
			c.status = ws
			return
		}
	}
}

// kill sends SIGKILL unless the child has been reaped (its pid could be
// reused then). A spawned child is signalled through its pidfd, which
// cannot reach another process whenever its reaping is reported.
func (c *child) kill() {
	select {
	case <-c.exited:
	default:
		if c.pidfd == nil {
			_ = unix.Kill(c.pid, unix.SIGKILL)
			return
		}
		if rc, err := c.pidfd.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _ = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) })
		}
	}
}

// killAndWait kills the child and waits until it has been reaped.
func (c *child) killAndWait() {
	c.kill()
	<-c.exited
}

// describe says how the child ended, once it has been reaped ("" before).
func (c *child) describe() string {
	select {
	case <-c.exited:
	default:
		return ""
	}
	switch ws := c.status; {
	case ws.Signaled():
		return "killed by signal " + ws.Signal().String()
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	}
	return ""
}
