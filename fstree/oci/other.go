//go:build !linux

package oci

import (
	"context"
	"fmt"

	"github.com/moat-sandbox/moat/fstree"
)

// Import is only implemented on Linux.
func Import(ctx context.Context, src, ref, dst string, opt fstree.Options) (*Image, *fstree.Stats, error) {
	return nil, nil, fmt.Errorf("oci: %w on this platform (Linux only)", fstree.ErrUnsupported)
}
