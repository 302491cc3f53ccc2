package server

import (
	"container/list"
	"math"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/audit"
)

// Defaults of the handling of failed authentications (Config.AuthFail*).
const (
	// DefaultAuthFailRate is how many failed authentications a source
	// regains the right to make per second.
	DefaultAuthFailRate = 1.0
	// DefaultAuthFailBurst is how many failed authentications a source
	// may make at once before it is answered 429.
	DefaultAuthFailBurst = 20
	// DefaultAuthAuditInterval is how often the failures of each source
	// are written to the audit, counted, as one auth.denied event.
	DefaultAuthAuditInterval = 10 * time.Second
	// DefaultAuthMaxSources bounds the sources whose failures are tracked
	// (least recently failed first out).
	DefaultAuthMaxSources = 4096
	// authMaxReported bounds the auth.denied events of one interval: the
	// sources with the most failures each get one, the rest share one
	// with source "other".
	authMaxReported = 64
)

// authLimiter rate-limits failed authentications per source (an IPv4
// address, or an IPv6 /64) and turns them into counted audit events: the
// audit gets at most authMaxReported+1 events per interval, however many
// requests and sources fail. Valid tokens are never limited.
type authLimiter struct {
	rate     float64
	burst    float64
	interval time.Duration
	max      int
	record   func(audit.Event)

	mu      sync.Mutex
	lru     *list.List // of *authSource, most recently failed at the front
	sources map[string]*list.Element
	// other gathers the failures of sources evicted before their
	// failures were written.
	other   authCount
	evicted int
	timer   *time.Timer // the next flush, while failures are pending
	closed  bool
}

// authCount counts the failures of one source within an interval.
type authCount struct {
	failures, limited int
	first, last       time.Time
	op                string // the last operation asked
}

func (c *authCount) add(o authCount) {
	if o.failures == 0 {
		return
	}
	if c.failures == 0 || o.first.Before(c.first) {
		c.first = o.first
	}
	if o.last.After(c.last) {
		c.last, c.op = o.last, o.op
	}
	c.failures += o.failures
	c.limited += o.limited
}

type authSource struct {
	key    string
	tokens float64
	at     time.Time // when tokens was computed
	count  authCount
}

func newAuthLimiter(cfg Config, record func(audit.Event)) *authLimiter {
	return &authLimiter{rate: cfg.AuthFailRate, burst: float64(cfg.AuthFailBurst), interval: cfg.AuthAuditInterval,
		max: cfg.AuthMaxSources, record: record, lru: list.New(), sources: map[string]*list.Element{}}
}

// sourceKey is what a remote address is limited by: an IPv4 address, an
// IPv6 /64 (one host usually has a whole /64), or the address as given
// when it is not IP:port (a unix socket's peer).
func sourceKey(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		if host == "" || host == "@" {
			return "local"
		}
		return host
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// fail counts a failed authentication of remote for operation op. It
// reports whether the source is within its budget (answer 401); if not,
// retry is how long until it is again (answer 429).
func (l *authLimiter) fail(remote, op string, now time.Time) (ok bool, retry time.Duration) {
	key := sourceKey(remote)
	l.mu.Lock()
	defer l.mu.Unlock()
	var s *authSource
	if e, found := l.sources[key]; found {
		l.lru.MoveToFront(e)
		s = e.Value.(*authSource)
		s.tokens = math.Min(l.burst, s.tokens+now.Sub(s.at).Seconds()*l.rate)
		s.at = now
	} else {
		s = &authSource{key: key, tokens: l.burst, at: now}
		l.sources[key] = l.lru.PushFront(s)
		for l.lru.Len() > l.max {
			old := l.lru.Remove(l.lru.Back()).(*authSource)
			delete(l.sources, old.key)
			if old.count.failures > 0 {
				l.other.add(old.count)
				l.evicted++
			}
		}
	}
	c := authCount{failures: 1, first: now, last: now, op: op}
	if s.tokens >= 1 {
		s.tokens--
		ok = true
	} else {
		c.limited = 1
		retry = time.Duration((1 - s.tokens) / l.rate * float64(time.Second))
	}
	s.count.add(c)
	switch {
	case l.closed:
		// Shutting down: nothing will flush later.
		defer func() { go l.flush() }()
	case l.timer == nil:
		l.timer = time.AfterFunc(l.interval, l.flush)
	}
	return ok, retry
}

// flush writes the failures counted since the last flush: one auth.denied
// event per source (the authMaxReported with the most failures) and one
// for the rest.
func (l *authLimiter) flush() {
	l.mu.Lock()
	var pending []*authSource
	for e := l.lru.Front(); e != nil; e = e.Next() {
		s := e.Value.(*authSource)
		if s.count.failures > 0 {
			c := *s
			pending = append(pending, &c)
			s.count = authCount{}
		}
	}
	other, evicted := l.other, l.evicted
	l.other, l.evicted = authCount{}, 0
	l.timer = nil
	l.mu.Unlock()
	sort.Slice(pending, func(i, j int) bool { return pending[i].count.failures > pending[j].count.failures })
	if len(pending) > authMaxReported {
		for _, s := range pending[authMaxReported:] {
			other.add(s.count)
			evicted++
		}
		pending = pending[:authMaxReported]
	}
	for _, s := range pending {
		l.record(authEvent(s.key, 1, s.count))
	}
	if other.failures > 0 {
		l.record(authEvent("other", evicted, other))
	}
}

// close writes what is pending and stops the flushes.
func (l *authLimiter) close() {
	l.mu.Lock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.flush()
}

// authEvent is the audit event of the failures of one source (or of
// sources sources together, for "other") within an interval.
func authEvent(source string, sources int, c authCount) audit.Event {
	req := map[string]any{"remote": source, "op": c.op}
	if sources != 1 {
		req["sources"] = sources
	}
	return audit.Event{Kind: "auth.denied", Actor: "anonymous", Decision: audit.DecisionDeny,
		Request: mustJSON(req),
		Result: mustJSON(map[string]any{"count": c.failures, "limited": c.limited,
			"first": c.first.UTC(), "last": c.last.UTC()}),
		Error: ErrBadToken.Error()}
}
