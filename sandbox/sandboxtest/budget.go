package sandboxtest

import (
	"fmt"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

var _ sandbox.Budgeter = (*Runtime)(nil)

// NewBudget makes budget id (sandbox.Budgeter) with the checks of the real
// runtime: a malformed id or limits, or a disk limit, wrap
// sandbox.ErrInvalidSpec; the id of a live budget wraps sandbox.ErrBusy.
// The fake only keeps count: it enforces none of the limits, and CPUTime
// is always 0.
func (r *Runtime) NewBudget(id string, l sandbox.Limits) (sandbox.Budget, error) {
	if err := sandbox.CheckBudget(id, l); err != nil {
		return nil, err
	}
	r.budgetsMu.Lock()
	defer r.budgetsMu.Unlock()
	if r.budgets[id] != nil {
		return nil, fmt.Errorf("%w: budget %q exists", sandbox.ErrBusy, id)
	}
	if r.budgets == nil {
		r.budgets = map[string]*Budget{}
	}
	b := &Budget{r: r, id: id, limits: l}
	r.budgets[id] = b
	return b, nil
}

// Budgets lists the ids of the live budgets.
func (r *Runtime) Budgets() []string {
	r.budgetsMu.Lock()
	defer r.budgetsMu.Unlock()
	ids := make([]string, 0, len(r.budgets))
	for id := range r.budgets {
		ids = append(ids, id)
	}
	return ids
}

// acquireBudget takes a reference on live budget id for a sandbox being
// created (an id of no live budget wraps sandbox.ErrInvalidSpec).
func (r *Runtime) acquireBudget(id string) (*Budget, error) {
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

// Budget is a fake budget: a name and a count of the sandboxes in it.
type Budget struct {
	r      *Runtime
	id     string
	limits sandbox.Limits

	use sandbox.BudgetUse
	// mu orders Close: a second one does nothing.
	mu     sync.Mutex
	closed bool
}

// ID is the id sandboxes name in Spec.Budget.
func (b *Budget) ID() string { return b.id }

// Limits are the limits the budget was made with (not enforced).
func (b *Budget) Limits() sandbox.Limits { return b.limits }

// Live counts the sandboxes in the budget.
func (b *Budget) Live() int {
	return b.use.Live()
}

// CPUTime is 0: the fake runs nothing on a CPU it accounts.
func (b *Budget) CPUTime() (time.Duration, error) { return 0, nil }

// Close removes the budget; with a live sandbox in it, it fails with an
// error wrapping sandbox.ErrBusy. Closing a closed budget does nothing.
func (b *Budget) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	if err := b.use.Close(b.id); err != nil {
		return err
	}
	b.closed = true
	b.r.budgetsMu.Lock()
	delete(b.r.budgets, b.id)
	b.r.budgetsMu.Unlock()
	return nil
}

// release drops a sandbox's reference. Safe on a nil budget.
func (b *Budget) release() {
	if b == nil {
		return
	}
	b.use.Leave()
}
