//go:build !linux

package guest

import "testing"

// transports: a byte stream (the socket transport is Linux's).
func transports() map[string]func(*testing.T) (*Conn, *Conn) {
	return map[string]func(*testing.T) (*Conn, *Conn){"bytestream": streamPair}
}
