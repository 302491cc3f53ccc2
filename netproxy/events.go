package netproxy

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"
)

// Event kinds, protocols and decisions.
const (
	// KindDNS is one resolution of a name, with every answer.
	KindDNS = "dns"
	// KindConnect is one decision on a connection or an HTTP request.
	KindConnect = "connect"
	// KindClose is a finished tunnel or forwarded request.
	KindClose = "close"

	// ProtoHTTP is a plain HTTP forward-proxy request.
	ProtoHTTP = "http"
	// ProtoConnect is an HTTP CONNECT tunnel.
	ProtoConnect = "connect"
	// ProtoSOCKS5 is a SOCKS5 CONNECT tunnel.
	ProtoSOCKS5 = "socks5"

	// DecisionAllow is an allowed connection, request or resolution.
	DecisionAllow = "allow"
	// DecisionDeny is a refused connection, request or resolution.
	DecisionDeny = "deny"
)

// Event is one thing the proxy did or refused. It never carries request
// headers or bodies.
type Event struct {
	// Time is when the event happened.
	Time time.Time `json:"time"`
	// Sandbox names the sandbox (Serve's sandboxID).
	Sandbox string `json:"sandbox,omitempty"`
	// Kind is "dns" (one resolution), "connect" (a decision on a connection
	// or an HTTP request) or "close" (a tunnel or request finished).
	Kind string `json:"kind"`
	// Proto is "http", "connect" or "socks5".
	Proto string `json:"proto,omitempty"`
	// Host is the destination's normalized host name or IP literal.
	Host string `json:"host,omitempty"`
	// Port is the destination port.
	Port int `json:"port,omitempty"`
	// Answers lists, for "dns", every address the resolver returned.
	Answers []string `json:"answers,omitempty"`
	// Addr is, for "connect" and "close", the address dialled ("ip:port").
	Addr string `json:"addr,omitempty"`
	// Decision is "allow" or "deny" ("dns" and "connect").
	Decision string `json:"decision,omitempty"`
	// Code is the X-Proxy-Error code of a refusal.
	Code string `json:"code,omitempty"`
	// Reason explains the decision in one line.
	Reason string `json:"reason,omitempty"`
	// Rule names the deciding policy rule, if any.
	Rule string `json:"rule,omitempty"`
	// BytesUp counts the bytes sent by the client upstream ("close"; for
	// HTTP, the request body).
	BytesUp int64 `json:"bytes_up,omitempty"`
	// BytesDown counts the bytes sent from upstream to the client ("close";
	// for HTTP, the response body).
	BytesDown int64 `json:"bytes_down,omitempty"`
	// Duration is, for "close", how long the tunnel or request lasted;
	// DurationMs is the same in whole milliseconds, as JSON carries it
	// (an integer, as every duration_ms of moat; absent under 1 ms).
	Duration   time.Duration `json:"-"`
	DurationMs int64         `json:"duration_ms,omitempty"`
}

// emit stamps, logs and delivers an event.
func (e *Endpoint) emit(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	if ev.Duration > 0 {
		ev.DurationMs = ev.Duration.Milliseconds()
	}
	if r := e.p.cfg.Redact; r != nil {
		ev.Host, ev.Addr, ev.Reason, ev.Rule = r(ev.Host), r(ev.Addr), r(ev.Reason), r(ev.Rule)
		if ev.Answers != nil {
			ans := make([]string, len(ev.Answers))
			for i, a := range ev.Answers {
				ans[i] = r(a)
			}
			ev.Answers = ans
		}
	}
	level := slog.LevelDebug
	if ev.Decision == DecisionDeny {
		level = slog.LevelInfo
	}
	e.p.log.Log(e.ctx, level, "netproxy: "+ev.Kind,
		"sandbox", ev.Sandbox, "proto", ev.Proto, "host", ev.Host, "port", ev.Port,
		"addr", ev.Addr, "decision", ev.Decision, "code", ev.Code, "reason", ev.Reason, "rule", ev.Rule)
	if f := e.p.cfg.Events; f != nil {
		f(ev)
	}
}

// target is the destination of one connection or request.
type target struct {
	sandbox string
	proto   string
	host    string     // normalized
	ip      netip.Addr // valid when host is an IP literal
	port    int
	verdict Verdict // Policy.Decide's answer
}

func (t *target) String() string {
	if t.ip.Is6() {
		return fmt.Sprintf("[%s]:%d", t.host, t.port)
	}
	return fmt.Sprintf("%s:%d", t.host, t.port)
}

// event returns an event about t.
func (t *target) event(kind string) Event {
	return Event{Sandbox: t.sandbox, Kind: kind, Proto: t.proto, Host: t.host, Port: t.port}
}

// emitAllow records the allowed connection of t to addr.
func (e *Endpoint) emitAllow(t *target, addr string) {
	ev := t.event(KindConnect)
	ev.Addr, ev.Decision = addr, DecisionAllow
	ev.Reason, ev.Rule = t.verdict.Reason, t.verdict.Rule
	e.emit(ev)
}

// emitRefusal records the refusal r of t.
func (e *Endpoint) emitRefusal(t *target, r *refusal) {
	ev := t.event(KindConnect)
	ev.Addr, ev.Decision = r.Addr, DecisionDeny
	ev.Code, ev.Reason, ev.Rule = r.Code, r.Reason, r.Rule
	e.emit(ev)
}

// emitClose records a finished tunnel or request.
func (e *Endpoint) emitClose(t *target, addr string, up, down int64, start time.Time) {
	ev := t.event(KindClose)
	ev.Addr, ev.BytesUp, ev.BytesDown, ev.Duration = addr, up, down, time.Since(start)
	e.emit(ev)
}
