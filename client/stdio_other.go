//go:build !unix

package client

import "os/exec"

// setProcAttr leaves the child in this process's group.
func setProcAttr(*exec.Cmd) {}

// killChild kills the child.
func killChild(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
