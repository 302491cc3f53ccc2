//go:build !linux

package main

import (
	"errors"
	"fmt"
)

// getTermios fails off Linux, where moat's sandbox (what this benchmark
// measures) does not run.
func getTermios(fd int) error {
	return fmt.Errorf("TCGETS is Linux's: %w", errors.ErrUnsupported)
}
