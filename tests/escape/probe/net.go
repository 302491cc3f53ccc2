//go:build linux

package main

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket and network attempts.

func init() {
	register("socket", 3, "DOMAIN TYPE PROTO (names or numbers)", opSocket)
	register("socketpair", 2, "DOMAIN TYPE", opSocketpair)
	register("connect-unix", 1, "PATH|@ABSTRACT", opConnectUnix)
	register("listen-abstract", 1, "NAME (listens on @NAME and keeps the socket for later attempts)", opListenAbstract)
	register("connect-tcp", 1, "HOST:PORT", opConnectTCP)
	register("udp-send", 1, "HOST:PORT (sendto, one byte)", func(r *Result, a []string) error { return udp(a[0], true) })
	register("udp-connect", 1, "HOST:PORT (connect only: a route lookup, no packet)", func(r *Result, a []string) error { return udp(a[0], false) })
	register("ifaces", 0, "(network interfaces and addresses)", opIfaces)
	register("hold", 1, "FIFO (write \"ready\" to FIFO, then block until stdin closes)", opHold)
	register("block", 0, "(block until stdin closes)", func(r *Result, a []string) error {
		_, err := io.Copy(io.Discard, os.Stdin)
		return err
	})
}

var domains = map[string]int{
	"unix": unix.AF_UNIX, "inet": unix.AF_INET, "inet6": unix.AF_INET6, "netlink": unix.AF_NETLINK,
	"packet": unix.AF_PACKET, "vsock": unix.AF_VSOCK, "alg": unix.AF_ALG, "key": unix.AF_KEY,
	"bluetooth": unix.AF_BLUETOOTH, "can": unix.AF_CAN, "tipc": unix.AF_TIPC, "rds": unix.AF_RDS,
	"xdp": unix.AF_XDP, "appletalk": unix.AF_APPLETALK, "ax25": unix.AF_AX25, "x25": unix.AF_X25,
	"llc": unix.AF_LLC, "ieee802154": unix.AF_IEEE802154, "qipcrtr": unix.AF_QIPCRTR,
	"smc": unix.AF_SMC, "mctp": unix.AF_MCTP, "isdn": unix.AF_ISDN, "phonet": unix.AF_PHONET,
	"decnet": unix.AF_DECnet, "netrom": unix.AF_NETROM, "rose": unix.AF_ROSE, "atmpvc": unix.AF_ATMPVC,
	"ipx": unix.AF_IPX, "kcm": unix.AF_KCM, "nfc": unix.AF_NFC, "caif": unix.AF_CAIF, "pppox": unix.AF_PPPOX,
	"rxrpc": unix.AF_RXRPC, "iucv": unix.AF_IUCV, "ib": unix.AF_IB, "mpls": unix.AF_MPLS,
}

var types = map[string]int{
	"stream": unix.SOCK_STREAM, "dgram": unix.SOCK_DGRAM, "raw": unix.SOCK_RAW,
	"seqpacket": unix.SOCK_SEQPACKET, "packet": unix.SOCK_PACKET, "rdm": unix.SOCK_RDM,
}

