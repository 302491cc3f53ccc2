// Package metrics keeps a control plane's counters, gauges and histograms
// and writes them in the Prometheus text exposition format (version
// 0.0.4).
//
// It is deliberately small. Every package linked into moat also runs its
// init in every sandbox's pid 1 (the same binary), and the general-purpose
// clients measured here cost 0.3 ms (VictoriaMetrics/metrics, which pulls
// in runtime/metrics) to 1.2 ms (prometheus/client_golang) of start-up per
// process, twice per `moat run`. This package has no init work at all.
//
// A Registry holds metric families; each family has a fixed set of label
// names and one series per distinct tuple of label values. Everything is
// safe for concurrent use.
package metrics

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Registry is a set of metric families, written in registration order.
type Registry struct {
	mu       sync.Mutex
	families []family
}

type family interface {
	write(w io.Writer)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

func (r *Registry) add(f family) {
	r.mu.Lock()
	r.families = append(r.families, f)
	r.mu.Unlock()
}

// WritePrometheus writes every metric in the text exposition format.
func (r *Registry) WritePrometheus(w io.Writer) {
	r.mu.Lock()
	fams := slices.Clone(r.families)
	r.mu.Unlock()
	for _, f := range fams {
		f.write(w)
	}
}

// meta is what every family has: its name, help and label names.
type meta struct {
	name, help string
	labels     []string
}

func (m *meta) header(w io.Writer, typ string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, escapeHelp(m.help), m.name, typ)
}

// key joins label values into a map key; labelString renders them.
func key(values []string) string { return strings.Join(values, "\xff") }

func (m *meta) labelString(values []string, extra ...string) string {
	if len(m.labels) == 0 && len(extra) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range m.labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n + `="` + escapeValue(values[i]) + `"`)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(extra[i] + `="` + escapeValue(extra[i+1]) + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

func (m *meta) check(values []string) {
	if len(values) != len(m.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values, got %d", m.name, len(m.labels), len(values)))
	}
}

// series keeps one value per label tuple, in a stable order.
type series[T any] struct {
	mu   sync.Mutex
	m    map[string]*T
	vals map[string][]string
	make func() *T
}

func (s *series[T]) get(values []string) *T {
	k := key(values)
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.m[k]; ok {
		return v
	}
	if s.m == nil {
		s.m, s.vals = map[string]*T{}, map[string][]string{}
	}
	v := s.make()
	s.m[k], s.vals[k] = v, slices.Clone(values)
	return v
}

// each calls fn for every series, sorted by label values.
func (s *series[T]) each(fn func(values []string, v *T)) {
	s.mu.Lock()
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	type kv struct {
		vals []string
		v    *T
	}
	list := make([]kv, len(keys))
	for i, k := range keys {
		list[i] = kv{s.vals[k], s.m[k]}
	}
	s.mu.Unlock()
	for _, e := range list {
		fn(e.vals, e.v)
	}
}

// CounterVec is a family of counters.
type CounterVec struct {
	meta
	s series[atomic.Uint64]
}

// NewCounter registers a counter family with the given label names.
func (r *Registry) NewCounter(name, help string, labels ...string) *CounterVec {
	c := &CounterVec{meta: meta{name, help, labels}}
	c.s.make = func() *atomic.Uint64 { return new(atomic.Uint64) }
	r.add(c)
	return c
}

// Inc adds one to the series with these label values.
func (c *CounterVec) Inc(values ...string) { c.Add(1, values...) }

// Add adds n to the series with these label values.
func (c *CounterVec) Add(n uint64, values ...string) {
	c.check(values)
	c.s.get(values).Add(n)
}

// Value is the current value of a series (0 if it has none yet).
func (c *CounterVec) Value(values ...string) uint64 {
	c.check(values)
	return c.s.get(values).Load()
}

func (c *CounterVec) write(w io.Writer) {
	c.header(w, "counter")
	if len(c.labels) == 0 {
		c.s.get(nil) // an unlabelled counter is always shown
	}
	c.s.each(func(values []string, v *atomic.Uint64) {
		fmt.Fprintf(w, "%s%s %d\n", c.name, c.labelString(values), v.Load())
	})
}

// GaugeFunc is a gauge whose value is read when metrics are written.
type GaugeFunc struct {
	meta
	fn func() float64
}

// NewGaugeFunc registers an unlabelled gauge computed by fn.
func (r *Registry) NewGaugeFunc(name, help string, fn func() float64) *GaugeFunc {
	g := &GaugeFunc{meta: meta{name: name, help: help}, fn: fn}
	r.add(g)
	return g
}

func (g *GaugeFunc) write(w io.Writer) {
	g.header(w, "gauge")
	fmt.Fprintf(w, "%s %s\n", g.name, formatFloat(g.fn()))
}

// GaugeVecFunc is a labelled gauge family whose series are produced when
// metrics are written: fn calls emit once per series.
type GaugeVecFunc struct {
	meta
	fn func(emit func(v float64, values ...string))
}

// NewGaugeVecFunc registers a labelled gauge family computed by fn.
func (r *Registry) NewGaugeVecFunc(name, help string, fn func(emit func(v float64, values ...string)), labels ...string) *GaugeVecFunc {
	g := &GaugeVecFunc{meta: meta{name: name, help: help, labels: labels}, fn: fn}
	r.add(g)
	return g
}

func (g *GaugeVecFunc) write(w io.Writer) {
	g.header(w, "gauge")
	g.fn(func(v float64, values ...string) {
		g.check(values)
		fmt.Fprintf(w, "%s%s %s\n", g.name, g.labelString(values), formatFloat(v))
	})
}

// HistogramVec is a family of histograms with fixed bucket bounds.
type HistogramVec struct {
	meta
	bounds []float64
	s      series[histogram]
}

type histogram struct {
	counts []atomic.Uint64 // one per bound, plus +Inf
	sum    atomic.Uint64   // float64 bits
}

// DefaultDurationBuckets suits call durations in seconds, from 0.5 ms to
// 10 minutes.
var DefaultDurationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600}

