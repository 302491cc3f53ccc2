//go:build !linux

package templates

import (
	"errors"
	"fmt"
)

// clearOpaque needs openat2 and overlayfs' xattrs: Linux only.
func clearOpaque(tree, rel string) error {
	return fmt.Errorf("snapshot %s: clearing an overlayfs opaque marker needs Linux: %w", rel, errors.ErrUnsupported)
}
