package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
	"github.com/moat-sandbox/moat/bench/internal/procfs"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
	"github.com/moat-sandbox/moat/client"
)

// bench is one run: the daemon, its client and the sandboxes held alive.
type bench struct {
	o     *options
	rep   *schema.Density
	logf  func(string, ...any)
	d     *moatd.Daemon
	c     *client.Client
	timer *machine.Timer
	run   []string // moat run -- /bin/true
	base  reading  // with the daemon up and no sandbox
	live  []*client.Sandbox
}

// execute runs the levels and tears everything down; failures go to rep.
func execute(ctx context.Context, o *options, rep *schema.Density, logf func(string, ...any)) {
	bin := o.Moat
	var err error
	rep.Versions["moat"] = machine.Version(bin, "version")
	b := &bench{o: o, rep: rep, logf: logf, run: []string{bin, "run", "--", "/bin/true"}}

	// The daemon's caps are raised to the top level plus the sample
	// sandbox; its timeouts outlast the run, so no sandbox is reaped.
	limit := strconv.Itoa(o.levels[len(o.levels)-1] + 8)
	b.d, err = moatd.Start(ctx, bin, "moat-bench-density-", []string{
		"--max-sandboxes", limit, "--max-per-tenant", limit,
		"--idle-timeout", "24h", "--default-timeout", "24h",
	}, 30*time.Second)
	if err != nil {
		fail(rep, "start the daemon: %v", err)
		return
	}
	rep.Daemon.Command = machine.ShellQuote(b.d.Argv)
	logf("daemon pid %d listening on %s", b.d.PID, b.d.URL)
	defer b.stopDaemon()

	if b.c, err = client.New(client.WithHTTP(b.d.URL, b.d.Token)); err != nil {
		fail(rep, "client: %v", err)
		return
	}
	defer b.c.Close()
	if b.timer, err = machine.NewTimer(o.callTimeout, false); err != nil {
		fail(rep, "timer: %v", err)
		return
	}
	defer b.timer.Close()

	// The baseline: one sandbox made and deleted first, so the daemon's
	// first-use allocations (policy, store, HTTP) are not counted as the
	// sandboxes'.
	if _, err := b.tti(ctx); err != nil {
		fail(rep, "first sandbox: %v", err)
		return
	}
	runtime.GC()
	b.base = read(b.d.PID)
	rep.Base = b.base.baseline()

	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	for _, n := range o.levels {
		lv, ok := b.level(ctx, n, rng)
		rep.Levels = append(rep.Levels, lv)
		if !ok || ctx.Err() != nil {
			break
		}
	}
	rep.Density = b.density()
	b.teardown(ctx)
}

// level fills the daemon up to n live sandboxes and measures there; false
// when it could not reach n.
func (b *bench) level(ctx context.Context, n int, rng *rand.Rand) (schema.DensityLevel, bool) {
	lv := schema.DensityLevel{Live: n}
	begin := time.Now()
	var creates []float64
	for len(b.live) < n {
		cctx, cancel := context.WithTimeout(ctx, b.o.callTimeout)
		t0 := time.Now()
		sb, err := b.c.CreateSandbox(cctx, api.CreateSandbox{})
		d := time.Since(t0)
		cancel()
		if err != nil {
			fail(b.rep, "create sandbox %d of %d: %v", len(b.live)+1, n, err)
			lv.Live = len(b.live)
			break
		}
		creates = append(creates, stats.Ms(d))
		b.live = append(b.live, sb)
	}
	lv.FillSec = time.Since(begin).Seconds()
	lv.Create = stats.Of(creates)
	if lv.Live == 0 {
		return lv, false
	}
	b.logf("%d live sandboxes (filled in %.1f s)", lv.Live, lv.FillSec)

	runtime.GC()
	lv.Memory = read(b.d.PID).perSandbox(b.base, lv.Live)

	// Start latency with lv.Live sandboxes alive: the two kinds alternate
	// in a fresh random order each round.
	kinds := []func() (time.Duration, error){
		func() (time.Duration, error) { return b.tti(ctx) },
		func() (time.Duration, error) { return b.timer.Time(b.run) },
	}
	samples := make([][]float64, len(kinds))
	order := []int{0, 1}
	for round := range b.o.Warmup + b.o.Rounds {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		runtime.GC()
		for _, k := range order {
			d, err := kinds[k]()
			if err != nil {
				fail(b.rep, "at %d live, %s: %v", lv.Live, []string{"create → echo", "moat run"}[k], err)
				continue
			}
			if round >= b.o.Warmup {
				samples[k] = append(samples[k], stats.Ms(d))
			}
		}
	}
	lv.TTISamples, lv.RunSamples = samples[0], samples[1]
	lv.TTI, lv.Run = stats.Of(lv.TTISamples), stats.Of(lv.RunSamples)
	if lv.TTI != nil && lv.Run != nil {
		b.logf("at %d live: create → echo p50 %.2f ms, moat run p50 %.2f ms, moat PSS %.0f KiB per sandbox",
			lv.Live, lv.TTI.P50, lv.Run.P50, lv.Memory.MoatPSSPerSandboxKiB)
	}
	return lv, lv.Live == n
}

