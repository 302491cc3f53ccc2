package server

import (
	"fmt"
	"io"
	"time"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/moat-sandbox/moat/api"
)

// metrics are the Prometheus metrics of a Service, in a set of its own
// (no global registry). VictoriaMetrics/metrics writes the Prometheus text
// format; it was chosen over client_golang because every package linked
// into moat runs its init in every sandbox's pid 1 too (the same binary),
// and client_golang's init cost about 1.2 ms per start here (empty
// binaries, hyperfine).
type metrics struct {
	set         *vm.Set
	created     *vm.Counter
	auditErrors *vm.Counter
}

func newMetrics(s *Service) *metrics {
	set := vm.NewSet()
	set.NewGauge(`moat_sandboxes{state="running"}`, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.sandboxes))
	})
	return &metrics{
		set:         set,
		created:     set.NewCounter("moat_sandboxes_created_total"),
		auditErrors: set.NewCounter("moat_audit_errors_total"),
	}
}

// observeCall counts a finished operation and its duration.
func (m *metrics) observeCall(op string, err error, took time.Duration) {
	code := "ok"
	if err != nil {
		code = api.AsError(err).Code
		m.set.GetOrCreateCounter(fmt.Sprintf(`moat_errors_total{op=%q,code=%q}`, op, code)).Inc()
	}
	m.set.GetOrCreateCounter(fmt.Sprintf(`moat_calls_total{op=%q,code=%q}`, op, code)).Inc()
	m.set.GetOrCreateSummary(fmt.Sprintf(`moat_call_duration_seconds{op=%q}`, op)).Update(took.Seconds())
}

// denied counts a refusal (bad token, quota, host paths…).
func (m *metrics) denied(reason string) {
	m.set.GetOrCreateCounter(fmt.Sprintf(`moat_denials_total{reason=%q}`, reason)).Inc()
}

// slow counts store and audit writes slower than slowOp.
func (m *metrics) slow(what string) {
	m.set.GetOrCreateCounter(fmt.Sprintf(`moat_slow_writes_total{what=%q}`, what)).Inc()
}

// ended counts sandboxes that ended, by reason.
func (m *metrics) ended(reason string) {
	m.set.GetOrCreateCounter(fmt.Sprintf(`moat_sandboxes_ended_total{reason=%q}`, reason)).Inc()
}

// write renders every metric in the Prometheus text format.
func (m *metrics) write(w io.Writer) {
	m.set.WritePrometheus(w)
}
