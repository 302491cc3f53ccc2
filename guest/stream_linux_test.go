package guest

import (
	"errors"
	"io"
	"testing"

	"golang.org/x/sys/unix"
)

// transports: a SOCK_SEQPACKET pair (the Linux runtime's) and a byte
// stream (a microVM's).
func transports() map[string]func(*testing.T) (*Conn, *Conn) {
	return map[string]func(*testing.T) (*Conn, *Conn){"seqpacket": pair, "bytestream": streamPair}
}

// TestRecvRefusesHostileFrames: on the socket, a frame the peer should
// never send ends the connection with ErrProtocol, its descriptors
// closed, and the streams fail; nothing is delivered.
func TestRecvRefusesHostileFrames(t *testing.T) {
	for name, c := range map[string]struct {
		packet []byte
		fds    bool
	}{
		"raw JSON":         {packet: []byte(`{"type":"exit","id":1}`)},
		"past the window":  {packet: frameBytes(FrameData, StreamStdout, 1, make([]byte, 1))},
		"data with an fd":  {packet: frameBytes(FrameData, StreamStdout, 2, []byte("x")), fds: true},
		"credit too large": {packet: frameBytes(FrameCredit, StreamStdin, 1, []byte{0, 0, 0, 1})},
	} {
		t.Run(name, func(t *testing.T) {
			h, a, err := SocketPair()
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			hc := NewConn(h)
			defer hc.Close()
			r, _ := hc.Streams().Reader(1, StreamStdout)
			_, _ = hc.Streams().Reader(2, StreamStdout)
			_, _ = hc.Streams().Writer(1, StreamStdin)
			recvErr := make(chan error, 1)
			go func() {
				_, _, err := hc.Recv()
				recvErr <- err
			}()
			// Fill stream 1's window, so that one more byte is too many.
			for range StreamWindow / MaxFrameData {
				if _, err := unix.Write(int(a.Fd()), frameBytes(FrameData, StreamStdout, 1, make([]byte, MaxFrameData))); err != nil {
					t.Fatal(err)
				}
			}
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			defer unix.Close(p[1])
			var oob []byte
			if c.fds {
				oob = unix.UnixRights(p[0])
			}
			if err := unix.Sendmsg(int(a.Fd()), c.packet, oob, nil, 0); err != nil {
				t.Fatal(err)
			}
			unix.Close(p[0])
			if err := <-recvErr; !errors.Is(err, ErrProtocol) {
				t.Fatalf("Recv: %v, want ErrProtocol", err)
			}
			if c.fds {
				// The passed descriptor was closed: the pipe has no reader.
				if _, err := unix.Write(p[1], []byte("x")); err != unix.EPIPE {
					t.Fatalf("write to the pipe: %v, want EPIPE (its passed read end closed)", err)
				}
			}
			if _, err := io.ReadAll(r); err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("a stream after the violation: %v, want the connection's error", err)
			}
		})
	}
}
