package linux

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/sandbox"
)

// cgroupParent is the cgroup, in every hierarchy moat uses, under which each
// sandbox gets a cgroup of its own named after its uid slot. moat creates
// and removes these and never writes into a cgroup it did not create (the
// parent itself is created once and left in place, empty).
const cgroupParent = "moat"

// cpuPeriod is the CFS period for --cpus quotas, in microseconds.
const cpuPeriod = 100_000

// defaultCPUWeight is the kernel's default CPU weight (cgroup v2
// cpu.weight), what Limits.CPUWeight 0 means.
const defaultCPUWeight = 100

// v1Controllers are the cgroup v1 controllers a sandbox's limits need.
var v1Controllers = []string{"memory", "cpu", "cpuacct", "pids"}

// cgroupLayout is where this host's cgroup hierarchies are.
type cgroupLayout struct {
	v2 bool
	// mounts maps a v1 controller to its hierarchy's mount point; for v2
	// the key "" holds the unified mount point.
	mounts map[string]string
	// swapLimit says the kernel can limit swap (memsw on v1, swap.max
	// on v2); swapOn says the host has active swap.
	swapLimit, swapOn bool
	// cpuset is the v1 cpuset hierarchy's mount point ("" when it is not
	// mounted, and on v2); cpusetOK says budgets can be confined to
	// CPUs (a v1 cpuset hierarchy, or the v2 cpuset controller). Only
	// budgets and their sandboxes have cgroups there (budget_linux.go).
	cpuset   string
	cpusetOK bool
	err      error
}

// describe names the layout for the enforcement report.
func (l *cgroupLayout) describe() string {
	if l.v2 {
		return "v2"
	}
	return "v1 (" + strings.Join(v1Controllers, ", ") + ")"
}

// findCgroups locates the hierarchies once per runtime.
func findCgroups() *cgroupLayout {
	l := &cgroupLayout{mounts: map[string]string{}}
	if cgroups.IsCgroup2UnifiedMode() {
		l.v2 = true
		l.mounts[""] = "/sys/fs/cgroup"
		// memory.swap.max exists in every non-root cgroup of a v2 kernel
		// built with swap accounting, which is the default.
		l.swapLimit = true
		if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
			l.cpusetOK = slices.Contains(strings.Fields(string(b)), "cpuset")
		}
	} else {
		for _, c := range v1Controllers {
			mnt, err := cgroups.FindCgroupMountpoint("", c)
			if err != nil {
				l.err = fmt.Errorf("%w: cgroup controller %q is not mounted: %v", sandbox.ErrUnsupported, c, err)
				return l
			}
			l.mounts[c] = mnt
		}
		_, err := os.Stat(filepath.Join(l.mounts["memory"], "memory.memsw.limit_in_bytes"))
		l.swapLimit = err == nil
		// The freezer pauses a sandbox for a snapshot; without it
		// sandboxes work and snapshots are refused (ErrNoFreezer).
		if mnt, err := cgroups.FindCgroupMountpoint("", "freezer"); err == nil {
			l.mounts["freezer"] = mnt
		}
		if mnt, err := cgroups.FindCgroupMountpoint("", "cpuset"); err == nil {
			l.cpuset, l.cpusetOK = mnt, true
		}
	}
	if b, err := os.ReadFile("/proc/swaps"); err == nil {
		l.swapOn = strings.Count(strings.TrimSpace(string(b)), "\n") > 0
	}
	return l
}

// paths returns the cgroup directories of sandbox slot in each hierarchy
// (a sandbox in no budget).
func (l *cgroupLayout) paths(slot int) map[string]string {
	return l.dirs(l.mounts, strconv.Itoa(slot))
}

// slotPaths returns the cgroup directories of sandbox slot in budget
// ("" for none) in each hierarchy it may be in.
//
// Preconditions: budget is "" or a valid budget id (sandbox.CheckBudgetID).
func (l *cgroupLayout) slotPaths(budget string, slot int) map[string]string {
	if budget == "" {
		return l.paths(slot)
	}
	return childPaths(l.dirs(l.allMounts(), budgetPrefix+budget), slot)
}

