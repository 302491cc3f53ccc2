//go:build !linux

package build

import (
	"context"
	"fmt"
	"io"

	"github.com/moat-sandbox/moat/fstree"
)

// Unpack is only implemented on Linux (fstree's extraction is).
func Unpack(ctx context.Context, r io.Reader, layer string, lim Limits, epoch int64) (*Source, error) {
	return nil, fmt.Errorf("build: unpack the source: %w on this platform (Linux only)", fstree.ErrUnsupported)
}
