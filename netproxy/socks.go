package netproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"syscall"
	"time"
)

// SOCKS5 (RFC 1928) constants.
const (
	socksVersion4 = 0x04
	socksVersion5 = 0x05

	socksNoAuth       = 0x00
	socksNoAcceptable = 0xFF

	socksCmdConnect = 0x01

	socksAtypIPv4   = 0x01
	socksAtypDomain = 0x03
	socksAtypIPv6   = 0x04

	socksSucceeded        = 0x00
	socksGeneralFailure   = 0x01
	socksNotAllowed       = 0x02
	socksNetUnreachable   = 0x03
	socksHostUnreachable  = 0x04
	socksConnRefused      = 0x05
	socksTTLExpired       = 0x06
	socksCmdNotSupported  = 0x07
	socksAtypNotSupported = 0x08
	socksHandshakeTimeout = 30 * time.Second
)

// serveSOCKS serves one SOCKS5 connection: no authentication, CONNECT only,
// names resolved by the proxy.
func (e *Endpoint) serveSOCKS(sandbox string, c *sniffConn) {
	t := &target{sandbox: sandbox, proto: ProtoSOCKS5}
	br := bufio.NewReaderSize(c, 1024)
	raw := c.Conn
	raw.SetReadDeadline(time.Now().Add(socksHandshakeTimeout))

	// Method selection.
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	if !bytes.Contains(methods, []byte{socksNoAuth}) {
		raw.Write([]byte{socksVersion5, socksNoAcceptable})
		e.emitRefusal(t, badRequest("SOCKS5 client offers no acceptable method (only \"no authentication\" is supported)"))
		return
	}
	if _, err := raw.Write([]byte{socksVersion5, socksNoAuth}); err != nil {
		return
	}

	// Request.
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil {
		return
	}
	if req[0] != socksVersion5 {
		e.emitRefusal(t, badRequest("bad SOCKS version %d", req[0]))
		return
	}
	var host string
	switch req[3] {
	case socksAtypIPv4:
		var b [4]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return
		}
		host = netip.AddrFrom4(b).String()
	case socksAtypIPv6:
		var b [16]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return
		}
		host = netip.AddrFrom16(b).String()
	case socksAtypDomain:
		n, err := br.ReadByte()
		if err != nil {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = string(b)
	default:
		socksReply(raw, socksAtypNotSupported)
		e.emitRefusal(t, badRequest("SOCKS5 address type %d is not supported", req[3]))
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	port := int(binary.BigEndian.Uint16(pb[:]))
	raw.SetReadDeadline(time.Time{})
	if h, ip, err := normalizeHost(host); err == nil {
		t.host, t.ip = h, ip
	} else {
		t.host = host
	}
	t.port = port
	if req[1] != socksCmdConnect {
		socksReply(raw, socksCmdNotSupported)
		e.emitRefusal(t, badRequest("SOCKS5 command %d is not supported (CONNECT only)", req[1]))
		return
	}
	if _, _, err := normalizeHost(host); err != nil || port == 0 {
		socksReply(raw, socksGeneralFailure)
		e.emitRefusal(t, badRequest("bad SOCKS5 destination %q port %d", host, port))
		return
	}

	up, r, gone := e.open(raw, br, t)
	if gone {
		return
	}
	if r != nil {
		socksReply(raw, socksCode(r))
		e.emitRefusal(t, r)
		return
	}
	defer e.untrack(up)
	addr := up.RemoteAddr().String()
	e.emitAllow(t, addr)
	start := time.Now()
	if socksReply(raw, socksSucceeded) != nil {
		up.Close()
		return
	}
	pending, _ := br.Peek(br.Buffered())
	e.relay(t, raw, bytes.Clone(pending), up, addr, start)
}

// socksReply writes a reply with BND.ADDR 0.0.0.0:0.
func socksReply(w io.Writer, code byte) error {
	_, err := w.Write([]byte{socksVersion5, code, 0x00, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// socksCode maps a refusal to a SOCKS5 reply code.
func socksCode(r *refusal) byte {
	switch r.Code {
	case CodeDNSFailure:
		return socksHostUnreachable
	case CodeConnectFailed:
		switch {
		case errors.Is(r.Err, syscall.ECONNREFUSED):
			return socksConnRefused
		case r.Err != nil && isTimeout(r.Err):
			return socksTTLExpired
		case errors.Is(r.Err, syscall.ENETUNREACH):
			return socksNetUnreachable
		case errors.Is(r.Err, syscall.EHOSTUNREACH):
			return socksHostUnreachable
		}
		return socksGeneralFailure
	case CodeBadRequest:
		return socksGeneralFailure
	}
	// denied, blocked-address and any policy-specific code.
	return socksNotAllowed
}
