//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package audit

import (
	"fmt"
	"os"
)

// lockDir opens path without locking it: this platform has no flock, so the
// caller must not open one directory twice.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return f, nil
}

// unlockDir releases a file opened by lockDir.
func unlockDir(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// syncDir is a no-op where directories cannot be synced.
func syncDir(string) error { return nil }
