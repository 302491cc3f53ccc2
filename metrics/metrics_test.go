package metrics

import (
	"strings"
	"sync"
	"testing"
)

func TestExposition(t *testing.T) {
	r := NewRegistry()
	calls := r.NewCounter("moat_calls_total", "Calls by operation.", "op", "code")
	plain := r.NewCounter("moat_plain_total", "An unlabelled counter.")
	r.NewGaugeFunc("moat_running", "Running things.", func() float64 { return 3 })
	h := r.NewHistogram("moat_seconds", "Durations.", []float64{0.1, 1}, "op")
	calls.Inc("exec", "ok")
	calls.Add(2, "exec", "ok")
	calls.Inc("file.read", `bad"code`+"\n")
	h.Observe(0.05, "exec")
	h.Observe(0.1, "exec") // on a bound: counted in that bucket
	h.Observe(5, "exec")
	var b strings.Builder
	r.WritePrometheus(&b)
	want := `# HELP moat_calls_total Calls by operation.
# TYPE moat_calls_total counter
moat_calls_total{op="exec",code="ok"} 3
moat_calls_total{op="file.read",code="bad\"code\n"} 1
# HELP moat_plain_total An unlabelled counter.
# TYPE moat_plain_total counter
moat_plain_total 0
# HELP moat_running Running things.
# TYPE moat_running gauge
moat_running 3
# HELP moat_seconds Durations.
# TYPE moat_seconds histogram
moat_seconds_bucket{op="exec",le="0.1"} 2
moat_seconds_bucket{op="exec",le="1"} 2
moat_seconds_bucket{op="exec",le="+Inf"} 3
moat_seconds_sum{op="exec"} 5.15
moat_seconds_count{op="exec"} 3
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	_ = plain
}

func TestConcurrentUse(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounter("c_total", "c", "k")
	h := r.NewHistogram("h", "h", DefaultDurationBuckets)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Inc("x")
				h.Observe(0.001)
				r.WritePrometheus(&strings.Builder{})
			}
		}()
	}
	wg.Wait()
	if got := c.Value("x"); got != 8000 {
		t.Fatalf("counter %d", got)
	}
	var b strings.Builder
	r.WritePrometheus(&b)
	if !strings.Contains(b.String(), "h_count 8000\n") || !strings.Contains(b.String(), "h_sum 8.0000") {
		t.Fatalf("histogram:\n%s", b.String())
	}
}

func TestWrongLabelCountPanics(t *testing.T) {
	c := NewRegistry().NewCounter("c_total", "c", "a", "b")
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a missing label value")
		}
	}()
	c.Inc("only one")
}

func TestGaugeVecFunc(t *testing.T) {
	r := NewRegistry()
	r.NewGaugeVecFunc("moat_pool_ready", "Ready.", func(emit func(float64, ...string)) {
		emit(3, "host", "trusted")
		emit(0, "py", "untrusted")
	}, "template", "profile")
	var b strings.Builder
	r.WritePrometheus(&b)
	want := "moat_pool_ready{template=\"host\",profile=\"trusted\"} 3\nmoat_pool_ready{template=\"py\",profile=\"untrusted\"} 0\n"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("got %q", b.String())
	}
}
