package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// bench holds what every phase uses.
type bench struct {
	o      *options
	d      *moatd.Daemon
	c      *apiClient // shared keep-alive client of the TTI and exec phases
	rep    *schema.Controlplane
	start  time.Time // the daemon started listening
	logf   func(format string, args ...any)
	warm   *warmDaemon // serves the warm-pool row; nil when it did not start
	oneRun *machine.Timer
	shots  []*machine.Timer // one per sandbox of a burst, for the one-shot rows
}

func (b *bench) snap(phase string, pss bool) schema.MemSnapshot {
	return snapshot(b.d.PID, phase, time.Since(b.start).Seconds(), pss)
}

func (b *bench) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.o.callTimeout)
}

// tti creates a sandbox, runs echo hello in it and returns the time from
// the create request to the echo's checked answer, with the two calls'
// own times; then deletes the sandbox, untimed.
func (b *bench) tti(ctx context.Context, c *apiClient) (total, create, first time.Duration, err error) {
	cctx, cancel := b.callCtx(ctx)
	defer cancel()
	begin := time.Now()
	id, err := c.create(cctx)
	create = time.Since(begin)
	if err == nil {
		err = c.echo(cctx, id, helloBody, "hello")
	}
	total = time.Since(begin)
	first = total - create
	if id != "" {
		if derr := c.delete(cctx, id); derr != nil && err == nil {
			err = fmt.Errorf("after a good sample: %w", derr)
		}
	}
	return total, create, first, err
}

var helloBody = execBody("hello")

// ttiCarried is tti with the echo carried by the create (one request):
// the time from the request to its checked answer; then deletes the
// sandbox, untimed.
func (b *bench) ttiCarried(ctx context.Context, c *apiClient) (total time.Duration, err error) {
	cctx, cancel := b.callCtx(ctx)
	defer cancel()
	begin := time.Now()
	id, err := c.createExec(cctx)
	total = time.Since(begin)
	if id != "" {
		if derr := c.delete(cctx, id); derr != nil && err == nil {
			err = fmt.Errorf("after a good sample: %w", derr)
		}
	}
	return total, err
}

// sequential runs the sequential TTI samples of the moat API interleaved
// with the one-shot references: each round runs every row once, in a
// fresh random order.
func (b *bench) sequential(ctx context.Context, apis []*row, refs []*row) {
	type entry struct {
		r    *row
		argv []string
	}
	var entries []entry
	for _, r := range apis {
		if r.Kind != schema.KindWarm || b.warm != nil {
			entries = append(entries, entry{r: r})
		}
	}
	for _, r := range refs {
		if r.SkippedReason == "" {
			entries = append(entries, entry{r: r, argv: r.argv})
		}
	}
	rng := rand.New(rand.NewPCG(b.o.Seed, b.o.Seed^0x9e3779b97f4a7c15))
	total := b.o.Warmup + b.o.Rounds
	step := max(1, b.o.Rounds/5)
	for round := range total {
		if ctx.Err() != nil {
			return
		}
		measured := round >= b.o.Warmup
		phase := fmt.Sprintf("round %d", round-b.o.Warmup+1)
		if !measured {
			phase = fmt.Sprintf("warm-up round %d", round+1)
		}
		rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
		runtime.GC() // between rounds, never inside a timed sample
		for _, e := range entries {
			if e.argv == nil {
				var d, cr, fe time.Duration
				var err error
				switch e.r.Kind {
				case schema.KindWarm:
					d, cr, fe, err = b.warm.claimTTI(ctx, b.o.callTimeout)
				case schema.KindAPIExec:
					d, err = b.ttiCarried(ctx, b.c)
				default:
					d, cr, fe, err = b.tti(ctx, b.c)
				}
				if err != nil {
					e.r.fail(phase, err)
					continue
				}
				if measured {
					e.r.SamplesMs = append(e.r.SamplesMs, stats.Ms(d))
					if e.r.Kind != schema.KindAPIExec {
						e.r.createMs = append(e.r.createMs, stats.Ms(cr))
						e.r.execMs = append(e.r.execMs, stats.Ms(fe))
					}
				}
				continue
			}
			want := "hello\n"
			if e.r.Kind == schema.KindBareTrue {
				want = ""
			}
			d, err := timeOneShot(b.oneRun, e.argv, want)
			if err != nil {
				e.r.fail(phase, err)
				continue
			}
			if measured {
				e.r.SamplesMs = append(e.r.SamplesMs, stats.Ms(d))
			}
		}
		if done := round - b.o.Warmup + 1; measured && (done%step == 0 || done == b.o.Rounds) {
			b.logf("sequential TTI and references: %d/%d rounds", done, b.o.Rounds)
		}
	}
}

