package server

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/moat-sandbox/moat/admit"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/netproxy"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/compile"
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
//
// A caller's allowlist (a create's network, sandbox.network) names hosts
// and wildcards; an IP address or CIDR range only inside the managed
// file's allow_cidr_entries. Entries a deny rule of any layer covers are
// dropped and reported. sandbox.network replaces a running sandbox's
// network: the policy first (the endpoint decides the next connection
// with it), then the runtime for none <-> proxy (the listener is added
// inside the sandbox's namespace, or closed with its connections); open
// is fixed at the create (it has no network namespace to return to).

// netReq is a network a caller asks for (a create's network, a
// sandbox.network change), checked for form: the mode, the lists as
// given, and deny_domains as per-call deny rules.
type netReq = admit.Network

// netDenyFile names the rules made of deny_domains in their source
// ("per-call network.deny_domains deny[0]").
const netDenyFile = "network.deny_domains"

// netRequest checks a create's network.
func netRequest(n *api.Network) (*netReq, error) {
	if n == nil {
		return &netReq{Mode: sandbox.NetNone}, nil
	}
	return parseNetReq("network.", n.Mode, n.AllowDomains, n.DenyDomains)
}

// parseNetReq checks a network's form (admit.ParseNetwork; 400
// invalid_argument): the mode, lists only with mode proxy, every entry a
// name, wildcard, address or range. Whether the policy admits it is
// checkNetAllow's.
func parseNetReq(field, modeText string, allow, deny []string) (*netReq, error) {
	r, err := admit.ParseNetwork(modeText, allow, deny, netDenyFile)
	var ne *admit.NetError
	if err == nil || !errors.As(err, &ne) {
		return r, err
	}
	switch ne.List {
	case admit.ListMode:
		return nil, api.Errorf(api.CodeInvalidArgument, "%smode: %q is not none, proxy or open", field, modeText)
	case admit.ListBoth:
		return nil, api.Errorf(api.CodeInvalidArgument, "%sallow_domains and %sdeny_domains need mode proxy", field, field)
	case admit.ListAllow:
		return nil, api.Errorf(api.CodeInvalidArgument, "%sallow_domains: %v", field, ne.Err)
	}
	return nil, api.Errorf(api.CodeInvalidArgument, "%sdeny_domains: %v", field, ne.Err)
}

// checkNetAllow bounds a requested allowlist by the policy eff (the
// sandbox's policy with that allowlist; admit.BoundAllow): an IP address
// or CIDR range is accepted only inside the managed file's
// allow_cidr_entries (else 403 policy_denied naming that key), since it
// could reach the daemon's own networks; an entry a deny rule of any
// layer covers entirely is dropped (reported, and refused by that rule).
// managed names the managed file. The answer is the network as the
// sandbox then has it.
func checkNetAllow(eff *policy.Effective, field string, r *netReq, managed string) (*api.Network, error) {
	kept, dropped, err := admit.BoundAllow(eff, r.Allow)
	var ne *admit.NetError
	if errors.As(err, &ne) {
		return nil, api.Errorf(api.CodeInvalidArgument, "%sallow_domains: %v", field, ne.Err)
	}
	var ae *admit.AddrError
	if errors.As(err, &ae) {
		rule := "allow_cidr_entries (not set)"
		if len(ae.Permitted) > 0 {
			rule = "allow_cidr_entries = " + prefixList(ae.Permitted)
		}
		return nil, &api.Error{Code: api.CodePolicyDenied, Rule: rule, Source: "managed " + managed,
			Message: fmt.Sprintf("%sallow_domains: %q names addresses (%s), which a caller may ask for only inside the managed policy's allow_cidr_entries (%s): its %s",
				field, ae.Entry, ae.Prefix, managed, rule)}
	}
	if err != nil {
		return nil, err
	}
	n := &api.Network{Mode: string(r.Mode), AllowDomains: kept, DenyDomains: r.Deny}
	for _, d := range dropped {
		nd := api.NetworkDrop{Entry: d.Entry, Reason: d.Reason}
		if d.Rule != nil {
			nd.Rule, nd.Source = d.Rule.String(), d.Rule.Source()
		}
		n.Dropped = append(n.Dropped, nd)
	}
	return n, nil
}

