package main

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
	"github.com/moat-sandbox/moat/bench/internal/procfs"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// toml is the [output] section of a daemon running with budget b.
func toml(b schema.FloodBudget) string {
	return fmt.Sprintf("[output]\nmax_limit = %q\nmemory_budget = %q\ntenant_memory_budget = %q\ntenant_disk_quota = %q\nretention = \"1h\"\n",
		sizeStr(b.MaxLimit), sizeStr(b.MemoryBudget), sizeStr(b.TenantMemoryBudget), sizeStr(b.TenantDiskQuota))
}

// rssSampler reads the daemon's VmRSS every interval until stopped.
type rssSampler struct {
	pid   int
	t0    time.Time
	mu    sync.Mutex
	peak  int64
	pts   [][2]float64
	stop  chan struct{}
	done  chan struct{}
	every time.Duration
}

func startSampler(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{pid: pid, t0: time.Now(), stop: make(chan struct{}), done: make(chan struct{}), every: every}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() int64 {
	rss, ok := procfs.RSSKB(s.pid)
	if !ok {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peak = max(s.peak, rss)
	s.pts = append(s.pts, [2]float64{time.Since(s.t0).Seconds(), float64(rss)})
	return rss
}

// peakSince is the highest sample so far.
func (s *rssSampler) peakNow() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

func (s *rssSampler) finish() [][2]float64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	// Round for the JSON: ms and KiB.
	for i := range s.pts {
		s.pts[i][0] = float64(int64(s.pts[i][0]*1000)) / 1000
	}
	return s.pts
}

// resetHWM sets the daemon's VmHWM to its current RSS.
func resetHWM(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// runFlood runs one output flood on a daemon of its own.
func runFlood(ctx context.Context, o *options, bin string, fc schema.FloodBudget, logf func(string, ...any)) (fr schema.Flood, info *schema.Serve) {
	fr = schema.Flood{FloodBudget: fc, Tenants: o.tenants, GoalKiB: memoryBound(fc.MemoryBudget, o.execs+o.background) / 1024, AfterSec: o.after.Seconds()}
	fail := func(format string, args ...any) {
		fr.Errors = append(fr.Errors, fmt.Sprintf(format, args...))
		fr.Failed++
	}
	tmp, err := os.MkdirTemp("", "moat-bench-daemon-cfg-")
	if err != nil {
		fail("%v", err)
		return
	}
	defer os.RemoveAll(tmp)
	cfg := filepath.Join(tmp, "config.toml")
	if err := os.WriteFile(cfg, []byte(toml(fc)), 0o600); err != nil {
		fail("%v", err)
		return
	}
	d, err := moatd.Start(ctx, bin, "moat-bench-daemon-flood-",
		[]string{"--config", cfg, "--store", filepath.Join(tmp, "store"), "--max-sandboxes", "64", "--max-per-tenant", "64"}, 30*time.Second)
	if err != nil {
		fail("starting the daemon: %v", err)
		return
	}
	info = &schema.Serve{Role: "flood, " + fc.Name, Command: machine.ShellQuote(d.Argv)}
	defer func() {
		took, err := d.Stop(30 * time.Second)
		info.StopMs, info.ExitedOK = stats.Ms(took), err == nil
		if err != nil {
			fr.Errors = append(fr.Errors, "stopping the daemon: "+err.Error())
		}
		info.LogLines, info.LogProblems, info.FirstProblems = d.LogProblems()
	}()
	c := newClient(d.URL, 2*(o.execs+o.background)+8, o.callTimeout)
	defer c.close()

	names := []string{"default"}
	for i := 1; i < o.tenants; i++ {
		names = append(names, "t"+strconv.Itoa(i))
	}
	tok, err := addTenants(ctx, d, c, names)
	if err != nil {
		fail("%v", err)
		return
	}
	sbs := map[string]string{}
	for _, t := range names {
		id, err := c.create(ctx, tok[t])
		if err != nil {
			fail("create for %s: %v", t, err)
			return
		}
		sbs[t] = id
		if _, err := c.exec(ctx, tok[t], id, &execBody{Args: []string{"true"}}); err != nil {
			fail("warm-up exec for %s: %v", t, err)
			return
		}
	}
	// The baseline: the daemon idle with its sandboxes made. A second
	// lets the first calls' garbage be collected.
	time.Sleep(time.Second)
	base, ok := procfs.RSSKB(d.PID)
	if !ok {
		fail("reading the daemon's RSS")
		return
	}
	fr.BaselineRSSKiB = base
	if err := resetHWM(d.PID); err != nil {
		fail("resetting VmHWM: %v", err)
		return
	}
	smp := startSampler(d.PID, o.sampleEvery)

	execBytes, bgBytes := int64(o.execMiB)<<20, int64(o.backgroundMiB)<<20
	fr.Exec = schema.ExecAccount{N: o.execs, Bytes: execBytes, Printed: int64(o.execs) * execBytes}
	fr.Background = schema.BackgroundAccount{N: o.background, Bytes: bgBytes, Printed: int64(o.background) * bgBytes}
	shell := func(n int64) []string { return []string{"sh", "-c", fmt.Sprintf("yes flood | head -c %d", n)} }

	var mu sync.Mutex
	var execMs []float64
	errorf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fr.Failed++
		if len(fr.Errors) < 20 {
			fr.Errors = append(fr.Errors, fmt.Sprintf(format, args...))
		}
	}
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for i := range o.background {
		t := names[i%len(names)]
		wg.Go(func() {
			<-begin
			var p api.Process
			err := c.call(ctx, http.MethodPost, "/v1/sandboxes/"+sbs[t]+"/processes", tok[t],
				&execBody{Args: shell(bgBytes), OutputLimit: int(fc.MaxLimit)}, http.StatusCreated, &p)
			if err != nil {
				errorf("background start for %s: %v", t, err)
				return
			}
			st, err := c.follow(ctx, tok[t], sbs[t], p.ID)
			if err != nil {
				errorf("background output for %s: %v", t, err)
			}
			if st == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			fr.Background.Received += st.received
			fr.Background.LostBytes += st.lostBytes
			fr.Background.LostEvents += st.lostEvents
			if st.result != nil {
				fr.Background.Counted += st.result.StdoutBytes
			}
		})
	}
	for i := range o.execs {
		t := names[i%len(names)]
		wg.Go(func() {
			<-begin
			t0 := time.Now()
			res, err := c.exec(ctx, tok[t], sbs[t], &execBody{Args: shell(execBytes), OutputLimit: int(fc.MaxLimit), Concurrent: true})
			took := stats.Ms(time.Since(t0))
			if err != nil {
				errorf("exec for %s: %v", t, err)
			}
			if res == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			execMs = append(execMs, took)
			fr.Exec.Counted += res.StdoutBytes
			fr.Exec.Returned += int64(len(res.Stdout))
			if int64(len(res.Stdout)) == execBytes {
				fr.Exec.Whole++
			}
			if res.Truncated {
				fr.Exec.Truncated++
			}
		})
	}
	t0 := time.Now()
	close(begin)
	wg.Wait()
	fr.FloodSec = time.Since(t0).Seconds()
	fr.ExecMs = stats.Of(execMs)
	st, _ := procfs.ReadStatus(d.PID)
	fr.HWMKiB = st.HWMKB
	fr.PeakRSSKiB = smp.peakNow()
	fr.PeakGrowthKiB = max(fr.PeakRSSKiB, fr.HWMKiB) - base

	// The output files: spilled streams and kept texts.
	_ = filepath.WalkDir(filepath.Join(d.DataDir(), "output"), func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() || !strings.HasSuffix(path, ".stdout") {
			return nil
		}
		if fi, err := e.Info(); err == nil {
			fr.Exec.Files++
			fr.Exec.FileBytes += fi.Size()
			if fi.Size() == execBytes {
				fr.Exec.WholeFiles++
			}
		}
		return nil
	})

	// The sandboxes end; the memory should go back.
	for _, t := range names {
		if err := c.delete(ctx, tok[t], sbs[t]); err != nil {
			errorf("delete for %s: %v", t, err)
		}
	}
	c.close()
	time.Sleep(o.after) // the measurement's window, not a synchronisation
	fr.AfterEndRSSKiB = smp.sample()
	fr.AfterEndGrowthKiB = fr.AfterEndRSSKiB - base
	fr.Series = smp.finish()
	fr.Samples = len(fr.Series)
	fr.Accounted, fr.AccountingErrors = account(fr.Exec, fr.Background, o.execs > 0 && fr.Failed == 0)
	logf("  flood took %.1f s; execs: %d whole answers, %d truncated, %d files (%d whole, %.1f MiB); background: %.1f MiB received, %d bytes lost in %d lost events",
		fr.FloodSec, fr.Exec.Whole, fr.Exec.Truncated, fr.Exec.Files, fr.Exec.WholeFiles, float64(fr.Exec.FileBytes)/(1<<20),
		float64(fr.Background.Received)/(1<<20), fr.Background.LostBytes, fr.Background.LostEvents)
	return fr, info
}