// bursts runs the burst TTI samples: each burst starts o.burst
// create+echo at once, each timed on its own; the sandboxes are deleted,
// concurrently and untimed, once the whole burst has answered. Each
// burst round also runs every one-shot reference o.burst at once, the
// rows in a fresh random order.
func (b *bench) bursts(ctx context.Context, api *row, refs []*row) *schema.ControlplaneBursts {
	res := &schema.ControlplaneBursts{Size: b.o.burst}
	var rows []*row
	for _, r := range append([]*row{api}, refs...) {
		if r.SkippedReason == "" {
			rows = append(rows, r)
		}
	}
	if len(refs) > 0 {
		shots := make([]*machine.Timer, b.o.burst)
		for i := range shots {
			s, err := machine.NewTimer(b.o.callTimeout, true)
			if err != nil {
				for _, r := range refs {
					r.fail("burst set-up", err)
				}
				rows = rows[:1]
				break
			}
			defer s.Close()
			shots[i] = s
		}
		b.shots = shots
	}
	rng := rand.New(rand.NewPCG(b.o.Seed^0x5bd1e995, b.o.Seed))
	warm := min(b.o.Warmup, 1)
	n := b.o.bursts()
	for k := range warm + n {
		if ctx.Err() != nil {
			break
		}
		measured := k >= warm
		phase := fmt.Sprintf("burst %d", k-warm+1)
		if !measured {
			phase = "warm-up burst"
		}
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		for _, r := range rows {
			runtime.GC()
			if r == api {
				if d, ok := b.apiBurst(ctx, r, phase, measured); ok && measured {
					res.MakespanMs = append(res.MakespanMs, stats.Ms(d))
				}
				continue
			}
			b.oneShotBurst(r, phase, measured)
		}
	}
	res.Makespan = stats.Of(res.MakespanMs)
	b.logf("burst TTI and references: %d bursts of %d", n, b.o.burst)
	return res
}

// apiBurst runs one burst of create+echo and returns its makespan, ok
// when every sample of it succeeded.
func (b *bench) apiBurst(ctx context.Context, r *row, phase string, measured bool) (time.Duration, bool) {
	type result struct {
		id              string
		d, create, exec time.Duration
		err             error
	}
	out := make([]result, b.o.burst)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			cctx, cancel := b.callCtx(ctx)
			defer cancel()
			<-gate
			begin := time.Now()
			id, err := b.c.create(cctx)
			out[i].create = time.Since(begin)
			if err == nil {
				err = b.c.echo(cctx, id, helloBody, "hello")
			}
			out[i].d = time.Since(begin)
			out[i].exec = out[i].d - out[i].create
			out[i].id, out[i].err = id, err
		})
	}
	begin := time.Now()
	close(gate)
	wg.Wait()
	makespan := time.Since(begin)
	for i := range out {
		if out[i].id == "" {
			continue
		}
		wg.Go(func() {
			cctx, cancel := b.callCtx(ctx)
			defer cancel()
			if err := b.c.delete(cctx, out[i].id); err != nil && out[i].err == nil {
				out[i].err = fmt.Errorf("after a good sample: %w", err)
			}
		})
	}
	wg.Wait()
	ok := true
	for _, x := range out {
		if x.err != nil {
			r.fail(phase, x.err)
			ok = false
			continue
		}
		if measured {
			r.SamplesMs = append(r.SamplesMs, stats.Ms(x.d))
			r.createMs = append(r.createMs, stats.Ms(x.create))
			r.execMs = append(r.execMs, stats.Ms(x.exec))
		}
	}
	return makespan, ok
}

// oneShotBurst runs r's command o.burst times at once, each timed on its
// own.
func (b *bench) oneShotBurst(r *row, phase string, measured bool) {
	ds := make([]time.Duration, len(b.shots))
	errs := make([]error, len(b.shots))
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range b.shots {
		wg.Go(func() {
			<-gate
			ds[i], errs[i] = timeOneShot(s, r.argv, "hello\n")
		})
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			r.fail(phase, err)
			continue
		}
		if measured {
			r.SamplesMs = append(r.SamplesMs, stats.Ms(ds[i]))
		}
	}
}

