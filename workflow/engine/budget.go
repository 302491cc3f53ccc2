package engine

import (
	"context"
	"sync"

	"github.com/moat-sandbox/moat/sandbox"
)

// budgetSlot is the budget of one group of a run: made by the first
// attempt of the group that needs it (Backend.NewBudget, once), released
// by the scheduler when every step of the group has ended, and made again
// if the group runs again (a resume, a retry from scratch).
type budgetSlot struct {
	// id is the budget's id: the run's id, "-" and the group's.
	id     string
	limits sandbox.Limits

	// mu is held across NewBudget so that concurrent first attempts make
	// one budget; the run's lock is never taken under it.
	mu      sync.Mutex
	made    bool
	release func()
	// live counts the attempts holding the budget (from ensure until
	// their sandbox is deleted: let); close waits for none.
	live sync.WaitGroup
}

// ensure makes the budget unless it exists; made reports that this call
// made it.
func (b *budgetSlot) ensure(ctx context.Context, be Backend, o Owner) (made bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.made {
		b.live.Add(1)
		return false, nil
	}
	release, err := be.NewBudget(ctx, o, b.id, b.limits)
	if err != nil {
		return false, err
	}
	b.made, b.release = true, release
	b.live.Add(1)
	return true, nil
}

// let ends the hold an ensure took, once the attempt's sandbox is gone.
func (b *budgetSlot) let() { b.live.Done() }

// close releases the budget if it was made, once every attempt that held
// it has deleted its sandbox. The caller guarantees that no attempt of
// the group will take it again before close returns.
func (b *budgetSlot) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live.Wait()
	if !b.made {
		return
	}
	if b.release != nil {
		b.release()
	}
	b.made, b.release = false, nil
}
