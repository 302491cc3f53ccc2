package sandboxtest

import (
	"context"

	"github.com/moat-sandbox/moat/sandbox"
)

// EarlyRuntime is the fake runtime as a sandbox.EarlyCreator, for tests
// of a control plane's path that starts a sandbox's first call with its
// setup. The fake's sandboxes are ready at once: CreateEarly is Create.
// FOR TESTS ONLY.
type EarlyRuntime struct{ *Runtime }

var _ sandbox.EarlyCreator = EarlyRuntime{}

// CreateEarly creates a sandbox as Create does; ready reports success.
func (r EarlyRuntime) CreateEarly(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, func(context.Context) error, error) {
	sb, err := r.Create(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	return sb, func(context.Context) error { return nil }, nil
}
