package compile

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/netproxy"
	"github.com/moat-sandbox/moat/policy"
)

// NetPolicy is a sandbox's policy as its egress proxy sees it
// (netproxy.Policy): every connection and request is decided by the
// policy in force at that moment, so an edited policy file applies to
// running sandboxes at once.
type NetPolicy struct {
	// Current returns the sandbox's policy now (a hot-reloaded one).
	Current func() *policy.Effective
	// Ask answers an ask decision, holding the connection meanwhile; it
	// returns whether the connection may go ahead and how the approval
	// was answered, a phrase that completes the decision's reason on its
	// own ("approval ap_1 allowed by alice", "refused on the terminal").
	// Nil denies every ask.
	Ask func(ctx context.Context, d policy.Decision) (bool, string)
	// InternalHint, when set, says what admits an internal address
	// (loopback, private, metadata…) to the caller of this sandbox, in
	// its own terms (moat run: --allow-domain); it replaces the policy's
	// wording, which speaks of allow Net(cidr:…) rules.
	InternalHint func(addr string) string

	// approved holds raw IP destinations whose ask Decide has just
	// approved, so that the address check of the same connection does
	// not refuse them (netip.Addr → time.Time of the approval).
	approved sync.Map
}

// approvalGrace is how long an approved raw IP destination stays
// admitted by Addr: the connection it was asked for dials within it.
const approvalGrace = time.Minute

var _ netproxy.Policy = (*NetPolicy)(nil)

// Decide judges a destination host and port.
func (p *NetPolicy) Decide(ctx context.Context, host string, port int) netproxy.Verdict {
	d := p.Current().Decide(policy.NetHost(net.JoinHostPort(host, strconv.Itoa(port))))
	v := netproxy.Verdict{Allow: d.Effect == policy.Allow, Reason: d.Reason, Rule: ruleText(d.Rule)}
	if d.Effect != policy.Ask {
		return v
	}
	if p.Ask == nil {
		v.Reason = d.Reason + "; no one can answer an approval here: denied"
		return v
	}
	ok, how := p.Ask(ctx, d)
	v.Allow = ok
	if ok {
		if a, err := netip.ParseAddr(host); err == nil {
			p.approved.Store(a.Unmap(), time.Now())
		}
		v.Reason = d.Reason + "; " + how
	} else {
		v.Reason = d.Reason + "; " + how
		if !strings.HasSuffix(how, "denied") {
			v.Reason += ": denied"
		}
	}
	return v
}

// Addr judges an address the proxy is about to dial.
func (p *NetPolicy) Addr(a netip.Addr, special bool) netproxy.Verdict {
	d := p.Current().DecideAddr(a, special)
	v := netproxy.Verdict{Allow: d.Effect == policy.Allow, Code: "blocked-address", Reason: d.Reason, Rule: ruleText(d.Rule)}
	if d.Effect == policy.Deny && p.InternalHint != nil && d.Rule != nil && d.Rule.Layer == policy.Builtin && d.Rule.Text == policy.InternalAddressRule {
		ip := a.Unmap().String()
		v.Reason = "denied: address " + ip + " is internal (loopback, private, link-local, metadata or the host's own); " + p.InternalHint(ip)
	}
	if d.Effect == policy.Ask {
		// Only a raw IP destination that its own ask approved gets
		// through; a name's answer in an ask range cannot be held for
		// an approval of the address, so it is refused.
		if t, ok := p.approved.Load(a.Unmap()); ok && time.Since(t.(time.Time)) < approvalGrace {
			v.Allow, v.Reason = true, d.Reason+"; approved for this destination"
		} else {
			v.Reason = "denied: address " + a.Unmap().String() + " is covered by " + ruleText(d.Rule) +
				"; an answer of a name lookup cannot wait for an approval (write the ask rule for the name)"
		}
	}
	return v
}

func ruleText(r *policy.Rule) string {
	if r == nil {
		return ""
	}
	if r.Layer == policy.Builtin {
		return r.String()
	}
	return r.String() + " (" + r.Source() + ")"
}
