//go:build !linux

package guest

import (
	"errors"
	"fmt"
	"os"
)

// The connection between a sandbox's host side and its init is a
// SOCK_SEQPACKET socket pair passing descriptors close-on-exec
// (MSG_CMSG_CLOEXEC): Linux only. Off Linux a Conn over a socket fails
// every operation; NewStreamConn works everywhere.
var errPlatform = fmt.Errorf("guest: the sandbox connection needs Linux (SOCK_SEQPACKET, MSG_CMSG_CLOEXEC): %w", errors.ErrUnsupported)

// SocketPair always fails off Linux.
func SocketPair() (host, agent *os.File, err error) { return nil, nil, errPlatform }

// FileConn always fails off Linux.
func FileConn(fd int) (*Conn, error) { return nil, errPlatform }

// NewConn returns a connection whose every operation fails off Linux.
func NewConn(f *os.File) *Conn { return newConn(noTransport{}) }

// noTransport is the socket transport off Linux.
type noTransport struct{}

func (noTransport) writePacket(hdr, payload []byte, fds []int) error { return errPlatform }
func (noTransport) readPacket() ([]byte, []int, error)               { return nil, nil, errPlatform }
func (noTransport) close() error                                     { return errPlatform }

// closeAll does nothing: no transport off Linux carries descriptors.
func closeAll(fds []int) {}
