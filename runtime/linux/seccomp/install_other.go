//go:build !linux

package seccomp

import (
	"errors"
	"fmt"

	"golang.org/x/net/bpf"
)

// Install loads a seccomp filter; seccomp exists only on Linux, so here it
// always returns an error wrapping errors.ErrUnsupported.
func Install(prog []bpf.RawInstruction) error {
	return fmt.Errorf("seccomp: install: %w", errors.ErrUnsupported)
}
