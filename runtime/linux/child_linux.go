package linux

import (
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
	go func() {
		for {
			var ws unix.WaitStatus
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if err != unix.EINTR {
				break
			}
		}
		close(c.exited)
	}()
	return c, nil
}

// kill sends SIGKILL unless the child has been reaped (its pid could be
// reused then).
func (c *child) kill() {
	select {
	case <-c.exited:
	default:
		_ = unix.Kill(c.pid, unix.SIGKILL)
	}
}

// killAndWait kills the child and waits until it has been reaped.
func (c *child) killAndWait() {
	c.kill()
	<-c.exited
}
