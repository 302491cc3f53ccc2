package guest

import (
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

// NewConn wraps a connected SOCK_SEQPACKET socket: one frame per packet,
// descriptors as SCM_RIGHTS.
func NewConn(f *os.File) *Conn {
	return newConn(&seqpacket{f: f})
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

// seqpacket is the transport of a SOCK_SEQPACKET socket.
type seqpacket struct {
	f   *os.File
	buf []byte
	oob []byte
}

func (s *seqpacket) close() error { return s.f.Close() }

func (s *seqpacket) writePacket(hdr, payload []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	rc, err := s.f.SyscallConn()
	if err != nil {
		return err
	}
	bufs := [][]byte{hdr, payload}
	var serr error
	werr := rc.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgBuffers(int(fd), bufs, oob, nil, 0)
		return serr != unix.EAGAIN
	})
	if werr != nil {
		return werr
	}
	return serr
}

// maxPacket is the largest packet either side sends or accepts: a
// control frame of MaxMessage bytes.
const maxPacket = FrameHeader + MaxMessage

func (s *seqpacket) readPacket() ([]byte, []int, error) {
	if s.oob == nil {
		s.buf = make([]byte, recvBuf)
		s.oob = make([]byte, unix.CmsgSpace(MaxFDs*4))
	}
	rc, err := s.f.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var (
		n, oobn, flags int
		rerr           error
		data           []byte
	)
	err = rc.Read(func(fd uintptr) bool {
		// Peek at the packet's length (MSG_TRUNC returns the real one;
		// no control buffer, so no descriptor is installed), so that a
		// connection keeps a small buffer and only a large message
		// needs a large one.
		var size int
		size, _, _, rerr = recvmsg(int(fd), nil, nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		if rerr != nil {
			return rerr != unix.EAGAIN
		}
		buf := s.buf
		if size >= len(buf) && size <= maxPacket {
			buf = make([]byte, size+1)
		}
		n, oobn, flags, rerr = recvmsg(int(fd), buf, s.oob, unix.MSG_CMSG_CLOEXEC)
		if rerr == nil && n > 0 {
			data = buf[:n]
		}
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return nil, nil, fmt.Errorf("recv: %w", err)
	}
	if rerr != nil {
		if rerr == syscall.ECONNRESET {
			return nil, nil, io.EOF
		}
		return nil, nil, fmt.Errorf("recv: %w", rerr)
	}
	fds, err := parseRights(s.oob[:oobn])
	if err != nil {
		return nil, nil, err
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > maxPacket {
		closeAll(fds)
		return nil, nil, fmt.Errorf("recv: %w", ErrTooLarge)
	}
	if n == 0 {
		closeAll(fds)
		return nil, nil, io.EOF
	}
	return data, fds, nil
}

// recvmsg is unix.Recvmsg past a connection reset. A peer that exits
// with packets of ours unread makes the kernel report ECONNRESET once, at
// whichever recvmsg comes next (the peek at a packet or, if the peer
// exits in between, the read of the packet just peeked at), before the
// packets it sent last (an init's setup error): they are still queued, so
// the call is made again.
func recvmsg(fd int, p, oob []byte, flags int) (n, oobn, recvflags int, err error) {
	n, oobn, recvflags, _, err = unix.Recvmsg(fd, p, oob, flags)
	if err == unix.ECONNRESET {
		n, oobn, recvflags, _, err = unix.Recvmsg(fd, p, oob, flags)
	}
	return n, oobn, recvflags, err
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

// recvBuf is the buffer a connection keeps for packets: a full data
// frame fits; larger control messages (up to MaxMessage) get a buffer of
// their own.
const recvBuf = FrameHeader + MaxFrameData + 1

// closeAll closes every descriptor in fds.
func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
