// Package engine runs workflow plans: it schedules the steps of a
// workflow.Plan on sandboxes through a Backend (sequential chains,
// parallel groups under a semaphore and a budget, concurrent groups by
// priority), retries failed steps from the snapshot they started from,
// streams one step's stdout into another's stdin, passes outputs as
// read-only inputs, runs build and agent steps through the Backend's
// optional Builder and Agenter, and journals every transition so that a
// run survives a restart of its daemon. It imports api, sandbox and
// workflow of moat; the server implements Backend and Journal.
package engine

import (
	"context"
	"io"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// Backend is what the engine runs steps on: the daemon's sandboxes, seen
// as the run's tenant. Every method is called with the run's Owner and
// judged, recorded and audited by the backend as a call of that tenant.
type Backend interface {
	// Create makes the sandbox of one attempt of a step and returns its
	// id once it is ready.
	Create(ctx context.Context, o Owner, req CreateRequest) (string, error)
	// Exec runs one process to completion in the sandbox: stdin (nil =
	// none) streams into it, its stdout is captured into the result and
	// also copied to stdout when that is not nil.
	Exec(ctx context.Context, o Owner, sandboxID string, req ExecRequest) (*sandbox.Result, error)
	// Snapshot pauses the sandbox, captures its filesystem and returns
	// the snapshot's id.
	Snapshot(ctx context.Context, o Owner, sandboxID string) (string, error)
	// Collect copies the given absolute paths (files or directories) out
	// of the sandbox into dir, an empty host directory the engine owns,
	// without following a symlink of the sandbox, and lists the regular
	// files it wrote with their sizes and sha256. A missing path is an
	// error.
	Collect(ctx context.Context, o Owner, sandboxID string, paths []string, dir string) ([]api.WorkflowArtifact, error)
	// Delete removes a sandbox (idempotent: a gone sandbox is no error).
	Delete(ctx context.Context, o Owner, sandboxID string) error
	// DeleteSnapshot removes a snapshot the run no longer needs
	// (idempotent).
	DeleteSnapshot(ctx context.Context, o Owner, snapshotID string) error
	// NewBudget makes the parent cgroup of a group's budget; the sandboxes
	// created with its id in CreateRequest.Budget run inside it. Release
	// removes it once no sandbox of it is left. A backend without budgets
	// returns an error wrapping sandbox.ErrUnsupported, and the group's
	// steps fail rather than run unbounded.
	NewBudget(ctx context.Context, o Owner, id string, l sandbox.Limits) (release func(), err error)
}

// Owner is who a run belongs to: the tenant its calls count against and
// the actor the audit names.
type Owner struct {
	Tenant string `json:"tenant"`
	Actor  string `json:"actor,omitempty"`
}

// CreateRequest is the sandbox of one attempt of a step.
type CreateRequest struct {
	// Template names the template of a fresh sandbox; Snapshot, when set,
	// starts the sandbox from that snapshot instead (Template is then its
	// template or empty).
	Template string
	Snapshot string
	Limits   sandbox.Limits
	Env      []string
	Policy   *api.CallRules
	Network  *api.Network
	// Inputs are host directories (artifact directories of earlier
	// steps, owned by the engine) bound read-only at their targets.
	Inputs []sandbox.Bind
	// Budget is the id of a budget made by NewBudget ("" for none);
	// CPUWeight is the sandbox's CPU weight inside it (1-10000, cgroup v2
	// cpu.weight units; 0 = the runtime's default), from the priority.
	Budget    string
	CPUWeight int
	// Timeout bounds the sandbox's life (0 = the backend's default).
	Timeout time.Duration
	Labels  map[string]string
}

// ExecRequest is the process of one attempt.
type ExecRequest struct {
	Args    []string
	Env     []string
	Timeout time.Duration
	Stdin   io.Reader
	Stdout  io.Writer
}

// Journal keeps runs durable: the engine saves a run's whole state at
// every transition and appends its events; after a restart it lists the
// runs that were not finished and takes them up again.
type Journal interface {
	// SaveRun writes the run's state (insert or replace) and appends evs
	// (their Seq already set) to its events, as one durable write.
	SaveRun(ctx context.Context, r *Record, evs []api.WorkflowEvent) error
	// Events returns a run's events after seq, up to limit.
	Events(ctx context.Context, run string, after uint64, limit int) ([]api.WorkflowEvent, error)
	// LoadRun returns one run of the owner's tenant (an error wrapping
	// ErrNotFound when there is none).
	LoadRun(ctx context.Context, tenant, run string) (*Record, error)
	// ListRuns lists a tenant's runs, newest first (state "" = any).
	ListRuns(ctx context.Context, tenant, state string, limit int) ([]*Record, error)
	// Unfinished returns every run whose state is pending or running, and
	// every run that ended with Garbage left.
	Unfinished(ctx context.Context) ([]*Record, error)
}

// Record is a run as the journal keeps it.
type Record struct {
	Owner Owner `json:"owner"`
	// Run is the run's state as the API shows it.
	Run api.WorkflowRun `json:"run"`
	// Document is the workflow document as submitted.
	Document string `json:"document"`
	// Added are steps added to concurrent groups while the run ran, as
	// submitted (group id and the step's JSON), in order.
	Added []AddedStep `json:"added,omitempty"`
	// LastSeq is the sequence number of the run's last event.
	LastSeq uint64 `json:"last_seq"`
	// Garbage are the light snapshots of a run that succeeded, still to
	// delete: the run is answered as succeeded first and they go after
	// (newest first). A journal lists a run with garbage among the
	// Unfinished ones, so that a restart deletes what a crash left.
	Garbage []string `json:"garbage,omitempty"`
	// Tries counts, per step id, the failed attempts of the step's current
	// round (since the run started or the step was last reset by a resume
	// or a retry from scratch): the part of its retry budget used. Kept by
	// the engine; a journal stores it with the rest of the record.
	Tries map[string]int `json:"tries,omitempty"`
}

// AddedStep is a step added to a concurrent group through the API.
type AddedStep struct {
	Group string `json:"group"`
	Step  []byte `json:"step"`
}

// CreateExecer is a Backend that can make a step's sandbox and run its
// process in one call (a create that carries its first exec), so that the
// process can start queued behind the sandbox's setup instead of after
// it. The engine uses it when its Backend has it, Create then Exec
// otherwise.
type CreateExecer interface {
	// CreateExec creates the sandbox c describes and runs x in it to its
	// end, as Create then Exec would: the same judgment, approvals,
	// records and audit (a create, then an exec of its own), x's stdin
	// and stdout as Exec says. As soon as the sandbox exists it calls
	// created with its id, once, before it returns (the process may
	// already run). An error after the sandbox exists returns its id too,
	// and the caller deletes the sandbox; a create refused for room
	// returns no id and an error wrapping ErrCapacity, and made nothing.
	CreateExec(ctx context.Context, o Owner, c CreateRequest, x ExecRequest, created func(sandboxID string)) (sandboxID string, res *sandbox.Result, err error)
}

// Agenter is a Backend that runs agent runs. The engine runs an agent
// step's attempts through it; on a Backend without it those attempts
// fail.
type Agenter interface {
	// Agent starts one agent run as an agent.create of the owner's would
	// and waits for its end; ctx ending first cancels the run (its end
	// still awaited, boundedly). req.Inputs are bound read-only into the
	// sandboxes the run makes for its first agent; with req.Keep that
	// agent's long-lived sandbox is not deleted at the run's end but
	// named in the answer's first AgentState (Agents[0].Sandbox) for the
	// engine, which collects the step's outputs from it and deletes it.
	// It returns the run's record whatever its state (a failed run is no
	// error); an error means the run could not be made or awaited (a
	// run refused for room returns an error wrapping ErrCapacity and
	// made nothing, and the engine tries again).
	Agent(ctx context.Context, o Owner, req AgentRequest) (*api.AgentRun, error)
}

// AgentRequest is the agent run of an agent step's attempt.
type AgentRequest struct {
	// Run is the agent.create: the agents document, the agent, the task
	// and the attempt's labels (LabelRun, LabelStep, LabelAttempt), which
	// the run gives its sandboxes.
	Run api.CreateAgentRun
	// Inputs are host directories (artifact directories of earlier
	// steps, owned by the engine) bound read-only at their targets.
	Inputs []sandbox.Bind
	// Keep asks for the agent's sandbox to be kept for the outputs.
	Keep bool
	// Previous is the agent run of the step's attempt before this one
	// when that attempt was interrupted by a stop of the daemon ("" for
	// none): it may still run, and is cancelled first.
	Previous string
	// Started, when not nil, is called once with the run's id as soon as
	// the run exists, before Agent returns.
	Started func(run string)
}
