//go:build unix

package netproxy

import (
	"io"
	"net"
	"os"
	"syscall"
)

// copyRaw is copyConn for a source with a descriptor: it waits for the
// source to be readable through the runtime's poller, then borrows a
// buffer, reads what is there, writes it and gives the buffer back.
// handled is false when src has no descriptor; then nothing was read.
func (b *bufPool) copyRaw(dst io.Writer, src net.Conn) (written int64, handled bool, err error) {
	sc, ok := src.(syscall.Conn)
	if !ok {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var (
		buf  *[]byte
		n    int
		rerr error
	)
	// read is called by rc.Read until it returns true, after each false
	// once the descriptor is readable; rc.Read honours the connection's
	// read deadline and its Close.
	read := func(fd uintptr) bool {
		buf = b.get()
		for {
			n, rerr = syscall.Read(int(fd), *buf)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			b.put(buf)
			buf = nil
			return false
		}
		return true
	}
	for {
		err := rc.Read(read)
		if err == nil && rerr != nil {
			err = os.NewSyscallError("read", rerr)
		}
		if err != nil || n <= 0 {
			if buf != nil {
				b.put(buf)
				buf = nil
			}
			return written, true, err
		}
		m, werr := dst.Write((*buf)[:n])
		b.put(buf)
		buf = nil
		written += int64(m)
		if werr == nil && m != n {
			werr = io.ErrShortWrite
		}
		if werr != nil {
			return written, true, werr
		}
	}
}
