package netproxy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// class is one row of the table of internal addresses.
type class struct {
	prefix netip.Prefix
	name   string
}

// specialTable lists the internal ranges, most specific first.
var specialTable = []class{
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("2001::/32"), "teredo"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "nat64-local"},
	{netip.MustParsePrefix("::/96"), "ipv4-compatible"},
}

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// Special reports whether a is an internal address that a sandbox must not
// reach unless its policy names it explicitly, and names its class:
// "unspecified", "loopback", "private", "link-local", "metadata" (cloud
// instance metadata: 169.254.169.254 and fd00:ec2::254), "cgnat",
// "multicast", "broadcast", "reserved", "benchmarking", "site-local",
// "teredo", "nat64-local" or "ipv4-compatible". An IPv4-mapped IPv6 address
// is unmapped first; for NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses
// the embedded IPv4 address is classified too, giving for example
// "nat64/loopback". Documentation ranges (192.0.2.0/24 and the like) are
// ordinary. The host's own addresses are a separate check made by the
// [Proxy]. The class is "" when a is not special.
func Special(a netip.Addr) (bool, string) {
	if !a.IsValid() {
		return true, "invalid"
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64Prefix.Contains(a):
			if ok, name := Special(netip.AddrFrom4([4]byte(b[12:16]))); ok {
				return true, "nat64/" + name
			}
			return false, ""
		case sixToFour.Contains(a):
			if ok, name := Special(netip.AddrFrom4([4]byte(b[2:6]))); ok {
				return true, "6to4/" + name
			}
			return false, ""
		}
	}
	for _, c := range specialTable {
		if c.prefix.Contains(a) {
			return true, c.name
		}
	}
	return false, ""
}

// hostAddrTTL is how long the host's own addresses are cached.
const hostAddrTTL = time.Second

// classify reports whether a is special, either by the table or because it
// is one of the host's own addresses.
func (p *Proxy) classify(a netip.Addr) (bool, string) {
	a = a.Unmap().WithZone("")
	if ok, name := Special(a); ok {
		return true, name
	}
	set, err := p.hostAddrs()
	if err != nil {
		// Fail closed: without the host's addresses, every address is
		// treated as possibly the host's own.
		return true, "host (host addresses unknown)"
	}
	if _, ok := set[a]; ok {
		return true, "host"
	}
	return false, ""
}

// hostAddrs returns the host's own addresses, cached for hostAddrTTL. After a
// failure the last good answer is kept.
func (p *Proxy) hostAddrs() (map[netip.Addr]struct{}, error) {
	p.hostMu.Lock()
	defer p.hostMu.Unlock()
	if p.hostSet != nil && time.Since(p.hostAt) < hostAddrTTL {
		return p.hostSet, nil
	}
	addrs, err := p.cfg.HostAddrs()
	if err != nil {
		p.log.Warn("netproxy: cannot list the host's addresses", "err", err)
		if p.hostSet != nil {
			return p.hostSet, nil
		}
		return nil, fmt.Errorf("netproxy: host addresses: %w", err)
	}
	set := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		set[a.Unmap().WithZone("")] = struct{}{}
	}
	p.hostSet, p.hostAt = set, time.Now()
	return set, nil
}

// interfaceAddrs is the default Config.HostAddrs.
func interfaceAddrs() ([]netip.Addr, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("interface addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(ifas))
	for _, ifa := range ifas {
		var ip net.IP
		switch v := ifa.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}

// normalizeHost lower-cases h, drops a trailing dot and brackets, and puts an
// IP literal in canonical form (unmapped). ip is valid when h is a literal.
func normalizeHost(h string) (host string, ip netip.Addr, err error) {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if h == "" {
		return "", netip.Addr{}, fmt.Errorf("empty host")
	}
	if a, perr := netip.ParseAddr(h); perr == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("host %q: zoned addresses are not allowed", h)
		}
		a = a.Unmap()
		return a.String(), a, nil
	}
	if len(h) > 253 {
		return "", netip.Addr{}, fmt.Errorf("host name too long")
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", netip.Addr{}, fmt.Errorf("host %q: invalid character %q", h, c)
		}
	}
	if strings.HasPrefix(h, ".") || strings.Contains(h, "..") {
		return "", netip.Addr{}, fmt.Errorf("host %q: empty label", h)
	}
	// A numeric last label (127.1, 0x7f000001, 2130706433) is an IPv4
	// address in a form inet_aton accepts: the policy judges it as that
	// address, so the proxy must not resolve it as a name. Only the
	// canonical dotted form is taken.
	last := h[strings.LastIndexByte(h, '.')+1:]
	if strings.HasPrefix(last, "0x") || strings.Trim(last, "0123456789") == "" {
		return "", netip.Addr{}, fmt.Errorf("host %q: a numeric host must be a canonical IP address (a.b.c.d)", h)
	}
	return h, netip.Addr{}, nil
}

// splitHostPort splits "host:port" (port defaulting to def when absent and
// def > 0) and normalizes the host.
func splitHostPort(hp string, def int) (host string, ip netip.Addr, port int, err error) {
	h, p, serr := net.SplitHostPort(hp)
	if serr != nil {
		if def <= 0 {
			return "", netip.Addr{}, 0, fmt.Errorf("%q: host:port required", hp)
		}
		h, p = hp, strconv.Itoa(def)
	}
	port, perr := strconv.Atoi(p)
	if perr != nil || port < 1 || port > 65535 {
		return "", netip.Addr{}, 0, fmt.Errorf("%q: invalid port", hp)
	}
	host, ip, err = normalizeHost(h)
	if err != nil {
		return "", netip.Addr{}, 0, err
	}
	return host, ip, port, nil
}

// sameHostPort reports whether two authorities name the same destination:
// case-insensitive, trailing dot ignored, a missing port meaning def.
func sameHostPort(a, b string, def int) bool {
	ha, _, pa, err := splitHostPort(a, def)
	if err != nil {
		return false
	}
	hb, _, pb, err := splitHostPort(b, def)
	if err != nil {
		return false
	}
	return ha == hb && pa == pb
}