// allMounts is every hierarchy a cgroup of moat may be in: the sandboxes'
// and, on v1, the cpuset hierarchy of budgets confined to CPUs.
func (l *cgroupLayout) allMounts() map[string]string {
	if l.cpuset == "" {
		return l.mounts
	}
	m := maps.Clone(l.mounts)
	m["cpuset"] = l.cpuset
	return m
}

// dirs returns the directory rel, relative to moat's parent cgroup, in
// each of mounts.
func (l *cgroupLayout) dirs(mounts map[string]string, rel string) map[string]string {
	p := make(map[string]string, len(mounts))
	for c, mnt := range mounts {
		p[c] = filepath.Join(mnt, cgroupParent, rel)
	}
	return p
}

// childPaths returns the directories of sandbox slot under parent, a
// budget's directories.
func childPaths(parent map[string]string, slot int) map[string]string {
	name := strconv.Itoa(slot)
	p := make(map[string]string, len(parent))
	for c, dir := range parent {
		p[c] = filepath.Join(dir, name)
	}
	return p
}

// sandboxCgroup is one sandbox's cgroup (one directory per hierarchy).
type sandboxCgroup struct {
	mgr   cgroups.Manager
	paths map[string]string
	// cpuCap is the CPU quota of the budget the sandbox is in, on v1
	// (0 for none): v1 refuses a child's quota above its parent's, so
	// the sandbox's own is clamped to it (v2 clamps by itself).
	cpuCap float64
	once   sync.Once

	mu        sync.Mutex
	keptCalls []*callCgroup // call cgroups still holding processes
}

