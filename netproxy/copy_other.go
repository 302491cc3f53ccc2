//go:build !unix

package netproxy

import (
	"io"
	"net"
)

// copyRaw is not available without Unix descriptors: copyConn falls back
// to a buffer held for the whole copy.
func (b *bufPool) copyRaw(io.Writer, net.Conn) (int64, bool, error) { return 0, false, nil }
