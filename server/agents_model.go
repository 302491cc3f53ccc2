package server

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/moat-sandbox/moat/agent"
	"github.com/moat-sandbox/moat/agent/model"
)

// agentModel is the runner's Model: the daemon's one model client, set at
// Start (nil until then, and on a daemon without providers), and the
// observer of its attempts, which counts them in the metrics.
type agentModel struct {
	s *Service

	mu     sync.Mutex
	client *model.Client
	// own is the providers the client was made of (checkDocument
	// compares a document's with them).
	own *model.Config
}

var _ agent.Model = (*agentModel)(nil)

// errModelsGone: a run taken up by a daemon without providers.
var errModelsGone = errors.New("no model providers configured (models_file): this daemon cannot make the run's model calls")

// set installs the client made of cfg.
func (m *agentModel) set(c *model.Client, cfg *model.Config) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.client, m.own = c, cfg
}

func (m *agentModel) get() *model.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.client
}

// configured reports whether the daemon has a model client.
func (m *agentModel) configured() bool { return m.get() != nil }

// providers returns the daemon's providers, nil when it has none.
func (m *agentModel) providers() *model.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.own
}

// Complete asks the daemon's model client.
func (m *agentModel) Complete(ctx context.Context, req model.Request) (*model.Response, error) {
	c := m.get()
	if c == nil {
		return nil, errModelsGone
	}
	return c.Complete(ctx, req)
}

// observe counts one attempt of the client: its outcome, tokens and
// latency, by provider ("" for a request no provider could serve).
func (m *agentModel) observe(a model.Attempt) {
	mt := m.s.metrics
	outcome := "ok"
	if a.Err != nil {
		outcome = string(a.Class)
		if outcome == "" {
			outcome = "error"
		}
	}
	mt.modelRequests.Inc(a.Provider, outcome)
	if a.Provider == "" {
		return
	}
	if a.Usage.InputTokens > 0 {
		mt.modelTokens.Add(uint64(a.Usage.InputTokens), a.Provider, "input")
	}
	if a.Usage.OutputTokens > 0 {
		mt.modelTokens.Add(uint64(a.Usage.OutputTokens), a.Provider, "output")
	}
	mt.modelLatency.Observe(a.Latency.Seconds(), a.Provider)
	if a.Err != nil {
		m.s.log.Warn("model attempt failed", "provider", a.Provider, "alias", a.Alias, "attempt", strconv.Itoa(a.N),
			"status", a.Status, "class", string(a.Class), "retryable", a.Retryable)
	}
}
