package netproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// lookupTimeout bounds one resolution.
const lookupTimeout = 5 * time.Second

// refusal is a refused connection or request: it becomes an HTTP error
// response (or a SOCKS reply) and a "connect" event with Decision "deny".
type refusal struct {
	Code   string
	Status int
	Reason string
	Rule   string
	Addr   string // the address concerned, "ip:port", if any
	Err    error  // the underlying error, if any
}

func (r *refusal) Error() string {
	if r.Err != nil {
		return fmt.Sprintf("netproxy: %s: %s: %v", r.Code, r.Reason, r.Err)
	}
	return fmt.Sprintf("netproxy: %s: %s", r.Code, r.Reason)
}

func (r *refusal) Unwrap() error { return r.Err }

func badRequest(format string, args ...any) *refusal {
	return &refusal{Code: CodeBadRequest, Status: http.StatusBadRequest, Reason: fmt.Sprintf(format, args...)}
}

// newResolver returns the pure-Go resolver, asking server when set.
func newResolver(server string) *net.Resolver {
	r := &net.Resolver{PreferGo: true}
	if server != "" {
		r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}
	}
	return r
}

// decide asks the policy about t; it returns a refusal when denied.
func (e *Endpoint) decide(ctx context.Context, t *target) *refusal {
	v := e.pol.Decide(ctx, t.host, t.port)
	t.verdict = v
	if v.Allow {
		return nil
	}
	r := &refusal{Code: v.Code, Status: http.StatusForbidden, Reason: v.Reason, Rule: v.Rule}
	if r.Code == "" {
		r.Code = CodeDenied
	}
	if r.Reason == "" {
		r.Reason = fmt.Sprintf("%s is not allowed by the sandbox's network policy", t)
	}
	return r
}

// resolve returns the checked addresses of t: the IP literal, or every
// answer of one lookup, each admitted by the address table and Policy.Addr.
// If any answer is refused the whole name is refused. It emits a "dns"
// event for a lookup.
func (e *Endpoint) resolve(ctx context.Context, t *target) ([]netip.AddrPort, *refusal) {
	port := uint16(t.port)
	if t.ip.IsValid() {
		if r := e.checkAddr(t, t.ip); r != nil {
			return nil, r
		}
		return []netip.AddrPort{netip.AddrPortFrom(t.ip, port)}, nil
	}

	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	answers, err := e.p.resolver.LookupNetIP(lctx, "ip", t.host)
	cancel()
	ev := t.event(KindDNS)
	if err == nil && len(answers) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		r := &refusal{Code: CodeDNSFailure, Status: http.StatusBadGateway,
			Reason: fmt.Sprintf("cannot resolve %s: %s", t.host, dnsErrorText(err)), Err: err}
		ev.Decision, ev.Code, ev.Reason = DecisionDeny, r.Code, r.Reason
		e.emit(ev)
		return nil, r
	}
	addrs := make([]netip.AddrPort, 0, len(answers))
	ev.Answers = make([]string, 0, len(answers))
	for _, a := range answers {
		a = a.Unmap().WithZone("")
		ev.Answers = append(ev.Answers, a.String())
		addrs = append(addrs, netip.AddrPortFrom(a, port))
	}
	for _, ap := range addrs {
		if r := e.checkAddr(t, ap.Addr()); r != nil {
			ev.Decision, ev.Code, ev.Reason, ev.Rule = DecisionDeny, r.Code, r.Reason, r.Rule
			e.emit(ev)
			return nil, r
		}
	}
	ev.Decision = DecisionAllow
	e.emit(ev)
	return addrs, nil
}

// dnsErrorText shortens a resolver error for a reason line.
func dnsErrorText(err error) string {
	var de *net.DNSError
	if errors.As(err, &de) {
		switch {
		case de.IsNotFound:
			return "no such host"
		case de.IsTimeout:
			return "resolver timed out"
		}
		return de.Err
	}
	return err.Error()
}

// checkAddr judges one address of t with the table and Policy.Addr.
func (e *Endpoint) checkAddr(t *target, a netip.Addr) *refusal {
	special, class := e.p.classify(a)
	v := e.pol.Addr(a, special)
	if v.Allow {
		return nil
	}
	r := &refusal{Code: v.Code, Status: http.StatusForbidden, Reason: v.Reason, Rule: v.Rule,
		Addr: netip.AddrPortFrom(a, uint16(t.port)).String()}
	if r.Code == "" {
		r.Code = CodeBlockedAddress
	}
	if r.Reason == "" {
		what := a.String()
		if !t.ip.IsValid() {
			what = fmt.Sprintf("%s resolves to %s", t.host, a)
		}
		if special {
			r.Reason = fmt.Sprintf("%s, an internal (%s) address the policy does not allow", what, class)
		} else {
			r.Reason = fmt.Sprintf("%s, an address the policy does not allow", what)
		}
	}
	return r
}

// dial dials the checked addresses in order and returns the first
// connection that succeeds.
func (e *Endpoint) dial(ctx context.Context, t *target, addrs []netip.AddrPort) (net.Conn, *refusal) {
	d := net.Dialer{Timeout: e.p.cfg.DialTimeout}
	var last error
	for _, ap := range addrs {
		c, err := d.DialContext(ctx, "tcp", ap.String())
		if err == nil {
			return c, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	reason := fmt.Sprintf("cannot connect to %s", t)
	switch {
	case errors.Is(last, context.Canceled):
		reason += ": cancelled"
	case isTimeout(last):
		reason += ": timed out"
	case last != nil:
		reason += ": " + shortErr(last)
	}
	r := &refusal{Code: CodeConnectFailed, Status: http.StatusBadGateway, Reason: reason, Err: last}
	if len(addrs) > 0 {
		r.Addr = addrs[len(addrs)-1].String()
	}
	return nil, r
}

// connect resolves, checks and dials t.
func (e *Endpoint) connect(ctx context.Context, t *target) (net.Conn, *refusal) {
	addrs, r := e.resolve(ctx, t)
	if r != nil {
		return nil, r
	}
	return e.dial(ctx, t, addrs)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// shortErr drops the "dial tcp a->b:" prefix of a dial error.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}
