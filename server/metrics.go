package server

import (
	"io"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/metrics"
)

// serverMetrics are the Prometheus metrics of a Service, in a registry of
// its own (no global state). See package metrics for why moat writes the
// exposition format itself.
type serverMetrics struct {
	reg         *metrics.Registry
	created     *metrics.CounterVec
	ended       *metrics.CounterVec
	calls       *metrics.CounterVec
	errors      *metrics.CounterVec
	durations   *metrics.HistogramVec
	denials     *metrics.CounterVec
	slowWrites  *metrics.CounterVec
	auditErrors *metrics.CounterVec
	decisions   *metrics.CounterVec
	proxy       *metrics.CounterVec
	snapshots   *metrics.CounterVec
	poolEvents  *metrics.CounterVec
	// The model client's attempts and the agent runs' tool calls
	// (agents_model.go, agents_journal.go).
	modelRequests  *metrics.CounterVec
	modelTokens    *metrics.CounterVec
	modelLatency   *metrics.HistogramVec
	agentToolCalls *metrics.CounterVec
}

// modelLatencyBuckets are the bounds of moat_model_latency_seconds: a
// model call takes from tens of milliseconds (a local model's short
// answer) to minutes.
var modelLatencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(s *Service) *serverMetrics {
	r := metrics.NewRegistry()
	r.NewGaugeFunc("moat_sandboxes_running", "Sandboxes running now.", func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.sandboxes))
	})
	r.NewGaugeFunc("moat_approvals_pending", "Approvals waiting for an answer now.", func() float64 {
		return float64(s.approvals.pendingCount())
	})
	r.NewGaugeVecFunc("moat_pool_ready", "Warm sandboxes ready to be claimed, by pool.", func(emit func(float64, ...string)) {
		s.pools.each(func(p PoolConfig, ready int) { emit(float64(ready), p.Template, p.Profile) })
	}, "template", "profile")
	r.NewGaugeVecFunc("moat_pool_size", "Configured size of each warm pool.", func(emit func(float64, ...string)) {
		s.pools.each(func(p PoolConfig, _ int) { emit(float64(p.Size), p.Template, p.Profile) })
	}, "template", "profile")
	return &serverMetrics{
		snapshots:   r.NewCounter("moat_snapshots_total", "Snapshots taken."),
		poolEvents:  r.NewCounter("moat_pool_events_total", "Warm pool events: created, fill_error, hit, miss, unhealthy.", "template", "event"),
		reg:         r,
		created:     r.NewCounter("moat_sandboxes_created_total", "Sandboxes created."),
		ended:       r.NewCounter("moat_sandboxes_ended_total", "Sandboxes ended, by reason.", "reason"),
		calls:       r.NewCounter("moat_calls_total", "API operations, by operation and result code (\"ok\" or an error code).", "op", "code"),
		errors:      r.NewCounter("moat_errors_total", "API operations that failed, by operation and error code.", "op", "code"),
		durations:   r.NewHistogram("moat_call_duration_seconds", "Duration of API operations.", metrics.DefaultDurationBuckets, "op"),
		denials:     r.NewCounter("moat_denials_total", "Requests refused: bad token, quota, host paths.", "reason"),
		slowWrites:  r.NewCounter("moat_slow_writes_total", "Store and audit writes slower than 250 ms.", "what"),
		auditErrors: r.NewCounter("moat_audit_errors_total", "Audit events that could not be written."),
		decisions:   r.NewCounter("moat_policy_decisions_total", "Policy decisions on calls (exec, start, file operations on host paths), by the policy's effect: allow, ask, deny.", "effect"),
		proxy:       r.NewCounter("moat_proxy_events_total", "Egress proxy events: kind dns (a resolution), connect (a decision on a connection or request), close (a finished one); decision allow, deny or empty.", "kind", "decision"),

		modelRequests:  r.NewCounter("moat_model_requests_total", "Model provider attempts of agent runs, by provider and outcome (\"ok\" or an error class: rate_limited, server_error, timeout, connection, protocol, client_error, canceled, no_provider).", "provider", "outcome"),
		modelTokens:    r.NewCounter("moat_model_tokens_total", "Model tokens of agent runs, by provider and direction (input, output).", "provider", "direction"),
		modelLatency:   r.NewHistogram("moat_model_latency_seconds", "Duration of model provider attempts, by provider.", modelLatencyBuckets, "provider"),
		agentToolCalls: r.NewCounter("moat_agent_tool_calls_total", "Tool calls agents asked for, by tool and the policy's decision (allow, ask, deny; empty: refused before a decision).", "tool", "decision"),
	}
}

// observeCall counts a finished operation and its duration.
func (m *serverMetrics) observeCall(op string, err error, took time.Duration) {
	code := "ok"
	if err != nil {
		code = api.AsError(err).Code
		m.errors.Inc(op, code)
	}
	m.calls.Inc(op, code)
	m.durations.Observe(took.Seconds(), op)
}

// denied counts a refusal (bad token, quota, host paths…).
func (m *serverMetrics) denied(reason string) { m.denials.Inc(reason) }

// slow counts store and audit writes slower than slowOp.
func (m *serverMetrics) slow(what string) { m.slowWrites.Inc(what) }

// endedFor counts sandboxes that ended, by reason.
func (m *serverMetrics) endedFor(reason string) { m.ended.Inc(reason) }

// write renders every metric in the Prometheus text format.
func (m *serverMetrics) write(w io.Writer) { m.reg.WritePrometheus(w) }
