package model

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// backend is one provider kind's translation of a Request to its API.
type backend interface {
	// complete makes one call. onText, when not nil, streams. Its error
	// is a *statusError for an HTTP error answer, a *protocolError for
	// an answer that makes no sense, or the transport's.
	complete(ctx context.Context, req *Request, onText func(string)) (*Response, error)
}

// Attempt is one call of a provider (or, with Class ClassNoProvider, a
// request no provider could serve), reported to the Observer. It holds
// neither the prompt nor the key.
type Attempt struct {
	Provider string // "" when no provider was eligible
	Kind     string
	Model    string
	Alias    string
	Tags     []string
	// N is the attempt's number within its Complete, from 1.
	N      int
	Stream bool
	Usage  Usage
	// Queued is how long the attempt waited for a free slot; Latency how
	// long the call took.
	Queued  time.Duration
	Latency time.Duration
	// Status is the HTTP status of a failure (0: none or success).
	Status    int
	Class     ErrorClass
	Retryable bool
	// Err is the attempt's error (a *ProviderError, or one wrapping
	// ErrNoProvider), nil on success.
	Err error
}

// ProviderStats is one provider's counters since New, for metrics.
type ProviderStats struct {
	Name           string
	Kind           string
	Model          string
	Tags           []string
	Weight         int
	MaxConcurrency int
	InFlight       int
	// Requests counts attempts started, Errors those that failed.
	Requests     uint64
	Errors       uint64
	InputTokens  int64
	OutputTokens int64
}

// Option configures New.
type Option func(*options)

type options struct {
	httpClient *http.Client
	observer   func(Attempt)
	retry      retry
	timeout    time.Duration
	logger     *slog.Logger
	key        KeyFunc
}

// WithHTTPClient makes the client call providers through hc (default: a
// client of its own, with a transport cloned from http.DefaultTransport).
func WithHTTPClient(hc *http.Client) Option {
	return func(o *options) { o.httpClient = hc }
}

// WithObserver has f called after every attempt, synchronously, from the
// goroutine of the Complete that made it: f must be quick and safe for
// concurrent use.
func WithObserver(f func(Attempt)) Option {
	return func(o *options) { o.observer = f }
}

// WithRetry sets the attempts a Complete makes at most (≥ 1, default 4),
// the first backoff (default 250ms) and the cap of a backoff and of a
// provider's Retry-After (default 8s). Failover to another eligible
// provider is immediate; the backoff is waited once each has failed.
func WithRetry(attempts int, base, max time.Duration) Option {
	return func(o *options) { o.retry = retry{attempts: attempts, base: base, max: max} }
}

// WithTimeout bounds each attempt (default 10 minutes; 0: no bound but
// the caller's context). A timed-out attempt is retried.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithLogger sets where retries and failovers are logged (default:
// nowhere). Logs name providers, statuses and classes: never a prompt or
// a key.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithKeyFunc makes New get each provider's key from f instead of reading
// its APIKeyFile with ReadKeyFile. f is called once per provider, by New.
func WithKeyFunc(f KeyFunc) Option {
	return func(o *options) { o.key = f }
}

// Client is the model client: one per moat instance, shared by every
// agent. It is safe for concurrent use.
type Client struct {
	opts  options
	provs []*provider // by name

	mu sync.Mutex
	// freed is closed (and replaced) when a slot is released: waiters
	// for a slot look again.
	freed chan struct{}
}

// provider is a configured provider and its state.
type provider struct {
	cfg Provider
	key string // never logged, never in an error
	be  backend

	// Guarded by Client.mu.
	inFlight     int
	requests     uint64
	errors       uint64
	inputTokens  int64
	outputTokens int64
	coolUntil    time.Time // a 429's Retry-After: ranked after the others until then
}

// New validates cfg, reads every provider's key (through WithKeyFunc's
// function, or from its APIKeyFile) and returns the client. It makes no
// network call.
func New(cfg Config, opts ...Option) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{
		retry:   retry{attempts: 4, base: 250 * time.Millisecond, max: 8 * time.Second},
		timeout: 10 * time.Minute,
		key:     defaultKey,
	}
	for _, f := range opts {
		f(&o)
	}
	if o.retry.attempts < 1 || o.retry.base <= 0 || o.retry.max < o.retry.base {
		return nil, fmt.Errorf("model: retry: want attempts ≥ 1 and 0 < base ≤ max, got %d, %v, %v", o.retry.attempts, o.retry.base, o.retry.max)
	}
	if o.timeout < 0 {
		return nil, fmt.Errorf("model: negative timeout %v", o.timeout)
	}
	if o.httpClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		o.httpClient = &http.Client{Transport: tr}
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{opts: o, freed: make(chan struct{})}
	for _, pc := range cfg.Providers {
		pc = pc.withDefaults()
		key, err := o.key(pc)
		if err != nil {
			return nil, fmt.Errorf("model: provider %q: %w", pc.Name, err)
		}
		if key != "" {
			if err := checkKey(key); err != nil {
				return nil, fmt.Errorf("model: provider %q: api key: %w", pc.Name, err)
			}
		}
		p := &provider{cfg: pc, key: key}
		switch pc.Kind {
		case KindOpenAI:
			p.be = newOpenAI(pc, key, o.httpClient)
		case KindAnthropic:
			p.be = newAnthropic(pc, key, o.httpClient)
		}
		c.provs = append(c.provs, p)
	}
	slices.SortFunc(c.provs, func(a, b *provider) int { return strings.Compare(a.cfg.Name, b.cfg.Name) })
	return c, nil
}

// Providers returns every provider's counters, by name.
func (c *Client) Providers() []ProviderStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ProviderStats, 0, len(c.provs))
	for _, p := range c.provs {
		out = append(out, ProviderStats{
			Name:           p.cfg.Name,
			Kind:           p.cfg.Kind,
			Model:          p.cfg.Model,
			Tags:           slices.Clone(p.cfg.Tags),
			Weight:         p.cfg.Weight,
			MaxConcurrency: p.cfg.MaxConcurrency,
			InFlight:       p.inFlight,
			Requests:       p.requests,
			Errors:         p.errors,
			InputTokens:    p.inputTokens,
			OutputTokens:   p.outputTokens,
		})
	}
	return out
}

// eligible lists the providers serving req.Alias that carry every tag of
// req.Tags. Nothing later widens this set: failover picks within it.
func (c *Client) eligible(req *Request) []*provider {
	var out []*provider
	for _, p := range c.provs {
		if p.cfg.serves(req.Alias) && p.cfg.carries(req.Tags) {
			out = append(out, p)
		}
	}
	return out
}

// errNoSlot is acquire's answer when every candidate was excluded.
var errNoSlot = errors.New("every eligible provider failed this round")
