package main

import "golang.org/x/sys/unix"

// closeInherited marks every descriptor above stderr close-on-exec.
func closeInherited() {
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}

// oPath opens a host path without opening the file: moat cp resolves host
// paths one component at a time from such descriptors.
const oPath = unix.O_PATH

// cpSupported reports whether moat cp can run here.
func cpSupported() error { return nil }
