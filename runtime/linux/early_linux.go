package linux

import (
	"context"
	"sync"

	"github.com/moat-sandbox/moat/sandbox"
)

var _ sandbox.EarlyCreator = (*Runtime)(nil)

// CreateEarly builds a long-lived sandbox as Create does but returns once
// the init has its setup, before it is ready, as Run does for its one
// process: a call made at once is queued behind the setup on the control
// socket, and the agent runs it as soon as the root is built. ready
// waits for the setup's outcome; on an error the caller shuts the
// sandbox down (the calls made on it fail with a setup error).
func (r *Runtime) CreateEarly(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, func(context.Context) error, error) {
	sb, err := r.create(ctx, spec, false)
	if err != nil {
		return nil, nil, err
	}
	return sb, sb.setup.wait, nil
}

// setupOutcome is the init's setup outcome, kept for any number of
// waiters (ready holds it for one).
type setupOutcome struct {
	once sync.Once
	done chan struct{}
	err  error
}

// set records the outcome; only the first counts.
func (o *setupOutcome) set(err error) {
	o.once.Do(func() {
		o.err = err
		close(o.done)
	})
}

// wait returns the outcome once known, or ctx's error.
func (o *setupOutcome) wait(ctx context.Context) error {
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
