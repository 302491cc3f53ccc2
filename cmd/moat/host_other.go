//go:build !linux

package main

import (
	"errors"
	"fmt"
)

// closeInherited does nothing off Linux: without close_range(2) and with
// no sandbox to start (the linux runtime fails there), nothing moat runs
// could inherit the descriptors.
func closeInherited() {}

// oPath stands for Linux's O_PATH, which moat cp needs; cpSupported stops
// moat cp before anything opens a host path with it.
const oPath = 0

// cpSupported reports that moat cp cannot run off Linux.
func cpSupported() error {
	return fmt.Errorf("moat cp resolves host paths with O_PATH and openat2, which need Linux: %w", errors.ErrUnsupported)
}