// tti times one create → first echo; the sandbox is deleted afterwards,
// untimed.
func (b *bench) tti(ctx context.Context) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, b.o.callTimeout)
	defer cancel()
	t0 := time.Now()
	sb, err := b.c.CreateSandbox(cctx, api.CreateSandbox{})
	if err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	res, err := sb.Exec(cctx, api.Exec{Args: []string{"echo", "hello"}})
	d := time.Since(t0)
	if err == nil && (res.ExitCode != 0 || res.Stdout != "hello\n") {
		err = fmt.Errorf("echo hello: exit %d, stdout %q, %s", res.ExitCode, res.Stdout, res.Error)
	}
	if derr := sb.Delete(cctx); err == nil && derr != nil {
		err = fmt.Errorf("delete: %w", derr)
	}
	return d, err
}

// teardown deletes the live sandboxes, timed.
func (b *bench) teardown(ctx context.Context) {
	if len(b.live) == 0 {
		return
	}
	begin := time.Now()
	var dels []float64
	for _, sb := range b.live {
		cctx, cancel := context.WithTimeout(ctx, b.o.callTimeout)
		t0 := time.Now()
		err := sb.Delete(cctx)
		cancel()
		if err != nil {
			fail(b.rep, "delete %s: %v", sb.ID(), err)
			continue
		}
		dels = append(dels, stats.Ms(time.Since(t0)))
	}
	b.rep.Teardown = &schema.Teardown{Deleted: len(dels), Sec: time.Since(begin).Seconds(), Delete: stats.Of(dels)}
	b.logf("deleted %d sandboxes in %.1f s", len(dels), b.rep.Teardown.Sec)
	b.live = nil
}

// stopDaemon stops the daemon (it deletes what is left) and records its
// log's warnings.
func (b *bench) stopDaemon() {
	took, err := b.d.Stop(5 * time.Minute)
	if err != nil {
		fail(b.rep, "daemon: %v", err)
	}
	sv := &b.rep.Daemon
	sv.StopMs, sv.ExitedOK = stats.Ms(took), err == nil
	sv.LogLines, sv.LogProblems, sv.FirstProblems = b.d.LogProblems()
}

// reading is what the machine and moat's processes hold at one moment.
type reading struct {
	mem           procfs.Meminfo
	tasks         int // threads on the whole system (/proc/loadavg)
	daemon        procfs.Rollup
	daemonFDs     int
	procs         int // processes below the daemon: the sandboxes' inits
	procsPSS      int64
	procsPSSAnon  int64
	procsThreads  int
	daemonThreads int
}

func read(daemon int) reading {
	r := reading{tasks: totalTasks(), daemonFDs: procfs.CountFDs(daemon)}
	r.mem, _ = procfs.ReadMeminfo()
	r.daemon, _ = procfs.ReadRollup(daemon)
	st, _ := procfs.ReadStatus(daemon)
	r.daemonThreads = st.Threads
	for _, p := range procfs.Descendants(daemon) {
		ro, ok := procfs.ReadRollup(p)
		if !ok {
			continue
		}
		s, _ := procfs.ReadStatus(p)
		r.procs++
		r.procsPSS += ro.PSS
		r.procsPSSAnon += ro.PSSAnon
		r.procsThreads += s.Threads
	}
	return r
}

func (r reading) baseline() schema.DensityBase {
	return schema.DensityBase{MemAvailableKiB: r.mem.Available, KernelKiB: r.mem.Kernel, DaemonPSSKiB: r.daemon.PSS,
		DaemonFDs: r.daemonFDs, Tasks: r.tasks}
}