// account checks that every byte printed is accounted for: see
// schema.ExecAccount and schema.BackgroundAccount.
func account(e schema.ExecAccount, b schema.BackgroundAccount, checkFiles bool) (bool, []string) {
	var errs []string
	if e.Counted != e.Printed {
		errs = append(errs, fmt.Sprintf("execs printed %d bytes, their answers count %d", e.Printed, e.Counted))
	}
	if short := e.N - e.Whole; short > 0 {
		if e.Truncated < short {
			errs = append(errs, fmt.Sprintf("%d exec answers lack part of their stream but only %d say truncated", short, e.Truncated))
		}
		if checkFiles && e.WholeFiles < short {
			errs = append(errs, fmt.Sprintf("%d exec answers lack part of their stream but only %d output files hold a whole one", short, e.WholeFiles))
		}
	}
	if b.Counted != b.Printed {
		errs = append(errs, fmt.Sprintf("background processes printed %d bytes, their results count %d", b.Printed, b.Counted))
	}
	if b.Received+b.LostBytes != b.Printed {
		errs = append(errs, fmt.Sprintf("background processes printed %d bytes; readers received %d and were told of %d lost (%+d unaccounted)",
			b.Printed, b.Received, b.LostBytes, b.Printed-b.Received-b.LostBytes))
	}
	return len(errs) == 0, errs
}

// memoryBound is the daemon's documented bound on its peak RSS growth
// under output: the budget, the collector's slack (a quarter of it, at
// least 16 MiB) and 256 KiB per call in progress.
func memoryBound(budget int64, calls int) int64 {
	return budget + max(budget/4, 16<<20) + int64(calls)*256<<10
}
