package linux

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"

	"github.com/moat-sandbox/moat/sandbox"
)

// Budgets (sandbox.Budgeter): one parent cgroup that sandboxes run inside.
//
// A budget is the cgroup moat/budget-ID in every hierarchy the runtime's
// sandboxes use (v1: memory, cpu, cpuacct, pids and the freezer; v2: the
// unified one) with the budget's limits: a CFS quota of CPUs × period, a
// memory limit (memory+swap too where the kernel can limit swap, as for a
// sandbox), pids.max and, when given, a CPU weight against its siblings.
// A sandbox created with the budget's id in Spec.Budget gets its cgroup
// under it, moat/budget-ID/SLOT, with its own limits inside; the kernel
// charges what each sandbox uses to the budget too, so together they
// never exceed it, and they divide its CPU time by their CPU weights.
//
// A budget of fewer CPUs than moat's cgroups may use is also confined to
// ceil(CPUs) of them (cpuset; pickCPUs), and its sandboxes with it. CFS
// weights divide one CPU's time between the tasks queued on it: under a
// quota alone, two sandboxes burning on two idle CPUs each get half of a
// one-CPU budget whatever their weights (measured on this host: 50/50 at
// weights 1000 and 10; 99/1 once confined to one CPU). The price is that
// a confined budget cannot borrow an idle CPU outside its set.
//
// On cgroup v2 the same settings go to the unified hierarchy (cpu.max,
// memory.max and memory.swap.max, pids.max, cpu.weight, cpuset.cpus).
// That path is not tested on this host, whose v1 controllers (memory,
// cpu, cpuacct, pids, cpuset, freezer) leave v2 only hugetlb.
//
// The Runtime that makes a budget owns it: it holds the budget's lease
// (budgetreclaim_linux.go) until Close, so another moat process can
// neither take the id nor reclaim the budget while it lives; once the
// owner is gone, Reclaim removes the budget's cgroups (its sandboxes'
// first).

// budgetPrefix begins the name of a budget's cgroup under moat's parent.
const budgetPrefix = "budget-"

var _ sandbox.Budgeter = (*Runtime)(nil)

// linuxBudget is a live budget of the Runtime.
type linuxBudget struct {
	r      *Runtime
	id     string
	limits sandbox.Limits
	// cpus are the CPUs it is confined to; nil for all.
	cpus []int
	// paths are its directories, one per hierarchy (the cpuset one too,
	// on v1, when cpus is set); its sandboxes' are children of these.
	paths map[string]string
	lease *budgetLease

	// use counts its sandboxes (made or being made) and, once closed,
	// refuses new ones.
	use sandbox.BudgetUse
	mu  sync.Mutex
	// Under mu: removed says its cgroups are gone.
	removed bool
}

// NewBudget makes budget id with limits l (CPUs, MemoryBytes, Pids and
// CPUWeight; zero fields are unlimited, DiskBytes must be zero: each
// sandbox has its own disk). A malformed id or limits wrap
// sandbox.ErrInvalidSpec; an id that a live budget of any moat process on
// the host has wraps sandbox.ErrBusy; a host without the cgroups moat
// needs wraps sandbox.ErrUnsupported. Cgroups left under the same id by a
// dead owner are reclaimed first.
func (r *Runtime) NewBudget(id string, l sandbox.Limits) (sandbox.Budget, error) {
	if err := sandbox.CheckBudget(id, l); err != nil {
		return nil, err
	}
	layout := r.cgroupLayout()
	if layout.err != nil {
		return nil, layout.err
	}
	r.budgetsMu.Lock()
	defer r.budgetsMu.Unlock()
	if r.budgets[id] != nil {
		return nil, fmt.Errorf("%w: budget %q exists", sandbox.ErrBusy, id)
	}
	lease, err := leaseBudget(r.stateDir, id)
	if errors.Is(err, errBudgetTaken) {
		return nil, fmt.Errorf("%w: budget %q is held by another moat process", sandbox.ErrBusy, id)
	}
	if err != nil {
		return nil, err
	}
	// What a dead owner of the same id left: its sandboxes' cgroups (if
	// their slots are free), then its own (if nothing is left in them).
	old := layout.dirs(layout.allMounts(), budgetPrefix+id)
	reclaimBudgetChildren(old, r.stateDir)
	_ = removeBudgetDirs(old)

	b := &linuxBudget{r: r, id: id, limits: l, lease: lease, cpus: pickCPUs(layout, l.CPUs)}
	mounts := layout.mounts
	if b.cpus != nil {
		mounts = layout.allMounts()
	}
	b.paths = layout.dirs(mounts, budgetPrefix+id)
	if err := b.makeCgroup(layout); err != nil {
		_ = removeBudgetDirs(b.paths)
		lease.release()
		return nil, err
	}
	if r.budgets == nil {
		r.budgets = map[string]*linuxBudget{}
	}
	r.budgets[id] = b
	return b, nil
}

