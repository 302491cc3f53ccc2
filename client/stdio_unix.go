//go:build unix

package client

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the stdio child in a process group of its own, so that
// a terminal's ^C reaches this program, which decides when the daemon
// ends (Close, or the end of this process, which closes its stdin).
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killChild kills the child's process group.
func killChild(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}
