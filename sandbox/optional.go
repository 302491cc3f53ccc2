package sandbox

import (
	"context"
	"time"
)

// The optional abilities of a runtime or a sandbox. A control plane finds
// them with a type assertion on the Runtime or Sandbox it holds and does
// without them when they are missing, as each one's comment says; every
// implementation asserts them at compile time (var _ sandbox.X = ...).
// DiffExporter (diff.go) is one of them.

// Claimable is a sandbox created ahead of need (a warm pool's) that a
// caller's settings can be applied to at the moment it is handed out.
//
// Implemented by runtime/linux's sandboxes. Without it a control plane
// keeps no warm pool: the server stops filling a pool at the first
// sandbox that is not Claimable, and every create is a cold one.
type Claimable interface {
	// SetLimits replaces the sandbox's limits (cgroup and upper-layer
	// size). Zero fields take the runtime's defaults, as at create.
	SetLimits(l Limits) error
	// AttachNetwork gives a sandbox created with network mode none the
	// mode proxy, served by n.Egress; other changes are refused
	// (ErrInvalidSpec).
	AttachNetwork(n Network) error
	// Ping checks that the sandbox's agent answers.
	Ping(ctx context.Context) error
}

// EnforcementReporter is a sandbox that reports the protections in effect
// for it (its limits, its network, the outcome of its restrictions),
// which may differ from what its runtime can provide on the host.
//
// Implemented by runtime/linux's and sandbox/sandboxtest's sandboxes.
// Without it a control plane reports Runtime.Enforcement for the sandbox.
type EnforcementReporter interface {
	// Enforcement reports the protections in effect for this sandbox.
	Enforcement() Enforcement
}

// Reclaimer is a runtime that can remove what a crashed process of it left
// on the host (runtime/linux: cgroups of uid slots no live moat holds,
// unused layers).
//
// Implemented by runtime/linux. A daemon calls Reclaim once at start,
// before it creates sandboxes, and fails to start if it fails; without it
// there is nothing to reclaim.
type Reclaimer interface {
	// Reclaim removes the leftovers and returns how many it found.
	Reclaim() (int, error)
}

// EarlyCreator is a runtime that can hand out a long-lived sandbox before
// its setup has finished, so that its first call is queued behind the
// setup instead of following it (a create that carries its first exec).
//
// Implemented by runtime/linux. Without it a control plane calls Create,
// which returns once the sandbox is ready, and runs the call after.
type EarlyCreator interface {
	// CreateEarly builds a sandbox as Runtime.Create does but may return
	// before it is ready. Exec and Start may be called on it at once:
	// the process runs once the setup is done, or fails as the setup
	// does (exit 125, setup_error). ready waits for the setup's outcome
	// and may be called more than once; after an error the caller shuts
	// the sandbox down. On error nothing of the sandbox is left.
	CreateEarly(ctx context.Context, spec *Spec) (sb Sandbox, ready func(context.Context) error, err error)
}

// Budgeter is a runtime that can make budgets: one parent cgroup with
// limits of its own (CPUs, memory, pids) that sandboxes created with its
// id in Spec.Budget run inside, so that together they never exceed it and
// share it by their Limits.CPUWeight (a workflow's parallel group).
//
// Implemented by runtime/linux. Without it a control plane refuses a
// budget (ErrUnsupported) rather than run the sandboxes unbounded.
type Budgeter interface {
	// NewBudget makes budget id (a name of letters, digits, '-' and '_',
	// unique among the runtime's live budgets). Zero fields of l are
	// unlimited.
	NewBudget(id string, l Limits) (Budget, error)
}

// Budget is a live budget of a Budgeter.
type Budget interface {
	// ID is the id sandboxes name in Spec.Budget.
	ID() string
	// CPUTime is the CPU time used so far by every sandbox that ran in
	// the budget.
	CPUTime() (time.Duration, error)
	// Close removes the budget. It fails (ErrBusy) while a sandbox of it
	// still lives.
	Close() error
}
