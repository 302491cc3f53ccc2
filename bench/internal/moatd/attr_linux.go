package moatd

import "syscall"

// daemonAttr makes the daemon get SIGTERM when the benchmark dies.
func daemonAttr() (*syscall.SysProcAttr, error) {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}, nil
}