// perSandbox is r's growth over base divided among n sandboxes.
func (r reading) perSandbox(base reading, n int) schema.DensityMemory {
	per := func(v int64) float64 { return float64(v) / float64(n) }
	return schema.DensityMemory{
		SandboxProcs:         r.procs,
		SandboxPSSKiB:        r.procsPSS,
		SandboxPSSAnonKiB:    r.procsPSSAnon,
		DaemonPSSKiB:         r.daemon.PSS,
		DaemonPSSBaseKiB:     base.daemon.PSS,
		MoatPSSPerSandboxKiB: per(r.procsPSS + r.daemon.PSS - base.daemon.PSS),
		InitPSSPerSandboxKiB: per(r.procsPSS),
		SystemPerSandboxKiB:  per(base.mem.Available - r.mem.Available),
		KernelPerSandboxKiB:  per(r.mem.Kernel - base.mem.Kernel),
		ThreadsPerSandbox:    float64(r.procsThreads) / float64(n),
		TasksPerSandbox:      per(int64(r.tasks - base.tasks)),
		DaemonFDsPerSandbox:  per(int64(r.daemonFDs - base.daemonFDs)),
		DaemonThreads:        r.daemonThreads,
	}
}

// totalTasks is the number of threads on the system: the fourth field of
// /proc/loadavg is running/total scheduling entities.
func totalTasks() int {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0
	}
	_, total, _ := strings.Cut(f[3], "/")
	n, _ := strconv.Atoi(total)
	return n
}

// density sums up the run: the most sandboxes held, moat's memory per
// sandbox there, and the projection of what would bind first beyond it.
func (b *bench) density() schema.DensityResult {
	var d schema.DensityResult
	var top *schema.DensityLevel
	for i := range b.rep.Levels {
		if lv := &b.rep.Levels[i]; lv.Live > 0 && (top == nil || lv.Live > top.Live) {
			top = lv
		}
	}
	if top == nil {
		return d
	}
	d.Live = top.Live
	d.MoatPSSPerSandboxKiB = top.Memory.MoatPSSPerSandboxKiB
	d.Projection = b.project(top)
	return d
}

// project estimates the sandboxes this machine could hold, from each limit
// and the per-sandbox costs measured at top: memory (what was available
// before the first sandbox, at the system-wide cost), pids (kernel pid_max
// and threads-max, at the threads each costs), the daemon's open files,
// the kernel's per-user namespace limits and v1 memory cgroup ids.
func (b *bench) project(top *schema.DensityLevel) *schema.Projection {
	m := top.Memory
	p := &schema.Projection{Limits: map[string]int{}}
	add := func(name string, free, each float64) {
		if each > 0 && free >= 0 {
			p.Limits[name] = int(math.Floor(free / each))
		}
	}
	add("memory", float64(b.base.mem.Available), m.SystemPerSandboxKiB)
	pidMax := readInt("/proc/sys/kernel/pid_max")
	threadsMax := readInt("/proc/sys/kernel/threads-max")
	add("pids", float64(min(pidMax, threadsMax)-b.base.tasks), m.TasksPerSandbox)
	if nofile := openFileLimit(b.d.PID); nofile > 0 {
		add("daemon open files", float64(nofile-b.base.daemonFDs), m.DaemonFDsPerSandbox)
	}
	ns := math.MaxInt
	for _, k := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		if v := readInt("/proc/sys/user/max_" + k + "_namespaces"); v > 0 {
			ns = min(ns, v)
		}
	}
	if ns < math.MaxInt {
		add("namespaces", float64(ns), 1)
	}
	// Memory cgroup ids are 16 bits (MEM_CGROUP_ID_MAX) on v1 and v2.
	add("memory cgroups", float64(65535-memoryCgroups()), 1)
	first := ""
	for name, n := range p.Limits {
		if first == "" || n < p.Limits[first] || (n == p.Limits[first] && name < first) {
			first = name
		}
	}
	p.Max, p.Limit = p.Limits[first], first
	return p
}

func readInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// openFileLimit is pid's soft RLIMIT_NOFILE from /proc/PID/limits.
func openFileLimit(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}

// memoryCgroups is the number of memory cgroups in use (/proc/cgroups).
func memoryCgroups() int {
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "memory" {
			n, _ := strconv.Atoi(f[2])
			return n
		}
	}
	return 0
}
