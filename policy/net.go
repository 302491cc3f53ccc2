package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// netPattern is a compiled Net pattern: domain:NAME, domain:*.NAME,
// domain:* or cidr:PREFIX.
type netPattern struct {
	any    bool         // domain:*
	suffix string       // ".github.com" for domain:*.github.com
	exact  string       // "github.com", or a canonical IP address
	ip     bool         // exact is an IP address
	cidr   netip.Prefix // cidr:10.0.0.0/8 (valid only for a cidr pattern)
}

func parseNetPattern(p string) (*netPattern, error) {
	const pre = "domain:"
	if rest, ok := strings.CutPrefix(p, "cidr:"); ok {
		pf, err := parseCIDR(strings.TrimSpace(rest))
		if err != nil {
			return nil, err
		}
		return &netPattern{cidr: pf}, nil
	}
	if !strings.HasPrefix(p, pre) {
		return nil, errors.New("want domain:NAME, domain:*.NAME, domain:* or cidr:PREFIX")
	}
	name := strings.TrimSpace(p[len(pre):])
	if name == "*" {
		return &netPattern{any: true}, nil
	}
	if strings.HasPrefix(name, "*.") {
		h, ip, err := normHost(name[2:])
		if err != nil {
			return nil, err
		}
		if ip {
			return nil, errors.New("*. cannot precede an IP address")
		}
		return &netPattern{suffix: "." + h}, nil
	}
	if strings.Contains(name, "*") {
		return nil, errors.New("'*' is only allowed as domain:* or a leading *. (domain:*.example.com)")
	}
	host, port, ok := splitPort(name)
	if !ok {
		return nil, fmt.Errorf("bad host %q", name)
	}
	if port != "" || strings.HasSuffix(name, ":") {
		return nil, errors.New("ports are not part of Net rules; write the host alone")
	}
	h, ip, err := normHost(host)
	if err != nil {
		return nil, err
	}
	return &netPattern{exact: h, ip: ip}, nil
}

// parseCIDR reads "10.0.0.0/8", "fd00::/8" or a single address
// ("127.0.0.1" is 127.0.0.1/32). Host bits must be zero; IPv4-mapped IPv6
// prefixes are refused (write the IPv4 form).
func parseCIDR(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("bad cidr %q: want an address or ADDRESS/BITS", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	pf, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("bad cidr %q: want ADDRESS/BITS, e.g. 10.0.0.0/8", s)
	}
	if pf.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("bad cidr %q: write IPv4 prefixes in IPv4 form", s)
	}
	if pf.Masked() != pf {
		return netip.Prefix{}, fmt.Errorf("bad cidr %q: host bits are set (did you mean %s?)", s, pf.Masked())
	}
	return pf, nil
}

// containsAddr reports whether a cidr pattern covers a, or an IP pattern
// (domain:10.0.0.5) names it.
func (p *netPattern) containsAddr(a netip.Addr) bool {
	if p.ip {
		return p.exact == a.Unmap().String()
	}
	return p.cidr.IsValid() && p.cidr.Contains(a.Unmap())
}

// match reports whether the normalized host matches. Raw IP addresses are
// matched by domain:*, by a rule naming that address and by a cidr rule
// covering it; a cidr rule matches no name.
func (p *netPattern) match(host string, ip bool) bool {
	switch {
	case p.cidr.IsValid():
		if !ip {
			return false
		}
		a, err := netip.ParseAddr(host)
		return err == nil && p.containsAddr(a)
	case p.any:
		return true
	case p.suffix != "":
		return !ip && strings.HasSuffix(host, p.suffix)
	default:
		return host == p.exact
	}
}

// grants reports whether the pattern puts host on the allowlist: like
// match, but domain:* does not admit raw IP addresses.
func (p *netPattern) grants(host string, ip bool) bool {
	if p.any && ip {
		return false
	}
	return p.match(host, ip)
}

func (p *netPattern) String() string {
	switch {
	case p.cidr.IsValid():
		return "cidr:" + p.cidr.String()
	case p.any:
		return "*"
	case p.suffix != "":
		return "*" + p.suffix
	default:
		return p.exact
	}
}

// splitPort splits "host:port", "[v6]:port" and "[v6]"; a bare IPv6
// address (several colons, no brackets) has no port.
func splitPort(s string) (host, port string, ok bool) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false
		}
		host, rest := s[1:end], s[end+1:]
		if rest == "" {
			return host, "", true
		}
		if !strings.HasPrefix(rest, ":") {
			return "", "", false
		}
		return host, rest[1:], true
	}
	if strings.Count(s, ":") == 1 {
		i := strings.IndexByte(s, ':')
		return s[:i], s[i+1:], true
	}
	return s, "", true
}

// parseHostPort normalizes a request's host, with an optional port.
func parseHostPort(s string) (host string, ip bool, err error) {
	h, port, ok := splitPort(strings.TrimSpace(s))
	if !ok {
		return "", false, fmt.Errorf("bad host %q", s)
	}
	if port != "" || strings.HasSuffix(s, ":") {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return "", false, fmt.Errorf("bad port in %q", s)
		}
	}
	return normHost(h)
}

// normHost lower-cases a host name, drops one trailing dot and checks it;
// an IP address (IPv6, or IPv4 in any form inet_aton accepts, such as
// 0x7f.1) becomes its canonical form.
func normHost(h string) (string, bool, error) {
	if h == "" {
		return "", false, errors.New("empty host")
	}
	for i := 0; i < len(h); i++ {
		if h[i] >= 0x80 {
			return "", false, errors.New("non-ASCII host name: use its punycode form (xn--...)")
		}
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		if err != nil || a.Zone() != "" {
			return "", false, fmt.Errorf("bad IPv6 address %q", h)
		}
		return a.Unmap().String(), true, nil
	}
	if len(h) > 253 || h == "" {
		return "", false, fmt.Errorf("bad host name %q", h)
	}
	labels := strings.Split(h, ".")
	last := labels[len(labels)-1]
	if isNumericLabel(last) {
		a, ok := parseInetAton(h)
		if !ok {
			return "", false, fmt.Errorf("bad host name or IPv4 address %q", h)
		}
		return a, true, nil
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", false, fmt.Errorf("bad host name %q", h)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", false, fmt.Errorf("bad character %q in host name %q", c, h)
			}
		}
	}
	return h, false, nil
}

func isNumericLabel(l string) bool {
	if l == "" {
		return false
	}
	if strings.HasPrefix(l, "0x") {
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

// parseInetAton accepts what inet_aton(3) accepts: 1 to 4 parts, each
// decimal, octal (leading 0) or hex (0x); the last part fills the
// remaining bytes.
func parseInetAton(s string) (string, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return "", false
	}
	var vals []uint64
	for _, p := range parts {
		base := 10
		switch {
		case strings.HasPrefix(p, "0x"):
			base, p = 16, p[2:]
			if p == "" {
				p = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		if p == "" {
			return "", false
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return "", false
		}
		vals = append(vals, v)
	}
	var ip uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 255 {
			return "", false
		}
		ip |= v << (8 * (3 - i))
	}
	lastBits := 8 * (5 - len(vals))
	last := vals[len(vals)-1]
	if lastBits < 64 && last>>lastBits != 0 {
		return "", false
	}
	ip |= last
	return fmt.Sprintf("%d.%d.%d.%d", ip>>24&255, ip>>16&255, ip>>8&255, ip&255), true
}