// execRoundTrip times echo in one existing sandbox.
func (b *bench) execRoundTrip(ctx context.Context, r *row) {
	cctx, cancel := b.callCtx(ctx)
	id, err := b.c.create(cctx)
	cancel()
	if err != nil {
		r.fail("create", err)
		return
	}
	defer func() {
		cctx, cancel := b.callCtx(context.Background())
		defer cancel()
		if err := b.c.delete(cctx, id); err != nil {
			r.fail("delete", err)
		}
	}()
	runtime.GC()
	for i := range b.o.execWarmup + b.o.execCalls {
		if ctx.Err() != nil {
			return
		}
		measured := i >= b.o.execWarmup
		cctx, cancel := b.callCtx(ctx)
		begin := time.Now()
		err := b.c.echo(cctx, id, helloBody, "hello")
		d := time.Since(begin)
		cancel()
		if err != nil {
			phase := fmt.Sprintf("call %d", i-b.o.execWarmup+1)
			if !measured {
				phase = fmt.Sprintf("warm-up call %d", i+1)
			}
			r.fail(phase, err)
			continue
		}
		if measured {
			r.SamplesMs = append(r.SamplesMs, stats.Ms(d))
		}
	}
	b.logf("exec round trip: %d calls", b.o.execCalls)
}

// call is one timed call of the soak.
type call struct {
	at   time.Duration // start, since the soak began
	d    time.Duration
	kind uint8
	ok   bool
}

var kinds = []string{"exec", "file.write", "file.read"}

// soakErrors collects the soak's failures.
type soakErrors struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (e *soakErrors) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < 10 {
		e.first = append(e.first, fmt.Sprintf(format, args...))
	}
}

// soak runs o.soakSandboxes sandboxes, each driven by a worker with its
// own keep-alive client, for o.soak; a sampler reads the daemon's and its
// sandboxes' memory every second meanwhile.
func (b *bench) soak(ctx context.Context) *schema.ControlplaneSoak {
	n := b.o.soakSandboxes
	res := &schema.ControlplaneSoak{ByKind: map[string]*stats.Summary{}}
	var errs soakErrors

	before := b.snap("before the soak", false)
	res.DaemonRSSStartKB = before.DaemonRSSKB

	// The sampler: every second until stopped.
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopSampler:
				return
			case <-t.C:
				s := b.snap("soak", false)
				res.Memory = append(res.Memory, s)
			}
		}
	}()

	clients := make([]*apiClient, n)
	ids := make([]string, n)
	for i := range clients {
		clients[i] = newClient(b.d.URL, b.d.Token, 2, b.o.callTimeout)
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()

	// Create the sandboxes, 10 at a time.
	var mu sync.Mutex
	var createMs, deleteMs []float64
	sem := make(chan struct{}, 10)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := b.callCtx(ctx)
			defer cancel()
			begin := time.Now()
			id, err := clients[i].create(cctx)
			d := time.Since(begin)
			if err != nil {
				errs.add("worker %d: %v", i, err)
				if id != "" {
					_ = clients[i].delete(cctx, id)
				}
				return
			}
			ids[i] = id
			mu.Lock()
			createMs = append(createMs, stats.Ms(d))
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != "" {
			res.Sandboxes++
		}
	}
	b.logf("soak: %d sandboxes running; calling for %s", res.Sandboxes, b.o.soak)

	calls := make([][]call, n)
	begin := time.Now()
	deadline := begin.Add(b.o.soak)
	for i := range n {
		if ids[i] == "" {
			continue
		}
		wg.Go(func() {
			c, id := clients[i], ids[i]
			var mine []call
			record := func(kind uint8, at time.Time, err error) {
				if err != nil && ctx.Err() != nil {
					return // interrupted: reported once, not per call
				}
				mine = append(mine, call{at: at.Sub(begin), d: time.Since(at), kind: kind, ok: err == nil})
				if err != nil {
					errs.add("worker %d (%s) at %.1fs: %v", i, id, at.Sub(begin).Seconds(), err)
				}
			}
			for k := 1; time.Now().Before(deadline) && ctx.Err() == nil; k++ {
				cctx, cancel := b.callCtx(ctx)
				word := "w" + strconv.Itoa(i) + "-" + strconv.Itoa(k)
				body := execBody(word)
				at := time.Now()
				record(0, at, c.echo(cctx, id, body, word))
				if k%b.o.fileEvery == 0 {
					data := []byte("soak worker " + strconv.Itoa(i) + " call " + strconv.Itoa(k) + "\n")
					at = time.Now()
					err := c.writeFile(cctx, id, "/workspace/soak.txt", data)
					record(1, at, err)
					if err == nil {
						at = time.Now()
						record(2, at, c.readFile(cctx, id, "/workspace/soak.txt", data))
					}
				}
				cancel()
			}
			calls[i] = mine
		})
	}
	wg.Wait()
	res.ElapsedSec = time.Since(begin).Seconds()

	// With the sandboxes still running: their memory and the daemon's
	// high-water mark, and the daemon's own latency figures.
	end := b.snap("end of the soak, sandboxes running", true)
	res.DaemonHWMKB = end.DaemonHWMKB
	res.SandboxEndPSSKB = end.SandboxPSSKB
	if text, err := b.c.metrics(ctx); err == nil {
		res.ServerLatency = parseHistograms(text, "moat_call_duration_seconds")
	} else {
		b.logf("soak: reading /metrics: %v", err)
	}

	// Delete the sandboxes, 10 at a time.
	for i := range n {
		if ids[i] == "" {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := b.callCtx(context.Background())
			defer cancel()
			t := time.Now()
			if err := clients[i].delete(cctx, ids[i]); err != nil {
				errs.add("worker %d: %v", i, err)
				return
			}
			mu.Lock()
			deleteMs = append(deleteMs, stats.Ms(time.Since(t)))
			mu.Unlock()
		})
	}
	wg.Wait()
	close(stopSampler)
	<-samplerDone

	// Totals.
	var all []float64
	byKind := make([][]float64, len(kinds))
	var perSec [][]call
	for _, cs := range calls {
		for _, c := range cs {
			res.Calls++
			if c.ok {
				all = append(all, stats.Ms(c.d))
				byKind[c.kind] = append(byKind[c.kind], stats.Ms(c.d))
			}
			s := int(c.at / time.Second)
			for len(perSec) <= s {
				perSec = append(perSec, nil)
			}
			perSec[s] = append(perSec[s], c)
		}
	}
	for t, cs := range perSec {
		sec := schema.SoakSecond{T: t, Calls: len(cs)}
		var lat []float64
		for _, c := range cs {
			if !c.ok {
				sec.Errors++
			}
			lat = append(lat, stats.Ms(c.d))
		}
		slices.Sort(lat)
		if len(lat) > 0 {
			sec.P50Ms, sec.P99Ms, sec.MaxMs = stats.Percentile(lat, 0.5), stats.Percentile(lat, 0.99), lat[len(lat)-1]
		}
		res.PerSecond = append(res.PerSecond, sec)
	}
	res.Errors = errs.n
	res.FirstErrors = errs.first
	if res.ElapsedSec > 0 {
		res.Throughput = float64(res.Calls) / res.ElapsedSec
	}
	res.Latency = stats.Of(all)
	for k, xs := range byKind {
		if s := stats.Of(xs); s != nil {
			res.ByKind[kinds[k]] = s
		}
	}
	res.Create = stats.Of(createMs)
	res.Delete = stats.Of(deleteMs)
	for _, s := range append(res.Memory, end) {
		res.DaemonRSSPeakKB = max(res.DaemonRSSPeakKB, s.DaemonRSSKB)
		if s.SandboxRSSKB > res.SandboxPeakRSSKB {
			res.SandboxPeakRSSKB, res.SandboxPeakProcs = s.SandboxRSSKB, s.SandboxProcs
		}
	}
	if len(res.Memory) > 0 {
		res.DaemonRSSLastKB = res.Memory[len(res.Memory)-1].DaemonRSSKB
	} else {
		res.DaemonRSSLastKB = end.DaemonRSSKB
	}
	b.rep.Memory = append(b.rep.Memory, before, end)
	b.logf("soak: %d calls, %d errors, %.1f calls/s", res.Calls, res.Errors, res.Throughput)
	for _, e := range errs.first {
		b.logf("soak error: %s", e)
	}
	return res
}