// makeCgroup creates the budget's directories with its limits.
func (b *linuxBudget) makeCgroup(layout *cgroupLayout) error {
	res, err := layout.resources(b.limits, false)
	if err != nil {
		return err
	}
	if b.cpus != nil {
		res.CpusetCpus = formatCPUList(b.cpus)
	}
	cg := &cgroups.Cgroup{Resources: res}
	var mgr cgroups.Manager
	if layout.v2 {
		mgr, err = fs2.NewManager(cg, b.paths[""])
	} else {
		mgr, err = fs.NewManager(cg, maps.Clone(b.paths))
	}
	if err != nil {
		return fmt.Errorf("budget cgroup: %w", err)
	}
	if err := mgr.Apply(-1); err != nil {
		return fmt.Errorf("create budget cgroup: %w", err)
	}
	if err := mgr.Set(res); err != nil {
		return fmt.Errorf("set budget limits: %w", err)
	}
	return nil
}

// ID is the id sandboxes name in Spec.Budget.
func (b *linuxBudget) ID() string { return b.id }

// CPUTime is the CPU time charged to the budget so far: every sandbox
// that ran in it, ended ones included (v1 cpuacct.usage, v2 cpu.stat
// usage_usec). After Close it is sandbox.ErrClosed.
func (b *linuxBudget) CPUTime() (time.Duration, error) {
	b.mu.Lock()
	removed := b.removed
	b.mu.Unlock()
	if removed {
		return 0, sandbox.ErrClosed
	}
	if p := b.paths[""]; p != "" {
		us, err := readCgroupKey(p, "cpu.stat", "usage_usec")
		return time.Duration(us) * time.Microsecond, err
	}
	ns, err := readCgroupUint(b.paths["cpuacct"], "cpuacct.usage")
	return time.Duration(ns), err
}

// Close removes the budget's cgroups and drops its lease. While a sandbox
// of it lives it fails with an error wrapping sandbox.ErrBusy and changes
// nothing; once it has been tried with none, the budget takes no new
// sandbox. Closing a closed budget does nothing.
func (b *linuxBudget) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.removed {
		return nil
	}
	if err := b.use.Close(b.id); err != nil {
		return err
	}
	if err := removeBudgetDirs(b.paths); err != nil {
		// A sandbox cgroup its Shutdown could not remove: take it
		// (its slot is free by now) and try once more.
		reclaimBudgetChildren(b.paths, b.r.stateDir)
		if err := removeBudgetDirs(b.paths); err != nil {
			return fmt.Errorf("budget %q: %w", b.id, err)
		}
	}
	b.removed = true
	b.lease.release()
	b.r.forgetBudget(b)
	return nil
}

// acquireBudget takes a reference on live budget id for a sandbox being
// made; release gives it back once the sandbox's cgroup is gone. An id
// that names no live budget of r wraps sandbox.ErrInvalidSpec.
func (r *Runtime) acquireBudget(id string) (*linuxBudget, error) {
	r.budgetsMu.Lock()
	b := r.budgets[id]
	r.budgetsMu.Unlock()
	if b == nil {
		return nil, fmt.Errorf("%w: budget %q: no live budget of the runtime has this id", sandbox.ErrInvalidSpec, id)
	}
	if err := b.use.Enter(id); err != nil {
		return nil, err
	}
	return b, nil
}

// release drops a reference acquireBudget took. Safe on a nil budget.
func (b *linuxBudget) release() {
	if b == nil {
		return
	}
	b.use.Leave()
}

// forgetBudget removes a closed budget from r's table.
func (r *Runtime) forgetBudget(b *linuxBudget) {
	r.budgetsMu.Lock()
	defer r.budgetsMu.Unlock()
	if r.budgets[b.id] == b {
		delete(r.budgets, b.id)
	}
}

// closeBudgets closes every budget of r that has no sandbox left, for
// Runtime.Close; a busy one stays (Reclaim removes it once r's process
// is gone).
func (r *Runtime) closeBudgets() {
	r.budgetsMu.Lock()
	bs := make([]*linuxBudget, 0, len(r.budgets))
	for _, b := range r.budgets {
		bs = append(bs, b)
	}
	r.budgetsMu.Unlock()
	for _, b := range bs {
		if err := b.Close(); err != nil {
			r.log.Warn("budget left open at runtime close", "budget", b.id, "err", err)
		}
	}
}

// describe is the budget's line in a sandbox's enforcement report:
// "moat/budget-ID: cpus 1 (CPU 0), memory 512 MiB, pids 256".
func (b *linuxBudget) describe() string {
	var parts []string
	l := b.limits
	if l.CPUs > 0 {
		p := fmt.Sprintf("cpus %g", l.CPUs)
		if b.cpus != nil {
			p += " (CPU " + formatCPUList(b.cpus) + ")"
		}
		parts = append(parts, p)
	}
	if l.MemoryBytes > 0 {
		parts = append(parts, "memory "+sizeText(l.MemoryBytes))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.Pids))
	}
	if l.CPUWeight > 0 {
		parts = append(parts, fmt.Sprintf("cpu weight %d", l.CPUWeight))
	}
	if len(parts) == 0 {
		parts = append(parts, "no limits of its own")
	}
	return cgroupParent + "/" + budgetPrefix + b.id + ": " + strings.Join(parts, ", ")
}

// sizeText writes n bytes in the largest binary unit that divides it
// ("512 MiB", "1 GiB", "1536 KiB", "1000 bytes").
func sizeText(n int64) string {
	for _, u := range []struct {
		name  string
		bytes int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.bytes == 0 {
			return fmt.Sprintf("%d %s", n/u.bytes, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
