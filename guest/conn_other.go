//go:build !linux

package guest

import (
	"errors"
	"fmt"
	"os"
)

// The connection between a sandbox's host side and its init is a
// SOCK_SEQPACKET socket pair passing descriptors close-on-exec
// (MSG_CMSG_CLOEXEC): Linux only. Off Linux every operation fails.
var errPlatform = fmt.Errorf("guest: the sandbox connection needs Linux (SOCK_SEQPACKET, MSG_CMSG_CLOEXEC): %w", errors.ErrUnsupported)

// SocketPair always fails off Linux.
func SocketPair() (host, agent *os.File, err error) { return nil, nil, errPlatform }

// FileConn always fails off Linux.
func FileConn(fd int) (*Conn, error) { return nil, errPlatform }

// Send always fails off Linux.
func (c *Conn) Send(m *Message, fds ...int) error { return errPlatform }

// SendValue always fails off Linux.
func (c *Conn) SendValue(name string, v any, fds ...int) error { return errPlatform }

// Recv always fails off Linux.
func (c *Conn) Recv() (*Message, []int, error) { return nil, nil, errPlatform }

// RecvValue always fails off Linux.
func (c *Conn) RecvValue(v any) ([]int, error) { return nil, errPlatform }
