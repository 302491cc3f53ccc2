package server

import (
	"context"
	"sync/atomic"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/enforce"
	"github.com/moat-sandbox/moat/netproxy"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// The network of a sandbox.
//
// Mode none (the default) leaves the sandbox loopback only. Mode proxy
// gives it the daemon's egress proxy (one netproxy.Proxy for every
// sandbox, one endpoint each) as its only way out; the endpoint decides
// every connection with the sandbox's policy at that moment (a reloaded
// file applies at once), an ask rule opens an approval and holds the
// connection, and every DNS answer, decision and finished connection is
// an audit event ("net.dns", "net.connect", "net.close"). Mode open is
// refused unless the managed policy sets open_network = true.

// netRequest checks a create's network against what a caller may ask:
// allow_domains are names only (IP addresses and CIDR ranges, which could
// reach the daemon's own networks, come only from its policy files).
func netRequest(n *api.Network) (sandbox.NetMode, []string, error) {
	if n == nil {
		return sandbox.NetNone, nil, nil
	}
	mode, err := sandbox.ParseNetMode(n.Mode)
	if err != nil {
		return "", nil, api.Errorf(api.CodeInvalidArgument, "network.mode: %q is not none, proxy or open", n.Mode)
	}
	if mode != sandbox.NetProxy && len(n.AllowDomains)+len(n.DenyDomains) > 0 {
		return "", nil, api.Errorf(api.CodeInvalidArgument, "network: allow_domains and deny_domains need mode proxy")
	}
	for _, d := range n.AllowDomains {
		addr, err := policy.NetEntryNamesAddress(d)
		if err != nil {
			return "", nil, api.Errorf(api.CodeInvalidArgument, "network.allow_domains: %v", err)
		}
		if addr {
			return "", nil, api.Errorf(api.CodeInvalidArgument, "network.allow_domains: %q: IP addresses and CIDR ranges are admitted only by the daemon's policy files (allow Net(cidr:...))", d)
		}
	}
	deny := make([]string, 0, len(n.DenyDomains))
	for _, d := range n.DenyDomains {
		rule, err := policy.NetAllowRule(d)
		if err != nil {
			return "", nil, api.Errorf(api.CodeInvalidArgument, "network.deny_domains: %v", err)
		}
		deny = append(deny, rule)
	}
	return mode, deny, nil
}

// attachNetwork puts the sandbox's network into spec once its policy is
// compiled: for mode proxy, an endpoint of the daemon's proxy that decides
// with pol. bind is filled in with the sandbox once it is registered.
func (s *Service) attachNetwork(mode sandbox.NetMode, pol *sandboxPolicy, spec *sandbox.Spec) (*netBinding, error) {
	if mode == sandbox.NetOpen && !pol.eff.OpenNetwork() {
		return nil, &api.Error{Code: api.CodePolicyDenied, Message: "network mode open is not permitted: the managed policy (" + s.cfg.PolicyManaged + ") does not set open_network = true"}
	}
	spec.Network = sandbox.Network{Mode: mode}
	if mode != sandbox.NetProxy {
		return nil, nil
	}
	b := &netBinding{}
	spec.Network.Egress = s.proxy.Endpoint(&enforce.NetPolicy{
		Current: func() *policy.Effective {
			id := ""
			if m := b.get(); m != nil {
				id = m.info.ID
			}
			eff, err := pol.effective(s.log, id)
			if err != nil {
				return pol.eff
			}
			return eff
		},
		Ask: func(ctx context.Context, d policy.Decision) (bool, string) {
			m := b.get()
			if m == nil {
				return false, "impossible (the sandbox is not registered yet)"
			}
			c := Caller{Tenant: m.tenant, Actor: "egress-proxy"}
			rule := ""
			if d.Rule != nil {
				rule = ruleWithSource(d.Rule.String(), d.Rule.Source())
			}
			info, granted := s.askApproval(ctx, c, m, "net.connect", d, d.Request.String(), rule, nil)
			switch {
			case granted:
				return true, "allowed always earlier"
			case info.State == api.ApprovalAllowed:
				return true, "approval " + info.ID + " allowed by " + info.AnsweredBy
			case info.State == api.ApprovalExpired:
				return false, "approval " + info.ID + " expired"
			}
			return false, "approval " + info.ID + " " + info.State
		},
	})
	return b, nil
}

// netBinding ties a proxy endpoint to its sandbox once the sandbox is
// registered (the endpoint exists before the runtime names the sandbox).
type netBinding struct {
	m atomic.Pointer[managed]
}

func (b *netBinding) get() *managed {
	if b == nil {
		return nil
	}
	return b.m.Load()
}

// proxyEvent records one event of the egress proxy in the audit tape and
// the metrics.
func (s *Service) proxyEvent(e netproxy.Event) {
	s.metrics.proxy.Inc(e.Kind, e.Decision)
	tenant := ""
	s.mu.Lock()
	if m := s.sandboxes[e.Sandbox]; m != nil {
		tenant = m.tenant
	}
	s.mu.Unlock()
	ev := audit.Event{Kind: "net." + e.Kind, Tenant: tenant, Actor: "egress-proxy", Sandbox: e.Sandbox, Rule: e.Rule,
		Request:    mustJSON(map[string]any{"proto": e.Proto, "host": e.Host, "port": e.Port}),
		DurationMs: e.Duration.Milliseconds()}
	switch e.Decision {
	case "allow":
		ev.Decision = audit.DecisionAllow
	case "deny":
		ev.Decision = audit.DecisionDeny
		ev.Error = e.Reason
	}
	res := map[string]any{}
	if len(e.Answers) > 0 {
		res["answers"] = e.Answers
	}
	if e.Addr != "" {
		res["addr"] = e.Addr
	}
	if e.Code != "" {
		res["code"] = e.Code
	}
	if e.Reason != "" {
		res["reason"] = e.Reason
	}
	if e.Kind == "close" {
		res["bytes_up"], res["bytes_down"] = e.BytesUp, e.BytesDown
	}
	if len(res) > 0 {
		ev.Result = mustJSON(res)
	}
	s.record(ev)
}
