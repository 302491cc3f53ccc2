package agent

import (
	"context"
	"fmt"

	"github.com/moat-sandbox/moat/api"
)

// Events calls emit with a run's events after sequence number after, in
// order, from the journal; with follow, it then waits for new ones (woken
// at each commit, no polling) until the run ends or the engine stops
// running it. It returns the run as it is at the end. An error of emit
// ends the stream and is returned.
func (e *Engine) Events(ctx context.Context, tenant, id string, after uint64, follow bool, emit func(api.AgentEvent) error) (*api.AgentRun, error) {
	r := e.owned(tenant, id)
	if r == nil {
		if _, err := e.load(ctx, tenant, id); err != nil {
			return nil, err
		}
	}
	for {
		// Take the change signal before reading: an event journalled
		// after the read closes it.
		var changed, done <-chan struct{}
		if r != nil {
			r.mu.Lock()
			changed = r.changed
			r.mu.Unlock()
			done = r.done
		}
		evs, err := e.j.Events(ctx, id, after, eventBatch)
		if err != nil {
			return nil, fmt.Errorf("events of run %s: %w", id, err)
		}
		for _, ev := range evs {
			if ev.Seq <= after {
				continue
			}
			if err := emit(ev); err != nil {
				return nil, err
			}
			after = ev.Seq
		}
		if len(evs) == eventBatch {
			continue
		}
		if !follow || r == nil {
			break
		}
		select {
		case <-changed:
		case <-done:
			r = nil // read what the end journalled, then stop
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e.Get(ctx, tenant, id)
}