func prefixList(ps []netip.Prefix) string {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = strconv.Quote(p.String())
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// attachNetwork puts the sandbox's network into spec once its policy is
// compiled: for mode proxy, an endpoint of the daemon's proxy that decides
// with pol. bind is filled in with the sandbox once it is registered.
func (s *Service) attachNetwork(mode sandbox.NetMode, pol *sandboxPolicy, spec *sandbox.Spec) (*netBinding, error) {
	if err := admit.PermitOpen(mode, pol.current()); err != nil {
		return nil, &api.Error{Code: api.CodePolicyDenied, Message: "network mode open is not permitted: the managed policy (" + s.cfg.PolicyManaged + ") does not set open_network = true"}
	}
	if mode != sandbox.NetProxy {
		admit.Attach(spec, mode, nil, nil)
		return nil, nil
	}
	b := &netBinding{}
	b.ep = admit.Attach(spec, mode, s.proxy, &compile.NetPolicy{
		Current: func() *policy.Effective {
			id := ""
			if m := b.get(); m != nil {
				id = m.info.ID
			}
			eff, err := pol.effective(s.log, id)
			if err != nil {
				return pol.current()
			}
			return eff
		},
		Ask: func(ctx context.Context, d policy.Decision) (bool, string) {
			m := b.get()
			if m == nil {
				return false, "no approval possible (the sandbox is not registered yet)"
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
	m  atomic.Pointer[managed]
	ep *netproxy.Endpoint
}

func (b *netBinding) get() *managed {
	if b == nil {
		return nil
	}
	return b.m.Load()
}

// setNetwork is sandbox.network: it replaces a running sandbox's network;
// the call's audit record keeps the change (previous and new network).
func (s *Service) setNetwork(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.SetNetwork](in)
	if err != nil {
		return nil, err
	}
	ev := &in.rec.ev
	ev.Request = mustJSON(map[string]any{"mode": req.Mode, "allow_domains": req.AllowDomains, "deny_domains": req.DenyDomains})
	prev, out, err := s.changeNetwork(ctx, c, req)
	res := map[string]any{}
	if prev != nil {
		res["previous"] = prev
	}
	if err != nil {
		ae := apiError(err).(*api.Error)
		ev.Rule = ruleWithSource(ae.Rule, ae.Source)
	} else {
		res["network"] = out
	}
	if len(res) > 0 {
		ev.Result = mustJSON(res)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// netChanger is a runtime sandbox whose network can change while it
// runs (runtime/linux): AttachNetwork none -> proxy, DetachNetwork
// proxy -> none.
type netChanger interface {
	AttachNetwork(n sandbox.Network) error
	DetachNetwork() error
}

// changeNetwork applies req to its sandbox; prev is the network before
// (nil when the sandbox was not found).
func (s *Service) changeNetwork(ctx context.Context, c Caller, req *api.SetNetwork) (prev, out *api.Network, err error) {
	m, done, err := s.use(c, req.Sandbox)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	// rootMu: one change at a time, and none during a restore (which
	// makes a new runtime instance with the sandbox's network).
	m.rootMu.Lock()
	defer m.rootMu.Unlock()
	m.mu.Lock()
	cur := m.netMode
	before := api.Network{Mode: string(cur)}
	if m.info.Network != nil {
		before = *m.info.Network
	}
	m.mu.Unlock()
	prev = &before
	modeText := req.Mode
	if modeText == "" {
		modeText = string(cur)
	}
	nr, err := parseNetReq("", modeText, req.AllowDomains, req.DenyDomains)
	if err != nil {
		return prev, nil, err
	}
	if (nr.Mode == sandbox.NetOpen) != (cur == sandbox.NetOpen) {
		if cur == sandbox.NetOpen {
			return prev, nil, api.Errorf(api.CodeConflict, "sandbox %s was created in network mode open: it shares the host's network namespace and cannot leave it (create a new sandbox)", m.info.ID)
		}
		return prev, nil, api.Errorf(api.CodeConflict, "network mode open cannot be entered after the create: sandbox %s has a network namespace of its own (mode open needs a sandbox created with it, where the managed policy sets open_network = true)", m.info.ID)
	}
	base, eff, err := m.pol.withNetwork(s.log, m.info.ID, nr.Allow, nr.Rules)
	if err != nil {
		return prev, nil, err
	}
	next, err := checkNetAllow(eff, "", nr, s.cfg.PolicyManaged)
	if err != nil {
		return prev, nil, err
	}
	oldAllow, oldRules := m.pol.network()
	sb := m.box()
	switch {
	case cur == sandbox.NetNone && nr.Mode == sandbox.NetProxy:
		nc, ok := sb.(netChanger)
		if !ok {
			return prev, nil, api.Errorf(api.CodeUnimplemented, "this runtime cannot change a running sandbox's network")
		}
		// The policy first: the listener's first connection is
		// decided by it.
		m.pol.setNetwork(base, eff, nr.Allow, nr.Rules)
		var spec sandbox.Spec
		bind, err := s.attachNetwork(sandbox.NetProxy, m.pol, &spec)
		if err == nil {
			bind.m.Store(m)
			if err = nc.AttachNetwork(spec.Network); err != nil {
				_ = bind.ep.Close()
			}
		}
		if err != nil {
			m.pol.restoreNetwork(s.log, m.info.ID, oldAllow, oldRules)
			return prev, nil, err
		}
		m.netb = bind
	case cur == sandbox.NetProxy && nr.Mode == sandbox.NetNone:
		nc, ok := sb.(netChanger)
		if !ok {
			return prev, nil, api.Errorf(api.CodeUnimplemented, "this runtime cannot change a running sandbox's network")
		}
		if err := nc.DetachNetwork(); err != nil {
			return prev, nil, err
		}
		m.netb = nil
		m.pol.setNetwork(base, eff, nr.Allow, nr.Rules)
	default:
		m.pol.setNetwork(base, eff, nr.Allow, nr.Rules)
		if cur == sandbox.NetProxy && m.netb != nil && narrows(oldAllow, nr.Allow, oldRules, nr.Rules) {
			// Tunnels opened under the old policy end; their clients
			// connect again and are judged by the new one.
			m.netb.ep.CloseConnections()
		}
	}
	m.mu.Lock()
	m.netMode = nr.Mode
	m.info.Network = next
	m.info.Enforcement = sandboxEnforcement(sb, s.cfg.Runtime)
	m.mu.Unlock()
	return prev, next, nil
}

// narrows reports whether a change of allowlist and deny rules may refuse
// what the old ones admitted: an allow entry removed or a deny rule added.
func narrows(oldAllow, newAllow []string, oldDeny, newDeny *policy.File) bool {
	for _, a := range oldAllow {
		if !slices.Contains(newAllow, a) {
			return true
		}
	}
	var before []string
	if oldDeny != nil {
		for _, r := range oldDeny.Rules {
			before = append(before, r.String())
		}
	}
	if newDeny != nil {
		for _, r := range newDeny.Rules {
			if !slices.Contains(before, r.String()) {
				return true
			}
		}
	}
	return false
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
