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

// ---- a caller's network allowlist ----

// NetEntryPrefix returns the addresses an allowlist entry (as NetAllowRule
// takes it) names: its range for a CIDR entry, a single-address range for
// an IP address in any spelling inet_aton(3) accepts; ok is false for a
// host name or wildcard.
func NetEntryPrefix(entry string) (pf netip.Prefix, ok bool, err error) {
	text, err := NetAllowRule(entry)
	if err != nil {
		return netip.Prefix{}, false, err
	}
	p, err := parseNetPattern(strings.TrimSuffix(strings.TrimPrefix(text, "Net("), ")"))
	if err != nil {
		return netip.Prefix{}, false, err
	}
	switch {
	case p.cidr.IsValid():
		return p.cidr, true, nil
	case p.ip:
		a := netip.MustParseAddr(p.exact)
		return netip.PrefixFrom(a, a.BitLen()), true, nil
	}
	return netip.Prefix{}, false, nil
}

// CallerCIDRs are the address ranges the managed policy file lets a
// caller's allowlist name (its allow_cidr_entries), and that file's name.
func (e *Effective) CallerCIDRs() ([]netip.Prefix, string) {
	return append([]netip.Prefix(nil), e.callerCIDRs...), e.managedName
}

// PermitsCallerAddr reports whether the managed file's allow_cidr_entries
// cover every address of pf, a range a caller's allowlist entry names.
func (e *Effective) PermitsCallerAddr(pf netip.Prefix) bool {
	for _, c := range e.callerCIDRs {
		if c.Addr().Is4() == pf.Addr().Is4() && c.Bits() <= pf.Bits() && c.Contains(pf.Addr()) {
			return true
		}
	}
	return false
}

// NetDrop is an entry of a caller's allowlist that admits nothing: a deny
// rule of some layer covers everything it names (deny rules are decided
// first, so the entry can never widen the allowlist).
type NetDrop struct {
	Entry  string `json:"entry"`
	Rule   *Rule  `json:"rule"`
	Reason string `json:"reason"`
}

// CeilNetAllow splits a caller's allowlist entries into those the other
// layers leave room for and those a deny Net rule of any layer (the
// managed, project or user file, the sandbox's own rules) covers entirely.
// An entry a deny rule covers only in part (*.example.com with
// bad.example.com denied) is kept: the deny rule still refuses its part.
// Entries that do not parse are dropped with the parse error.
func (e *Effective) CeilNetAllow(entries []string) (kept []string, dropped []NetDrop) {
	for _, entry := range entries {
		text, err := NetAllowRule(entry)
		if err != nil {
			dropped = append(dropped, NetDrop{Entry: entry, Reason: err.Error()})
			continue
		}
		a, _ := parseNetPattern(strings.TrimSuffix(strings.TrimPrefix(text, "Net("), ")"))
		var by *bound
		for _, b := range e.rules[Net] {
			if b.r.Effect == Deny && b.r.net.covers(a) && (by == nil || b.order < by.order) {
				by = b
			}
		}
		if by == nil {
			kept = append(kept, entry)
			continue
		}
		dropped = append(dropped, NetDrop{Entry: entry, Rule: by.r,
			Reason: fmt.Sprintf("denied by %s (%s): the policy's ceiling refuses everything %q names", by.r, by.r.Source(), entry)})
	}
	return kept, dropped
}

// covers reports whether deny pattern p matches every host allow pattern
// a grants.
func (p *netPattern) covers(a *netPattern) bool {
	switch {
	case p.any:
		return true
	case a.any:
		return false
	case p.cidr.IsValid():
		switch {
		case a.cidr.IsValid():
			return a.cidr.Addr().Is4() == p.cidr.Addr().Is4() && p.cidr.Bits() <= a.cidr.Bits() && p.cidr.Contains(a.cidr.Addr())
		case a.ip:
			return p.containsAddr(netip.MustParseAddr(a.exact))
		}
		return false
	case p.suffix != "":
		switch {
		case a.suffix != "":
			return strings.HasSuffix(a.suffix, p.suffix)
		case a.exact != "" && !a.ip:
			return strings.HasSuffix(a.exact, p.suffix)
		}
		return false
	case p.ip:
		switch {
		case a.ip:
			return a.exact == p.exact
		case a.cidr.IsValid():
			return a.cidr.IsSingleIP() && a.cidr.Addr().String() == p.exact
		}
		return false
	}
	return a.exact != "" && !a.ip && a.exact == p.exact
}

// WithNetAllow returns the policy with the caller's network allowlist
// (Context.NetAllow) replaced by entries. The receiver is unchanged.
func (e *Effective) WithNetAllow(entries []string) (*Effective, error) {
	for _, n := range entries {
		if _, err := NetAllowRule(n); err != nil {
			return nil, fmt.Errorf("policy: network allowlist: %w", err)
		}
	}
	n := *e
	n.ctx.NetAllow = append([]string(nil), entries...)
	n.files = append([]*File(nil), e.files...)
	for k := range n.rules {
		n.rules[k] = e.rules[k][:len(e.rules[k]):len(e.rules[k])]
	}
	n.wgrants = e.wgrants[:len(e.wgrants):len(e.wgrants)]
	caller := func(b *bound) bool { return b.r.Layer == Call && b.r.File == callerAllowlist }
	n.rules[Net] = nil
	for _, b := range e.rules[Net] {
		if !caller(b) {
			n.rules[Net] = append(n.rules[Net], b)
		}
	}
	n.ngrants = nil
	for _, b := range e.ngrants {
		if !caller(b) {
			n.ngrants = append(n.ngrants, b)
		}
	}
	for i, entry := range entries {
		text, _ := NetAllowRule(entry)
		r, err := ParseRule(Allow, text)
		if err != nil {
			return nil, err
		}
		r.Layer, r.File, r.Index, r.seq = Call, callerAllowlist, i, i
		b := &bound{r: r, order: n.order}
		n.order++
		n.rules[Net] = append(n.rules[Net], b)
		n.ngrants = append(n.ngrants, b)
	}
	n.finish()
	return &n, nil
}
