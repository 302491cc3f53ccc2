package testutil

import (
	"errors"
	"net"
	"testing"
	"time"
)

// UDPListener listens for datagrams on addr until the test ends.
func UDPListener(t testing.TB, addr string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UDPConn)
}

// Queued reports whether a datagram is already waiting on c. Local
// delivery happens inside sendto, so after the sender is gone anything it
// sent is already queued: the short deadline only turns "nothing there"
// into an error instead of blocking. It is not a wait for something to
// arrive.
func Queued(c *net.UDPConn) bool {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 64)
	_, _, err := c.ReadFrom(buf)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err == nil
}
