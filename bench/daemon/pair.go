package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// tpAcc is one daemon at one level while the rounds run: the figures and
// the latencies they are computed from.
type tpAcc struct {
	schema.TPSide
	samples []float64
}

// side is one daemon of the comparison.
type side struct {
	name   string // "new" or "old"
	d      *moatd.Daemon
	c      *client
	store  string
	sbs    []string
	tp     map[int]*tpAcc
	auth   *schema.AuthSide
	before uint64 // the tape's last seq before the auth flood
	info   *schema.Serve
}

// pairPhases starts a new daemon and an old one, and runs the exec
// throughput and the auth flood on both, alternating.
func pairPhases(ctx context.Context, o *options, bin string, old *oldTree, rep *schema.Daemon, rng *rand.Rand, logf func(string, ...any)) {
	tmp, err := os.MkdirTemp("", "moat-bench-daemon-stores-")
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
		return
	}
	defer os.RemoveAll(tmp)
	maxLevel := slices.Max(o.levels)
	limit := fmt.Sprint(max(64, maxLevel))
	start := func(name, b string) *side {
		st := filepath.Join(tmp, name)
		d, err := moatd.Start(ctx, b, "moat-bench-daemon-"+name+"-", []string{"--store", st, "--max-sandboxes", limit, "--max-per-tenant", limit}, 30*time.Second)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("starting the %s daemon: %v", name, err))
			return nil
		}
		logf("%s daemon pid %d on %s", name, d.PID, d.URL)
		return &side{name: name, d: d, c: newClient(d.URL, 2*maxLevel+o.authClients, o.callTimeout), store: st, tp: map[int]*tpAcc{},
			info: &schema.Serve{Role: name, Command: machine.ShellQuote(d.Argv)}}
	}
	var sides []*side
	if s := start("new", bin); s != nil {
		sides = append(sides, s)
	}
	if old != nil {
		if s := start("old", old.bin); s != nil {
			sides = append(sides, s)
		}
	}
	stopped := false
	stopAll := func() {
		if stopped {
			return
		}
		stopped = true
		for _, s := range sides {
			s.c.close()
			took, err := s.d.StopKeep(30 * time.Second)
			s.info.StopMs, s.info.ExitedOK = stats.Ms(took), err == nil
			if err != nil {
				rep.Errors = append(rep.Errors, fmt.Sprintf("stopping the %s daemon: %v", s.name, err))
			}
			s.info.LogLines, s.info.LogProblems, s.info.FirstProblems = s.d.LogProblems()
			rep.Daemons = append(rep.Daemons, *s.info)
		}
	}
	defer func() {
		stopAll()
		for _, s := range sides {
			s.d.RemoveData()
		}
	}()
	if len(sides) == 0 {
		return
	}

	if o.Rounds > 0 {
		rep.Throughput = throughput(ctx, o, sides, rng, logf, &rep.Errors)
	}
	if o.authRounds > 0 && ctx.Err() == nil {
		rep.Auth = &schema.AuthFlood{Request: "GET /v1/sandboxes with a well-formed token the daemon does not know", Clients: o.authClients,
			WindowSec: o.authWindow.Seconds(), Rounds: o.authRounds}
		for _, s := range sides {
			sc, err := scanTape(filepath.Join(s.d.DataDir(), "audit"), 0)
			if err != nil {
				rep.Errors = append(rep.Errors, fmt.Sprintf("%s daemon's audit tape: %v", s.name, err))
			}
			s.before = sc.maxSeq
			s.auth = &schema.AuthSide{Daemon: s.name}
		}
		bad := "moat_" + strings.Repeat("0bad", 16)
		for r := range o.authRounds {
			for _, s := range shuffled(rng, sides) {
				if ctx.Err() != nil {
					break
				}
				authWindow(ctx, o, s, bad)
				logf("auth flood round %d, %s: %d requests so far, %.0f answered/s", r+1, s.name, s.auth.Requests, float64(s.auth.Requests)/s.auth.Seconds)
			}
		}
		// The new daemon writes its counts at an interval, and what it
		// still holds when it stops: read the tapes after the stop.
		stopAll()
		for _, s := range sides {
			a := s.auth
			a.PerSec = float64(a.Unauthorized+a.Limited) / a.Seconds
			sc, err := scanTape(filepath.Join(s.d.DataDir(), "audit"), s.before)
			if err != nil {
				rep.Errors = append(rep.Errors, fmt.Sprintf("%s daemon's audit tape: %v", s.name, err))
			}
			a.AuditEvents, a.AuditBytes, a.AuditCounted, a.EventsMissing = sc.authEvents, sc.authBytes, sc.authCounted, sc.missing
			if a.Requests > 0 {
				a.EventsPer1000 = float64(a.AuditEvents+a.EventsMissing) * 1000 / float64(a.Requests)
				perEvent := 0.0
				if a.AuditEvents > 0 {
					perEvent = float64(a.AuditBytes) / float64(a.AuditEvents)
				}
				a.BytesPer1000 = (float64(a.AuditBytes) + perEvent*float64(a.EventsMissing)) * 1000 / float64(a.Requests)
			}
			if s.name == "new" {
				rep.Auth.New = a
			} else {
				rep.Auth.Old = a
			}
			logf("auth flood, %s: %d requests (%d × 401, %d × 429), %.0f/s; %d audit events (%.2f per 1000), %d bytes, counting %d failures",
				s.name, a.Requests, a.Unauthorized, a.Limited, a.PerSec, a.AuditEvents, a.EventsPer1000, a.AuditBytes, a.AuditCounted)
		}
		if n, od := rep.Auth.New, rep.Auth.Old; n != nil && od != nil {
			rep.Auth.RateRatio = div(n.PerSec, od.PerSec)
			rep.Auth.EventsRatio = div(n.EventsPer1000, od.EventsPer1000)
		}
	}
}