// parseHistograms estimates the 0.5 and 0.99 quantiles, in ms, of each
// op's series of the histogram name in a Prometheus text exposition, the
// way histogram_quantile does: linear interpolation inside the bucket the
// rank falls in.
func parseHistograms(text, name string) map[string]map[string]float64 {
	type bucket struct{ le, count float64 }
	series := map[string][]bucket{}
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, name+"_bucket{")
		if !ok {
			continue
		}
		labels, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		var op, le string
		for l := range strings.SplitSeq(labels, ",") {
			k, v, _ := strings.Cut(l, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "op":
				op = v
			case "le":
				le = v
			}
		}
		bound, err1 := strconv.ParseFloat(strings.TrimPrefix(le, "+"), 64)
		count, err2 := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if op == "" || err1 != nil || err2 != nil {
			continue
		}
		series[op] = append(series[op], bucket{bound, count})
	}
	out := map[string]map[string]float64{}
	for op, bs := range series {
		total := bs[len(bs)-1].count
		if total == 0 {
			continue
		}
		out[op] = map[string]float64{}
		for _, q := range []string{"0.5", "0.99"} {
			p, _ := strconv.ParseFloat(q, 64)
			rank := p * total
			lo, prev := 0.0, 0.0
			for _, b := range bs {
				if b.count >= rank {
					v := b.le
					if math.IsInf(v, 1) {
						v = lo // past the last bound: report it
					} else if b.count > prev {
						v = lo + (b.le-lo)*(rank-prev)/(b.count-prev)
					}
					out[op][q] = v * 1000
					break
				}
				lo, prev = b.le, b.count
			}
		}
	}
	return out
}
