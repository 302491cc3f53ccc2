package admit

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/moat-sandbox/moat/netproxy"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/compile"
	"github.com/moat-sandbox/moat/sandbox"
)

// Network is a network a caller asks for, checked for form.
type Network struct {
	Mode  sandbox.NetMode
	Allow []string     // the allowlist as given
	Deny  []string     // the denylist as given
	Rules *policy.File // Deny as per-call deny rules, or nil
}

// The lists of a network, as a NetError names them.
const (
	ListMode  = "mode"
	ListBoth  = "lists" // an allowlist or denylist without mode proxy
	ListAllow = "allow"
	ListDeny  = "deny"
)

// NetError is a network asked for in a form that means nothing: an
// unknown mode, lists without mode proxy, an entry that does not parse.
type NetError struct {
	List string // ListMode, ListBoth, ListAllow or ListDeny
	Err  error
}

func (e *NetError) Error() string { return e.List + ": " + e.Err.Error() }
func (e *NetError) Unwrap() error { return e.Err }

// ErrListsNeedProxy: an allowlist or denylist filters only through the
// egress proxy.
var ErrListsNeedProxy = errors.New("allow and deny lists need network mode proxy")

// ErrOpenNetwork: mode open shares the host's network, which only the
// operator's managed policy gives (open_network = true).
var ErrOpenNetwork = errors.New("network mode open is not permitted: the managed policy does not set open_network = true")

// ListsFit reports whether a mode can take an allowlist and a denylist:
// only mode proxy filters.
func ListsFit(mode sandbox.NetMode, allow, deny []string) bool {
	return mode == sandbox.NetProxy || len(allow)+len(deny) == 0
}

// ParseNetwork checks a network's form: the mode, lists only with mode
// proxy, every entry a name, wildcard, address or range. The denylist
// becomes deny rules named denyName in their source (as Rules). Errors
// are *NetError. Whether the policy admits the network is PermitOpen's
// and BoundAllow's.
func ParseNetwork(modeText string, allow, deny []string, denyName string) (*Network, error) {
	mode, err := sandbox.ParseNetMode(modeText)
	if err != nil {
		return nil, &NetError{List: ListMode, Err: err}
	}
	if !ListsFit(mode, allow, deny) {
		return nil, &NetError{List: ListBoth, Err: ErrListsNeedProxy}
	}
	n := &Network{Mode: mode, Allow: allow, Deny: deny}
	for _, d := range allow {
		if _, err := policy.NetAllowRule(d); err != nil {
			return nil, &NetError{List: ListAllow, Err: err}
		}
	}
	if len(deny) == 0 {
		return n, nil
	}
	texts, err := DenyRules(deny)
	if err != nil {
		return nil, &NetError{List: ListDeny, Err: err}
	}
	if n.Rules, err = Rules(policy.CallRules{Deny: texts}, denyName); err != nil {
		return nil, &NetError{List: ListDeny, Err: err}
	}
	return n, nil
}

// DenyRules turns denylist entries (moat run --deny-domain, a network's
// deny_domains) into the texts of deny rules; the error is the first bad
// entry's.
func DenyRules(entries []string) ([]string, error) {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		r, err := policy.NetAllowRule(e)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// PermitOpen refuses mode open (ErrOpenNetwork) unless eff's managed
// file sets open_network = true.
func PermitOpen(mode sandbox.NetMode, eff *policy.Effective) error {
	if mode == sandbox.NetOpen && !eff.OpenNetwork() {
		return ErrOpenNetwork
	}
	return nil
}

// AddrError is an allowlist entry naming addresses outside the managed
// file's allow_cidr_entries.
type AddrError struct {
	Entry     string
	Prefix    netip.Prefix   // the addresses it names
	Permitted []netip.Prefix // allow_cidr_entries
}

func (e *AddrError) Error() string {
	return fmt.Sprintf("%q names addresses (%s) outside the managed policy's allow_cidr_entries", e.Entry, e.Prefix)
}

// BoundAllow bounds a caller's allowlist by eff (the policy with that
// allowlist): an IP address or CIDR range is accepted only inside the
// managed file's allow_cidr_entries (else an *AddrError), since it could
// reach the daemon's own networks; an entry a deny rule of any layer
// covers entirely is dropped. An entry that does not parse is a
// *NetError.
func BoundAllow(eff *policy.Effective, allow []string) (kept []string, dropped []policy.NetDrop, err error) {
	permitted, _ := eff.CallerCIDRs()
	for _, d := range allow {
		pf, isAddr, err := policy.NetEntryPrefix(d)
		if err != nil {
			return nil, nil, &NetError{List: ListAllow, Err: err}
		}
		if !isAddr || eff.PermitsCallerAddr(pf) {
			continue
		}
		return nil, nil, &AddrError{Entry: d, Prefix: pf, Permitted: permitted}
	}
	kept, dropped = eff.CeilNetAllow(allow)
	return kept, dropped, nil
}

// Attach puts the network of mode into spec. For mode proxy it makes an
// endpoint of px that decides every connection with np, the spec's
// egress, and returns it (nil for the other modes, where px may be nil);
// closing it is the caller's.
func Attach(spec *sandbox.Spec, mode sandbox.NetMode, px *netproxy.Proxy, np *compile.NetPolicy) *netproxy.Endpoint {
	spec.Network = sandbox.Network{Mode: mode}
	if mode != sandbox.NetProxy {
		return nil
	}
	ep := px.Endpoint(np)
	spec.Network.Egress = ep
	return ep
}
