package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/sandbox"
)

// Budgets' owners and leftovers.
//
// A budget's owner holds an OFD lock on the budget's lease file,
// STATEDIR/budgets/ID.lock, for the budget's life: the kernel drops it
// when the owner dies, so a budget whose lease is free has no owner and
// no sandbox can be made in it any more. The owner unlinks the file while
// it still holds the lock (Close); a taker that locked a file just
// unlinked (it had opened it before) finds another inode at the path, or
// none, and tries again.
//
// A budget's sandboxes have their cgroups under the budget's and hold
// their uid slots' leases as every sandbox does (uidslot_linux.go): a
// child cgroup whose slot is free is a dead sandbox's. Reclaim removes
// those, then the budgets left with no owner and no sandbox.

// budgetsDir holds the budgets' lease files, under the state directory.
const budgetsDir = "budgets"

// errBudgetTaken: another live owner holds the budget's lease.
var errBudgetTaken = errors.New("budget id in use")

// budgetLease is an owner's hold on a budget id.
type budgetLease struct {
	f    *os.File
	path string
}

// leaseBudget takes the lease of budget id (errBudgetTaken when a live
// owner, in this process or another, holds it).
func leaseBudget(stateDir, id string) (*budgetLease, error) {
	dir := filepath.Join(stateDir, budgetsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("budget lease: %w", err)
	}
	path := filepath.Join(dir, id+".lock")
	for range 16 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("budget lease: %w", err)
		}
		ok, err := tryLock(f, 0)
		if err != nil || !ok {
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("budget lease: lock: %w", err)
			}
			return nil, errBudgetTaken
		}
		if samePath(int(f.Fd()), path) {
			return &budgetLease{f: f, path: path}, nil
		}
		f.Close() // unlinked by its last owner meanwhile
	}
	return nil, fmt.Errorf("budget lease %s: the file keeps being replaced", path)
}

// release unlinks the lease file and drops the lock. Safe to call more
// than once.
func (l *budgetLease) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = os.Remove(l.path)
	l.f.Close()
	l.f = nil
}

// reclaimBudgetChildren removes the cgroups under parent (a budget's
// directories) of every sandbox whose uid slot no live moat holds, and
// returns how many.
func reclaimBudgetChildren(parent map[string]string, stateDir string) int {
	slots, err := openSlotLeases(stateDir)
	if err != nil {
		return 0
	}
	defer slots.Close()
	return reclaimChildren(parent, slots)
}

// reclaimChildren is reclaimBudgetChildren with the slot lock file open.
func reclaimChildren(parent map[string]string, slots *os.File) int {
	seen := map[int]bool{}
	for _, dir := range parent {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			slot, err := strconv.Atoi(e.Name())
			if err == nil && e.IsDir() && slot >= 0 && slot < uidSlots {
				seen[slot] = true
			}
		}
	}
	n := 0
	for slot := range seen {
		ok, err := tryLock(slots, slot)
		if err != nil || !ok {
			continue // a live sandbox's
		}
		if reclaimCgroup(childPaths(parent, slot)) == nil {
			n++
		}
		_ = unlock(slots, slot)
	}
	return n
}

// removeBudgetDirs removes a budget's directories (those that exist). A
// directory that still holds a sandbox's cgroup fails with an error
// wrapping sandbox.ErrBusy.
func removeBudgetDirs(paths map[string]string) error {
	var errs []error
	for _, p := range paths {
		err := unix.Rmdir(p)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
		case errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENOTEMPTY):
			errs = append(errs, fmt.Errorf("%w: remove %s: %w", sandbox.ErrBusy, p, err))
		default:
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// reclaimBudget removes what is left of budget id: the cgroups of its
// dead sandboxes, then, when it has no owner (its lease is free) and no
// sandbox, its own. It returns how many cgroups it removed.
func reclaimBudget(l *cgroupLayout, stateDir, id string, slots *os.File) int {
	parent := l.dirs(l.allMounts(), budgetPrefix+id)
	n := reclaimChildren(parent, slots)
	lease, err := leaseBudget(stateDir, id)
	if err != nil {
		return n // a live owner's
	}
	defer lease.release()
	if removeBudgetDirs(parent) == nil {
		n++
	}
	return n
}

// budgetNames lists the ids of the budget cgroups under moat's parent, in
// any hierarchy (a create cut short may have made some only).
func budgetNames(l *cgroupLayout) []string {
	var ids []string
	for _, mnt := range l.allMounts() {
		ents, err := os.ReadDir(filepath.Join(mnt, cgroupParent))
		if err != nil {
			continue
		}
		for _, e := range ents {
			id, ok := strings.CutPrefix(e.Name(), budgetPrefix)
			if ok && e.IsDir() && sandbox.CheckBudgetID(id) == nil && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// sweepBudgets reclaims every budget's leftovers (reclaimBudget) and
// returns how many cgroups it removed.
func sweepBudgets(l *cgroupLayout, stateDir string, slots *os.File) int {
	n := 0
	for _, id := range budgetNames(l) {
		n += reclaimBudget(l, stateDir, id, slots)
	}
	return n
}
