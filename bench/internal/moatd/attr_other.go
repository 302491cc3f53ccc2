//go:build !linux

package moatd

import (
	"errors"
	"fmt"
	"syscall"
)

// daemonAttr fails off Linux: moat serve runs only there (and only there
// can the daemon be tied to the benchmark's life with PDEATHSIG).
func daemonAttr() (*syscall.SysProcAttr, error) {
	return nil, fmt.Errorf("moatd: moat serve needs Linux: %w", errors.ErrUnsupported)
}
