package netproxy

import (
	"io"
	"net"
	"sync"
)

// copyBufSize is the size of the buffers a relay direction and a forwarded
// response body borrow while bytes flow. One read or write moves up to
// this much, so a fast transfer costs few system calls and the sandbox's
// loopback carries large segments; on bench/netproxy 256 KiB cost the
// proxy as little CPU per byte as 1 MiB, and clearly less than 64 KiB.
const copyBufSize = 256 << 10

// bufPool lends buffers of copyBufSize bytes; its zero value is ready.
// copyConn holds one only while bytes are in hand (read, not yet
// written), never while a TCP connection is idle, so idle tunnels cost
// no buffer.
type bufPool struct{ p sync.Pool }

// get borrows a buffer; put gives it back.
func (b *bufPool) get() *[]byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return v
	}
	buf := make([]byte, copyBufSize)
	return &buf
}

func (b *bufPool) put(buf *[]byte) { b.p.Put(buf) }

// copyConn copies from src to dst until src's end (nil error) or the first
// error, and returns the bytes written to dst. It does not close or
// half-close either side.
//
// The bytes go through the proxy's memory rather than being spliced.
// splice(2) saves the proxy two copies but sends the upstream's page
// fragments on; on a sandbox's loopback those segments arrived out of
// order (hundreds of fast retransmissions per GiB in the namespace's
// TcpExt counters, against a handful when copying) and curl inside the
// sandbox spent about twice the CPU per byte receiving them, more in all
// than the copies cost (bench/netproxy, perf). A source with a descriptor
// (TCP) is waited on through the runtime's poller without a buffer, which
// is borrowed only for one read and its write; any other source holds one
// for the whole copy.
func (b *bufPool) copyConn(dst io.Writer, src net.Conn) (int64, error) {
	if n, handled, err := b.copyRaw(dst, src); handled {
		return n, err
	}
	buf := b.get()
	defer b.put(buf)
	return io.CopyBuffer(onlyWriter{dst}, onlyReader{src}, *buf)
}

// onlyReader and onlyWriter hide ReadFrom and WriteTo, so that
// io.CopyBuffer uses its buffer and never splices.
type onlyReader struct{ io.Reader }

type onlyWriter struct{ io.Writer }
