// Package workflow is moat's workflow document: the YAML (or JSON) file that
// describes a DAG of sandboxed steps, its parsing with line-numbered
// errors, its validation, and the Plan the engine (workflow/engine) runs.
// It imports only agent (agent.Compile, which checks the agents of agent
// steps), api, build (build.CheckSettings) and sandbox of moat and does no
// I/O.
package workflow

import (
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// Group modes.
const (
	Sequential = "sequential"
	Parallel   = "parallel"
	Concurrent = "concurrent"
)

// Step priorities (concurrent groups order their queue by them; the CPU
// weight of a step's sandbox follows them in every group).
const (
	Critical   = "critical"
	Normal     = "normal"
	Background = "background"
)

// Snapshot kinds a step keeps after it succeeds.
const (
	// SnapshotNone keeps nothing: no step may start from it.
	SnapshotNone = "none"
	// SnapshotLight keeps the step's filesystem snapshot while the run
	// needs it (other steps start from it, retries and resumes restore
	// it) and deletes it when the run succeeds.
	SnapshotLight = "light"
	// SnapshotFull keeps it beyond the run, as a snapshot of the tenant
	// (listed, forkable) until deleted.
	SnapshotFull = "full"
)

// Retry sources.
const (
	// FromSnapshot restores the snapshot the step started from (or, for a
	// step that started from its template, a fresh sandbox of it) and
	// runs the step again.
	FromSnapshot = "snapshot"
	// FromScratch runs the step's whole chain of `from` ancestors again.
	FromScratch = "scratch"
)

// Kinds of steps (Step.Kind): KindRun, KindBuild (build.go), KindAgent
// (agent.go).
const (
	KindRun = "run" // run (argv) or sh (a /bin/sh -c string)
)

// Env variables every step's processes get.
const (
	EnvRun     = "MOAT_WORKFLOW_RUN"
	EnvStep    = "MOAT_STEP_ID"
	EnvAttempt = "MOAT_STEP_ATTEMPT"
)

// Step is one step, with the document's defaults applied. Durations and
// sizes are parsed ("30s", "512m"); Line is the document line of its id.
type Step struct {
	ID   string
	Kind string
	// Args is the argv of a run step; for sh, {"/bin/sh", "-c", Sh}.
	Args []string
	Sh   string
	// Needs are the ids (steps or groups) it waits for, as written.
	Needs []string
	// From is the id of an earlier step whose final snapshot this step
	// starts from ("" = a fresh sandbox of Template).
	From     string
	Template string
	Limits   sandbox.Limits
	Timeout  time.Duration
	// Env is KEY=VALUE, sorted by key (defaults merged, the step's wins).
	Env     []string
	Policy  *api.CallRules
	Network *api.Network
	// Inputs maps a step id to the path inside this sandbox where that
	// step's outputs appear, read-only.
	Inputs map[string]string
	// Outputs are absolute paths inside the sandbox collected when the
	// step succeeds.
	Outputs []string
	// StdinFrom is a step whose stdout streams into this step's stdin
	// while both run.
	StdinFrom string
	Retry     Retry
	Snapshot  string // SnapshotNone, SnapshotLight (default) or SnapshotFull
	Priority  string // Critical, Normal (default) or Background
	// Build is the build of a build step (Kind KindBuild; nil for other
	// kinds). Args, Sh, Template, Limits, Timeout and Env then repeat its
	// settings, Outputs are its outputs below /src (absolute) and
	// Snapshot is SnapshotNone.
	Build *Build
	// Agent is the agent run of an agent step (Kind KindAgent; nil for
	// other kinds). Timeout, Inputs and Outputs are then the step's,
	// Snapshot is SnapshotNone, and the other fields are empty.
	Agent *Agent
	Line  int
}

// Retry says how often and how a failed step runs again.
type Retry struct {
	// Attempts is the number of attempts in all (default 1: no retry).
	Attempts int
	// Backoff is the wait before the second attempt; it doubles for each
	// next one (capped at 1 minute).
	Backoff time.Duration
	From    string // FromSnapshot (default) or FromScratch
}

// Group is a group of steps and groups.
type Group struct {
	ID   string
	Mode string
	// Needs are the ids the whole group waits for.
	Needs []string
	// MaxParallel caps how many of its steps run at once (parallel and
	// concurrent groups; 0 = no cap beyond the budget).
	MaxParallel int
	// Budget is one parent cgroup every step of the group runs inside
	// (CPUs, MemoryBytes, Pids; zero = unlimited); nil for none.
	Budget *sandbox.Limits
	// Parent is the id of the enclosing group ("" at the top level).
	Parent string
	Line   int
}

// Plan is a validated document resolved into steps and their waits: what
// the engine schedules. Steps are in document order.
type Plan struct {
	Name   string
	Steps  []*PlanStep
	Groups []*Group

	// defaults are the document's defaults, which AddStep applies too
	// (nil: none).
	defaults *fields
	// agents is the document's agents section, which the agent steps
	// AddStep adds take theirs from too (nil: none).
	agents *docAgents
	// children are the ids of each group's steps and groups in document
	// order ("" is the top level); the order of sequential groups.
	children map[string][]string
}

// PlanStep is a step placed in the plan.
type PlanStep struct {
	Step
	// Group is the innermost group holding the step ("" at the top
	// level); Groups are all its enclosing groups, innermost first.
	Group  string
	Groups []string
	// Waits are the step ids this step waits to have succeeded: its own
	// and its groups' needs (a group stands for all its steps) and the
	// order of sequential groups (the top level is sequential: an item
	// waits for the item before it).
	Waits []string
}

// Step returns the plan's step id, or nil.
func (p *Plan) Step(id string) *PlanStep {
	for _, s := range p.Steps {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// Group returns the plan's group id, or nil.
func (p *Plan) Group(id string) *Group {
	for _, g := range p.Groups {
		if g.ID == id {
			return g
		}
	}
	return nil
}