func div(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	r := a / b
	return &r
}

func shuffled[T any](rng *rand.Rand, xs []T) []T {
	out := slices.Clone(xs)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// throughput runs the exec throughput: every level on both daemons each
// round, in a shuffled order.
func throughput(ctx context.Context, o *options, sides []*side, rng *rand.Rand, logf func(string, ...any), errs *[]string) *schema.Throughput {
	maxLevel := slices.Max(o.levels)
	res := &schema.Throughput{Exec: "POST /v1/sandboxes/ID/exec {\"args\":[\"/bin/true\"]}, each client in a sandbox of its own", WindowSec: o.window.Seconds(), Rounds: o.Rounds}
	tok := func(s *side) string { return s.d.Token }
	var ready []*side
	for _, s := range sides {
		ok := true
		for range maxLevel {
			id, err := s.c.create(ctx, tok(s))
			if err != nil {
				*errs = append(*errs, fmt.Sprintf("%s daemon: create: %v", s.name, err))
				ok = false
				break
			}
			s.sbs = append(s.sbs, id)
		}
		if ok {
			ready = append(ready, s)
		}
	}
	// Warm-up, not recorded: every sandbox once, then --warmup windows of
	// a second at the highest level.
	for _, s := range ready {
		for _, id := range s.sbs {
			if _, err := s.c.exec(ctx, tok(s), id, &execBody{Args: []string{"/bin/true"}}); err != nil {
				*errs = append(*errs, fmt.Sprintf("%s daemon: warm-up exec: %v", s.name, err))
			}
		}
		for range o.Warmup {
			window(ctx, s, maxLevel, time.Second)
		}
	}
	for r := range o.Rounds {
		for _, n := range shuffled(rng, o.levels) {
			for _, s := range shuffled(rng, ready) {
				if ctx.Err() != nil {
					break
				}
				calls, secs, lat, werrs := window(ctx, s, n, o.window)
				t := s.tp[n]
				if t == nil {
					t = &tpAcc{}
					s.tp[n] = t
				}
				t.Calls += calls
				t.Seconds += secs
				t.RoundCallsPerS = append(t.RoundCallsPerS, float64(calls)/secs)
				t.samples = append(t.samples, lat...)
				t.Errors += len(werrs)
				for _, e := range werrs {
					if len(t.FirstErrors) < 5 {
						t.FirstErrors = append(t.FirstErrors, e)
					}
				}
				logf("round %d, %d client(s), %s daemon: %.0f calls/s", r+1, n, s.name, float64(calls)/secs)
			}
		}
	}
	for _, n := range o.levels {
		l := schema.TPLevel{Clients: n}
		for _, s := range ready {
			t := s.tp[n]
			if t == nil {
				continue
			}
			if t.Seconds > 0 {
				t.CallsPerS = float64(t.Calls) / t.Seconds
			}
			t.Latency = stats.Of(t.samples)
			if s.name == "new" {
				l.New = &t.TPSide
			} else {
				l.Old = &t.TPSide
			}
		}
		if l.New != nil && l.Old != nil {
			l.Ratio = div(l.New.CallsPerS, l.Old.CallsPerS)
			if l.New.Latency != nil && l.Old.Latency != nil {
				l.P50Ratio = div(l.New.Latency.P50, l.Old.Latency.P50)
			}
		}
		res.Levels = append(res.Levels, l)
	}
	// The sandboxes go before the auth flood.
	for _, s := range ready {
		for _, id := range s.sbs {
			if err := s.c.delete(ctx, tok(s), id); err != nil {
				*errs = append(*errs, fmt.Sprintf("%s daemon: delete: %v", s.name, err))
			}
		}
	}
	return res
}

// window runs n clients, each execing /bin/true in a sandbox of its own
// in a loop, until d has passed; it returns the successful calls, the
// seconds until the last call ended, their latencies in ms and the errors.
func window(ctx context.Context, s *side, n int, d time.Duration) (calls int, secs float64, lat []float64, errs []string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		id := s.sbs[i]
		wg.Go(func() {
			body := &execBody{Args: []string{"/bin/true"}}
			for time.Since(start) < d && ctx.Err() == nil {
				t0 := time.Now()
				_, err := s.c.exec(ctx, s.d.Token, id, body)
				ms := stats.Ms(time.Since(t0))
				mu.Lock()
				if err != nil {
					errs = append(errs, err.Error())
				} else {
					calls++
					lat = append(lat, ms)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return calls, time.Since(start).Seconds(), lat, errs
}

// authWindow sends bad-token requests from o.authClients clients for
// o.authWindow and counts the answers.
func authWindow(ctx context.Context, o *options, s *side, bad string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	a := s.auth
	start := time.Now()
	for range o.authClients {
		wg.Go(func() {
			for time.Since(start) < o.authWindow && ctx.Err() == nil {
				resp, err := s.c.send(ctx, http.MethodGet, "/v1/sandboxes", bad, nil)
				status := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				a.Requests++
				switch status {
				case http.StatusUnauthorized:
					a.Unauthorized++
				case http.StatusTooManyRequests:
					a.Limited++
				default:
					a.Other++
					if len(a.FirstOther) < 5 {
						if err != nil {
							a.FirstOther = append(a.FirstOther, err.Error())
						} else {
							a.FirstOther = append(a.FirstOther, fmt.Sprintf("HTTP %d", status))
						}
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	a.Seconds += time.Since(start).Seconds()
}

// tapeScan is what an audit tape holds after a sequence number.
type tapeScan struct {
	maxSeq      uint64
	authEvents  int
	authBytes   int64
	authCounted int64
	// missing counts the events after the sequence number no longer on
	// disk (rotated away).
	missing int
}

// scanTape reads every file of an audit tape directory.
func scanTape(dir string, after uint64) (tapeScan, error) {
	var sc tapeScan
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return sc, err
	}
	seen := 0
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return sc, err
		}
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for s.Scan() {
			var ev struct {
				Seq    uint64 `json:"seq"`
				Kind   string `json:"kind"`
				Result struct {
					Count *int64 `json:"count"`
				} `json:"result"`
			}
			if json.Unmarshal(s.Bytes(), &ev) != nil {
				continue
			}
			sc.maxSeq = max(sc.maxSeq, ev.Seq)
			if ev.Seq <= after {
				continue
			}
			seen++
			if ev.Kind == "auth.denied" {
				sc.authEvents++
				sc.authBytes += int64(len(s.Bytes()) + 1)
				if ev.Result.Count != nil {
					sc.authCounted += *ev.Result.Count
				} else {
					sc.authCounted++
				}
			}
		}
		err = s.Err()
		f.Close()
		if err != nil {
			return sc, err
		}
	}
	if sc.maxSeq > after {
		sc.missing = max(0, int(sc.maxSeq-after)-seen)
	}
	return sc, nil
}
