package sandbox

import (
	"fmt"
	"sync"
)

// BudgetUse is the bookkeeping every Budgeter's budget shares: how many
// sandboxes it holds, and whether it still takes new ones. A budget takes
// sandboxes until a Close finds it empty; from then on Enter refuses.
// The zero value is an open, empty budget.
type BudgetUse struct {
	mu     sync.Mutex
	live   int
	closed bool
}

// Enter takes a reference for a sandbox being made in budget id. Once the
// budget is closed it fails with an error wrapping ErrInvalidSpec.
func (u *BudgetUse) Enter(id string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return fmt.Errorf("%w: budget %q: no live budget of the runtime has this id", ErrInvalidSpec, id)
	}
	u.live++
	return nil
}

// Leave drops a reference Enter took, once the sandbox is gone.
func (u *BudgetUse) Leave() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.live--
}

// Live counts the sandboxes in the budget.
func (u *BudgetUse) Live() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.live
}

// Close stops the budget taking sandboxes. While one lives it fails with
// an error wrapping ErrBusy (naming id) and changes nothing.
func (u *BudgetUse) Close(id string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.live > 0 {
		return fmt.Errorf("%w: budget %q has %d live sandbox(es)", ErrBusy, id, u.live)
	}
	u.closed = true
	return nil
}
