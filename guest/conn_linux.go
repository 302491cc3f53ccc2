package guest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// SocketPair returns a connected SOCK_SEQPACKET pair, both close-on-exec.
func SocketPair() (host, agent *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	// The host end joins Go's poller (deadlines, no blocked threads); the
	// agent end is handed to a child, which sets its own mode.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "moat-host"), os.NewFile(uintptr(fds[1]), "moat-agent"), nil
}

// FileConn wraps an inherited socket descriptor, switching it to
// non-blocking mode so that it joins Go's poller.
func FileConn(fd int) (*Conn, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	unix.CloseOnExec(fd)
	return NewConn(os.NewFile(uintptr(fd), "moat-control")), nil
}

// Send writes one message with the given descriptors. The caller keeps
// ownership of fds.
func (c *Conn) Send(m *Message, fds ...int) error {
	return c.SendValue(string(m.Type), m, fds...)
}

// SendValue writes v, JSON-encoded, as one packet with the given
// descriptors; name says what it is in errors. The caller keeps ownership
// of fds. The runtime's spawner speaks its own messages this way.
func (c *Conn) SendValue(name string, v any, fds ...int) error {
	b, err := encode(name, v)
	if err != nil {
		return err
	}
	if len(fds) > MaxFDs {
		return fmt.Errorf("%s: %d descriptors, at most %d", name, len(fds), MaxFDs)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	rc, err := c.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	werr := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, oob, nil, 0)
		return serr != unix.EAGAIN
	})
	if werr != nil {
		return fmt.Errorf("send %s: %w", name, werr)
	}
	if serr != nil {
		return fmt.Errorf("send %s: %w", name, serr)
	}
	return nil
}

// Recv reads one message and the descriptors that came with it, which the
// caller then owns (they are close-on-exec). It returns io.EOF when the
// peer has closed.
func (c *Conn) Recv() (*Message, []int, error) {
	m := new(Message)
	fds, err := c.RecvValue(m)
	if err != nil {
		return nil, nil, err
	}
	return m, fds, nil
}

// RecvValue reads one packet into v (JSON) as Recv does, and returns the
// descriptors that came with it.
func (c *Conn) RecvValue(v any) ([]int, error) {
	if c.oob == nil {
		c.buf = make([]byte, recvBuf)
		c.oob = make([]byte, unix.CmsgSpace(MaxFDs*4))
	}
	rc, err := c.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var n, oobn, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		// Peek at the packet's length (MSG_TRUNC returns the real one;
		// no control buffer, so no descriptor is installed), so that a
		// connection keeps a small buffer and only a large message
		// needs a large one.
		var size int
		size, _, _, _, rerr = unix.Recvmsg(int(fd), nil, nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		if rerr == unix.ECONNRESET {
			// A peer that exits with packets of ours unread makes the
			// kernel report ECONNRESET once, before the packets it sent
			// last (an init's setup error); they are still queued.
			size, _, _, _, rerr = unix.Recvmsg(int(fd), nil, nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		}
		if rerr != nil {
			return rerr != unix.EAGAIN
		}
		buf := c.buf
		if size >= len(buf) && size <= MaxMessage {
			buf = make([]byte, size+1)
		}
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, c.oob, unix.MSG_CMSG_CLOEXEC)
		if rerr == nil && n > 0 {
			c.last = buf[:n]
		}
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return nil, fmt.Errorf("recv: %w", err)
	}
	if rerr != nil {
		if rerr == syscall.ECONNRESET {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("recv: %w", rerr)
	}
	fds, err := parseRights(c.oob[:oobn])
	if err != nil {
		return nil, err
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > MaxMessage {
		closeAll(fds)
		return nil, fmt.Errorf("recv: %w", ErrTooLarge)
	}
	if n == 0 {
		closeAll(fds)
		return nil, io.EOF
	}
	data := c.last
	c.last = nil
	if err := json.Unmarshal(data, v); err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("decode message: %w", err)
	}
	return fds, nil
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		r, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("parse rights: %w", err)
		}
		fds = append(fds, r...)
	}
	return fds, nil
}

// recvBuf is the buffer a connection keeps for messages; larger ones (up
// to MaxMessage) get a buffer of their own.
const recvBuf = 64 << 10

// closeAll closes every descriptor in fds.
func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