var protos = map[string]int{
	"0": 0, "route": unix.NETLINK_ROUTE, "audit": unix.NETLINK_AUDIT,
	"uevent": unix.NETLINK_KOBJECT_UEVENT, "sock_diag": unix.NETLINK_SOCK_DIAG,
	"netfilter": unix.NETLINK_NETFILTER, "xfrm": unix.NETLINK_XFRM, "generic": unix.NETLINK_GENERIC,
	"selinux": unix.NETLINK_SELINUX, "connector": unix.NETLINK_CONNECTOR,
	"icmp": unix.IPPROTO_ICMP, "tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP,
	"eth_p_all": int(htons(unix.ETH_P_ALL)),
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// lookup maps a name through m, or parses a number (which may carry bits
// above 32, passed as is to the raw syscall).
func lookup(m map[string]int, s string) (uintptr, error) {
	if v, ok := m[s]; ok {
		return uintptr(v), nil
	}
	if n, err := strconv.ParseUint(s, 0, 64); err == nil {
		return uintptr(n), nil
	}
	return 0, fmt.Errorf("unknown name %q", s)
}

func opSocket(r *Result, a []string) error {
	d, err := lookup(domains, a[0])
	if err != nil {
		return err
	}
	t, err := lookup(types, a[1])
	if err != nil {
		return err
	}
	p, err := lookup(protos, a[2])
	if err != nil {
		return err
	}
	fd, _, e := unix.Syscall(unix.SYS_SOCKET, d, t|unix.SOCK_CLOEXEC, p)
	if e != 0 {
		return e
	}
	return unix.Close(int(fd))
}

func opSocketpair(r *Result, a []string) error {
	d, err := lookup(domains, a[0])
	if err != nil {
		return err
	}
	t, err := lookup(types, a[1])
	if err != nil {
		return err
	}
	var fds [2]int32
	_, _, e := unix.RawSyscall6(unix.SYS_SOCKETPAIR, d, t|unix.SOCK_CLOEXEC, 0, uintptr(unsafe.Pointer(&fds[0])), 0, 0)
	if e != 0 {
		return e
	}
	unix.Close(int(fds[0]))
	unix.Close(int(fds[1]))
	return nil
}

func unixAddr(s string) *unix.SockaddrUnix {
	if name, ok := strings.CutPrefix(s, "@"); ok {
		return &unix.SockaddrUnix{Name: "\x00" + name}
	}
	return &unix.SockaddrUnix{Name: s}
}

// opConnectUnix connects to a pathname or abstract socket. A path too long
// for sun_path (108 bytes) is reached through its directory: open it, then
// connect to /proc/self/fd/N/NAME.
func opConnectUnix(r *Result, a []string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return wrap("socket", err)
	}
	defer unix.Close(fd)
	p := a[0]
	if len(p) >= 108 && !strings.HasPrefix(p, "@") {
		dir, name := p, ""
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			dir, name = p[:i], p[i+1:]
		}
		dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return wrap("open socket dir", err)
		}
		defer unix.Close(dfd)
		p = "/proc/self/fd/" + strconv.Itoa(dfd) + "/" + name
	}
	return unix.Connect(fd, unixAddr(p))
}

func opListenAbstract(r *Result, a []string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return wrap("socket", err)
	}
	if err := unix.Bind(fd, unixAddr("@"+a[0])); err != nil {
		unix.Close(fd)
		return wrap("bind", err)
	}
	if err := unix.Listen(fd, 8); err != nil {
		unix.Close(fd)
		return wrap("listen", err)
	}
	kept = append(kept, fd)
	return nil
}

// inetAddr parses HOST:PORT into a sockaddr and its family.
func inetAddr(s string) (unix.Sockaddr, int, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return nil, 0, err
	}
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}, unix.AF_INET, nil
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}, unix.AF_INET6, nil
}

// opConnectTCP connects without blocking and waits for the answer. The
// 5-second bound is only a safety net against a silently dropped SYN; the
// tests never depend on it.
func opConnectTCP(r *Result, a []string) error {
	sa, fam, err := inetAddr(a[0])
	if err != nil {
		return err
	}
	fd, err := unix.Socket(fam, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return wrap("socket", err)
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, sa)
	if err == nil {
		return nil
	}
	if err != unix.EINPROGRESS {
		return err
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := unix.Poll(pfd, int(time.Until(deadline).Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return wrap("poll", err)
		}
		if n == 0 {
			return unix.ETIMEDOUT
		}
		break
	}
	soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return wrap("getsockopt", err)
	}
	return errnoErr(unix.Errno(soerr))
}

func udp(s string, send bool) error {
	sa, fam, err := inetAddr(s)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return wrap("socket", err)
	}
	defer unix.Close(fd)
	if send {
		return unix.Sendto(fd, []byte{0}, 0, sa)
	}
	return unix.Connect(fd, sa)
}

func opIfaces(r *Result, a []string) error {
	ifs, err := net.Interfaces()
	if err != nil {
		return unwrapPathErr(err)
	}
	names := []string{}
	addrs := []string{}
	for _, i := range ifs {
		names = append(names, i.Name)
		as, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range as {
			addrs = append(addrs, ad.String())
		}
	}
	r.set("names", names)
	r.set("addrs", addrs)
	return nil
}

// opHold tells a waiting test that the attempts before it are in place by
// writing to a FIFO, then keeps the process (and what it holds) alive
// until its stdin closes.
func opHold(r *Result, a []string) error {
	f, err := os.OpenFile(a[0], os.O_WRONLY, 0)
	if err != nil {
		return wrap("open fifo", unwrapPathErr(err))
	}
	if _, err := f.WriteString("ready\n"); err != nil {
		f.Close()
		return wrap("write fifo", unwrapPathErr(err))
	}
	f.Close()
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}