// newCgroup creates the cgroup of slot with lim's limits: moat/SLOT, or
// moat/budget-ID/SLOT inside budget bg (nil for none) in each of the
// budget's hierarchies. A directory left by a crashed moat that held the
// same slot is reclaimed first (the slot's lease proves nobody else owns
// it). With no memory, CPU, pids or CPU weight limit and no budget it
// creates nothing and returns nil (a nil *sandboxCgroup is valid: its
// methods do nothing and usage falls back to getrusage). With always set
// (a long-lived sandbox, whose calls get cgroups of their own) it creates
// the cgroup even without limits.
//
// Preconditions: the caller holds the slot's lease and, with bg, a
// reference on bg (Runtime.acquireBudget).
func newCgroup(l *cgroupLayout, slot int, lim sandbox.Limits, always bool, bg *linuxBudget) (*sandboxCgroup, error) {
	paths := l.paths(slot)
	if bg != nil {
		paths = childPaths(bg.paths, slot)
	}
	if err := reclaimCgroup(paths); err != nil {
		return nil, err
	}
	if lim.MemoryBytes == 0 && lim.CPUs == 0 && lim.Pids == 0 && lim.CPUWeight == 0 && bg == nil && (!always || l.err != nil) {
		return nil, nil
	}
	if l.err != nil {
		return nil, l.err
	}
	var cpuCap float64
	if bg != nil && !l.v2 {
		cpuCap = bg.limits.CPUs
	}
	res, err := l.resources(clampCPUs(lim, cpuCap), false)
	if err != nil {
		return nil, err
	}
	cg := &cgroups.Cgroup{Resources: res}
	var mgr cgroups.Manager
	if l.v2 {
		mgr, err = fs2.NewManager(cg, paths[""])
	} else {
		// The manager's Destroy deletes from the map it was given, while
		// usage may still read c.paths: it gets its own copy.
		mgr, err = fs.NewManager(cg, maps.Clone(paths))
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	c := &sandboxCgroup{mgr: mgr, paths: paths, cpuCap: cpuCap}
	if err := mgr.Apply(-1); err != nil {
		c.destroy()
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	if err := mgr.Set(res); err != nil {
		c.destroy()
		return nil, fmt.Errorf("set cgroup limits: %w", err)
	}
	return c, nil
}

// resources turns lim into cgroup settings. With unset, a zero field is
// written as "no limit" (replacing limits in force) instead of left alone.
func (l *cgroupLayout) resources(lim sandbox.Limits, unset bool) (*cgroups.Resources, error) {
	res := &cgroups.Resources{SkipDevices: true}
	if lim.MemoryBytes > 0 {
		res.Memory = lim.MemoryBytes
		switch {
		case l.swapLimit:
			res.MemorySwap = lim.MemoryBytes // memory+swap == memory: no swap
		case l.swapOn:
			return nil, fmt.Errorf("%w: the host has swap but the kernel cannot limit it per cgroup (swap accounting is off), so --memory cannot keep the sandbox out of swap", sandbox.ErrUnsupported)
		}
	} else if unset {
		res.Memory = -1
		if l.swapLimit {
			res.MemorySwap = -1
		}
	}
	if lim.CPUs > 0 {
		res.CpuPeriod = cpuPeriod
		res.CpuQuota = int64(lim.CPUs * cpuPeriod)
	} else if unset {
		res.CpuPeriod = cpuPeriod
		res.CpuQuota = -1
	}
	if lim.Pids > 0 || unset {
		pids := lim.Pids
		if pids <= 0 {
			pids = -1
		}
		res.PidsLimit = &pids
	}
	if lim.CPUWeight > 0 || unset {
		w := lim.CPUWeight
		if w <= 0 {
			w = defaultCPUWeight
		}
		if l.v2 {
			res.CpuWeight = uint64(w)
		} else {
			res.CpuShares = cpuShares(w)
		}
	}
	return res, nil
}

// cpuShares is the cgroup v1 cpu.shares of CPU weight w (v2 cpu.weight
// units, 1-10000): w*1024/100, at least 2 (the kernel's minimum); the
// default weight, 100, is the default 1024 shares.
func cpuShares(w int) uint64 {
	return uint64(max(2, w*1024/defaultCPUWeight))
}

// clampCPUs returns lim with its CPU quota no larger than cpuCap (0: no
// cap).
func clampCPUs(lim sandbox.Limits, cpuCap float64) sandbox.Limits {
	if cpuCap > 0 && lim.CPUs > cpuCap {
		lim.CPUs = cpuCap
	}
	return lim
}

// setLimits replaces the limits in force.
func (c *sandboxCgroup) setLimits(l *cgroupLayout, lim sandbox.Limits) error {
	if c == nil {
		return errNoCgroup
	}
	res, err := l.resources(clampCPUs(lim, c.cpuCap), true)
	if err != nil {
		return err
	}
	if err := c.mgr.Set(res); err != nil {
		return fmt.Errorf("set cgroup limits: %w", err)
	}
	return nil
}

// freeze pauses (true) or resumes (false) every process of the cgroup.
func (c *sandboxCgroup) freeze(on bool) error {
	if c == nil {
		return errNoCgroup
	}
	if c.paths[""] == "" && c.paths["freezer"] == "" {
		return sandbox.ErrNoFreezer
	}
	state := cgroups.Thawed
	if on {
		state = cgroups.Frozen
	}
	return c.mgr.Freeze(state)
}

// thawV1 resumes a v1 freezer cgroup: frozen processes do not die of
// SIGKILL until thawed, so a cgroup is thawed before it is killed.
func thawV1(paths map[string]string) {
	if p := paths["freezer"]; p != "" {
		_ = cgroups.WriteFile(p, "freezer.state", string(cgroups.Thawed))
	}
}

// taskFDs returns, on cgroup v1, the cgroup's "tasks" files opened for
// writing by the host: the init's main thread writes "0" to each, moving
// itself alone (joinCgroup, package sandboxinit). That thread forks every
// sandbox process, so they all start inside, while the Go runtime's other
// threads stay outside: it
// creates new threads through its template thread while the main thread
// is locked, so a sandbox that exhausts its pids limit can never starve
// the init of threads. A thread that moves itself also skips the kernel's
// global threadgroup lock (an RCU grace period, tens of ms on this host).
// On v2 it returns nothing: see addProcess.
func (c *sandboxCgroup) taskFDs() ([]int, error) {
	if c == nil || c.paths[""] != "" {
		return nil, nil
	}
	var fds []int
	// pids stays last: the agent keeps the last one (CallCgroups).
	var ctrls []string
	for _, opt := range []string{"freezer", "cpuset"} {
		if c.paths[opt] != "" {
			ctrls = append(ctrls, opt)
		}
	}
	ctrls = append(ctrls, v1Controllers...)
	for _, ctrl := range ctrls {
		f, err := cgroups.OpenFile(c.paths[ctrl], "tasks", unix.O_WRONLY)
		if err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("open %s cgroup: %w", ctrl, err)
		}
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		f.Close()
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// addProcess moves the whole init into the cgroup on v2, whose domain
// controllers take whole processes. On v1 it does nothing (taskFDs).
func (c *sandboxCgroup) addProcess(pid int) error {
	if c == nil || c.paths[""] == "" {
		return nil
	}
	if err := c.mgr.AddPid("", pid); err != nil {
		return fmt.Errorf("join cgroup: %w", err)
	}
	return nil
}

// errNoCgroup: the sandbox has no cgroup (no limits were asked for).
var errNoCgroup = errors.New("sandbox has no cgroup")

// oomKills is the cgroup's OOM-kill count (0 without a cgroup).
func (c *sandboxCgroup) oomKills() uint64 {
	if c == nil {
		return 0
	}
	n, _ := c.oomKillCount()
	return n
}

// usage is what the cgroup accounted for the sandbox (read by
// sandboxCgroup.usage, cgroupstats_linux.go).
type usage struct {
	peakMemory         int64
	userNs, sysNs      int64
	oomKills           uint64
	statsErr, oomError error
}

// destroy removes the cgroup's directories, killing first whatever is
// left in them if they are not empty. Safe to call more than once.
func (c *sandboxCgroup) destroy() {
	if c == nil {
		return
	}
	c.once.Do(func() {
		if c.removeEmpty() {
			return
		}
		killCgroup(c.paths)
		_ = c.mgr.Destroy()
	})
}

// killCgroup SIGKILLs every process found in the cgroup directories
// (thawed first: see thawV1).
func killCgroup(paths map[string]string) {
	thawV1(paths)
	for _, p := range paths {
		pids, err := cgroups.GetAllPids(p)
		if err != nil {
			continue
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// reclaimCgroup removes a leftover cgroup at paths (from a moat that died
// without cleaning up): its processes are killed, its directories removed.
func reclaimCgroup(paths map[string]string) error {
	exists := false
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			exists = true
		}
	}
	if !exists {
		return nil
	}
	killCgroup(paths)
	if err := cgroups.RemovePaths(paths); err != nil {
		return fmt.Errorf("reclaim leftover cgroup: %w", err)
	}
	return nil
}

// sweepCgroups reclaims the cgroups of every slot that no live moat holds,
// at the top or inside a budget, and the budgets no live moat owns once
// empty (sweepBudgets): leftovers of crashed moats. Slots held by live
// sandboxes (this process's included: the sweep takes its locks through a
// descriptor of its own, and OFD locks of different descriptors conflict)
// are skipped, and so are budgets whose owner lives.
func sweepCgroups(l *cgroupLayout, stateDir string) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	leases, err := os.OpenFile(filepath.Join(stateDir, slotsFile), os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer leases.Close()
	var dir string
	for c, mnt := range l.mounts {
		if c == "" || c == "memory" {
			dir = filepath.Join(mnt, cgroupParent)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	n := 0
	for _, e := range ents {
		slot, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() || slot < 0 || slot >= uidSlots {
			continue
		}
		ok, err := tryLock(leases, slot)
		if err != nil || !ok {
			continue
		}
		if reclaimCgroup(l.paths(slot)) == nil {
			n++
		}
		_ = unlock(leases, slot)
	}
	return n + sweepBudgets(l, stateDir, leases), nil
}