// NewHistogram registers a histogram family; bounds must be increasing.
func (r *Registry) NewHistogram(name, help string, bounds []float64, labels ...string) *HistogramVec {
	if !slices.IsSorted(bounds) {
		panic("metrics: histogram bounds must be increasing: " + name)
	}
	h := &HistogramVec{meta: meta{name, help, labels}, bounds: slices.Clone(bounds)}
	h.s.make = func() *histogram { return &histogram{counts: make([]atomic.Uint64, len(bounds)+1)} }
	r.add(h)
	return h
}

// Observe records v in the series with these label values.
func (h *HistogramVec) Observe(v float64, values ...string) {
	h.check(values)
	s := h.s.get(values)
	i, _ := slices.BinarySearch(h.bounds, v) // first bound ≥ v
	s.counts[i].Add(1)
	for {
		old := s.sum.Load()
		if s.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			break
		}
	}
}

func (h *HistogramVec) write(w io.Writer) {
	h.header(w, "histogram")
	h.s.each(func(values []string, s *histogram) {
		var cum uint64
		for i, b := range h.bounds {
			cum += s.counts[i].Load()
			fmt.Fprintf(w, "%s_bucket%s %d\n", h.name, h.labelString(values, "le", formatFloat(b)), cum)
		}
		cum += s.counts[len(h.bounds)].Load()
		fmt.Fprintf(w, "%s_bucket%s %d\n", h.name, h.labelString(values, "le", "+Inf"), cum)
		fmt.Fprintf(w, "%s_sum%s %s\n", h.name, h.labelString(values), formatFloat(math.Float64frombits(s.sum.Load())))
		fmt.Fprintf(w, "%s_count%s %d\n", h.name, h.labelString(values), cum)
	})
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeValue(s string) string { return valueEscaper.Replace(s) }
