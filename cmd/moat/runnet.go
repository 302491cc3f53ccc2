package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/moat-sandbox/moat/admit"
	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/netproxy"
	"github.com/moat-sandbox/moat/output"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/compile"
	"github.com/moat-sandbox/moat/sandbox"
)

// maxRunNetEvents bounds the events a --json result lists; the counts
// cover all of them.
const maxRunNetEvents = 256

// runNetwork is the "network" object of moat run's --json result: the
// mode, the allowlist asked for, and what the egress proxy did.
type runNetwork struct {
	Mode  sandbox.NetMode `json:"mode"`
	Allow []string        `json:"allow_domains,omitempty"`
	Deny  []string        `json:"deny_domains,omitempty"`
	// Proxy is the proxy's address inside the sandbox (mode proxy).
	Proxy string `json:"proxy,omitempty"`
	// Allowed and Denied count the proxy's decisions on connections and
	// requests.
	Allowed int `json:"allowed"`
	Denied  int `json:"denied"`
	// Events are the proxy's DNS, connect and close events, the first
	// maxRunNetEvents of them.
	Events  []netproxy.Event `json:"events,omitempty"`
	Dropped int              `json:"events_dropped,omitempty"`

	mu       sync.Mutex
	endpoint *netproxy.Endpoint
	quiet    bool      // --json: refusals go to the result, not stderr
	stderr   io.Writer // where refusals go without --json
}

// record takes one event of the proxy.
func (n *runNetwork) record(e netproxy.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e.Kind == "connect" {
		if e.Decision == "allow" {
			n.Allowed++
		} else {
			n.Denied++
			if !n.quiet {
				fmt.Fprintf(n.stderr, "moat: network: refused %s:%d (%s): %s\n", display.String(e.Host), e.Port, display.String(e.Code), display.String(e.Reason))
			}
		}
	}
	if len(n.Events) < maxRunNetEvents {
		n.Events = append(n.Events, e)
	} else {
		n.Dropped++
	}
}

// networkSetup checks the network flags against the policy and, for mode
// proxy, starts the run's own egress proxy (in this process: it lives as
// long as the run) and puts an endpoint of it in the spec (admit.Attach).
func networkSetup(f *runFlags, spec *sandbox.Spec, eff *policy.Effective, defaults config.Defaults, red *output.Matcher, rio *runIO) (*runNetwork, error) {
	mode, err := sandbox.ParseNetMode(f.net)
	if err != nil {
		return nil, fmt.Errorf("--net: %w", err)
	}
	n := &runNetwork{Mode: mode, Allow: f.allowDomains, Deny: f.denyDomains, quiet: f.json, stderr: rio.stderr}
	if err := admit.PermitOpen(mode, eff); err != nil {
		return nil, fmt.Errorf("%w: --net open: the operator's managed policy (%s) does not permit it (open_network = true)", sandbox.ErrInvalidSpec, policy.ManagedPath)
	}
	if !admit.ListsFit(mode, f.allowDomains, f.denyDomains) {
		if mode == sandbox.NetOpen {
			return nil, fmt.Errorf("%w: --allow-domain and --deny-domain need --net proxy: --net open does not filter", sandbox.ErrInvalidSpec)
		}
		return nil, fmt.Errorf("%w: --allow-domain and --deny-domain need --net proxy (the default, --net none, has no network at all)", sandbox.ErrInvalidSpec)
	}
	var px *netproxy.Proxy
	var np *compile.NetPolicy
	if mode == sandbox.NetProxy {
		var askMu sync.Mutex
		// Refusals reach the user as one line each (record); the
		// proxy's own log would repeat them.
		// The proxy redacts the secrets from its events (so from the
		// refusal lines and the --json result) and its 403 bodies.
		var redact func(string) string
		if red != nil {
			redact = red.RedactString
		}
		px = netproxy.New(netproxy.Config{DNSServer: defaults.DNSServer, Events: n.record, Redact: redact, Logger: slog.New(slog.DiscardHandler)})
		np = &compile.NetPolicy{
			Current: func() *policy.Effective { return eff },
			Ask: func(ctx context.Context, d policy.Decision) (bool, string) {
				// One question on the terminal at a time.
				askMu.Lock()
				defer askMu.Unlock()
				// The question shows the host with the secrets redacted.
				d.Request.Host, d.Host, d.Reason = red.RedactString(d.Request.Host), red.RedactString(d.Host), red.RedactString(d.Reason)
				eff, how := askTerminal(rio.openTTY, d.Request, d, f.approvalTimeout)
				return eff == policy.Allow, terminalAnswer[how]
			},
			InternalHint: func(addr string) string {
				return "--allow-domain " + addr + " (or a range holding it, such as " + internalRange(addr) + ") admits it"
			},
		}
		n.Proxy = fmt.Sprintf("127.0.0.1:%d", sandbox.ProxyPort)
	}
	n.endpoint = admit.Attach(spec, mode, px, np)
	return n, nil
}

// terminalAnswer says how askTerminal's answer went, completing a proxy
// decision's reason.
var terminalAnswer = map[string]string{
	"terminal":    "allowed on the terminal",
	"refused":     "refused on the terminal: denied",
	"timeout":     "no answer on the terminal in time: denied",
	"no terminal": "no terminal to ask on: denied",
}

// internalRange is an example CIDR holding the internal address addr.
func internalRange(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return "10.0.0.0/8"
	}
	bits := 8
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// netDenyRules turns --deny-domain entries into per-call deny rules.
func netDenyRules(entries []string) ([]string, error) {
	out, err := admit.DenyRules(entries)
	if err != nil {
		return nil, fmt.Errorf("%w: --deny-domain %v", sandbox.ErrInvalidSpec, err)
	}
	return out, nil
}

// close stops the run's proxy; what it recorded is final afterwards.
func (n *runNetwork) close() {
	if n != nil && n.endpoint != nil {
		_ = n.endpoint.Close()
	}
}

// view returns the result object (nil when there is nothing to say).
func (n *runNetwork) view() *runNetwork {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return &runNetwork{Mode: n.Mode, Allow: n.Allow, Deny: n.Deny, Proxy: n.Proxy, Allowed: n.Allowed, Denied: n.Denied,
		Events: append([]netproxy.Event(nil), n.Events...), Dropped: n.Dropped}
}
