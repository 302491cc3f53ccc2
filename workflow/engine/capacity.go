package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// Bounds of the wait between two creates refused with ErrCapacity when no
// sandbox of the engine's is deleted meanwhile (the room may belong to
// sandboxes of other callers).
const (
	capacityFirst = 50 * time.Millisecond
	capacityMax   = 2 * time.Second
)

// capacity tells the creates waiting for room that a sandbox of the engine
// was deleted: a broadcast by closing a channel and replacing it.
type capacity struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next freed.
func (c *capacity) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// freed wakes every waiter.
func (c *capacity) freed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// create is Backend.Create that waits out ErrCapacity: a wide parallel
// group asks for more sandboxes at once than a tenant's quota allows, and
// its steps take turns instead of failing. It gives up only when ctx ends.
func (e *Engine) create(ctx context.Context, o Owner, req CreateRequest) (string, error) {
	id, _, err := e.waitRoom(ctx, func() (string, *sandbox.Result, error) {
		id, err := e.b.Create(ctx, o, req)
		return id, nil, err
	})
	return id, err
}

// waitRoom calls try until it returns anything but a create refused for
// room (an error wrapping ErrCapacity, and no sandbox), waiting between
// two tries as Engine.create does, and gives up when ctx ends.
func (e *Engine) waitRoom(ctx context.Context, try func() (string, *sandbox.Result, error)) (string, *sandbox.Result, error) {
	delay := capacityFirst
	for {
		woken := e.capacity.wait()
		id, res, err := try()
		if err == nil || id != "" || !errors.Is(err, ErrCapacity) {
			return id, res, err
		}
		t := time.NewTimer(delay)
		select {
		case <-woken:
		case <-t.C:
			delay = min(2*delay, capacityMax)
		case <-ctx.Done():
			t.Stop()
			return "", nil, err
		}
		t.Stop()
	}
}
