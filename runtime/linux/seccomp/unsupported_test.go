//go:build !amd64 && !arm64

package seccomp

import (
	"errors"
	"testing"
)

func TestUnsupportedArch(t *testing.T) {
	if _, err := Default().Assemble(); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Assemble: got %v, want errors.ErrUnsupported", err)
	}
	if s := Default().Summary(); s.Error == "" {
		t.Fatal("Summary reports no error")
	}
}
