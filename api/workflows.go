package api

import (
	"encoding/json"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// Workflow run states (WorkflowRun.State).
const (
	RunPending   = "pending"   // accepted, no step started yet
	RunRunning   = "running"   // at least one step is running or ready
	RunSucceeded = "succeeded" // every step succeeded
	RunFailed    = "failed"    // a step failed after its retries
	RunCancelled = "cancelled" // workflow.cancel (a stopping daemon leaves its runs running)
)

// Workflow step states (WorkflowStep.State).
const (
	StepPending   = "pending"   // waits for its needs, its group's slot or budget
	StepRunning   = "running"   // an attempt runs
	StepRetrying  = "retrying"  // an attempt failed; the next waits for its backoff
	StepSucceeded = "succeeded" // an attempt exited 0 and its outputs were collected
	StepFailed    = "failed"    // every attempt failed
	StepSkipped   = "skipped"   // a step it waits for failed or was cancelled
	StepCancelled = "cancelled" // the run was cancelled while it waited or ran
)

// Workflow event types (WorkflowEvent.Type).
const (
	WfRunStarted     = "run.started"
	WfRunResumed     = "run.resumed"
	WfRunSucceeded   = "run.succeeded"
	WfRunFailed      = "run.failed"
	WfRunCancelled   = "run.cancelled"
	WfStepAdded      = "step.added"
	WfStepStarted    = "step.started"
	WfStepRetrying   = "step.retrying"
	WfStepSucceeded  = "step.succeeded"
	WfStepFailed     = "step.failed"
	WfStepSkipped    = "step.skipped"
	WfStepCancelled  = "step.cancelled"
	WfStepSnapshot   = "step.snapshot"
	WfStepArtifacts  = "step.artifacts"
	WfStepSandbox    = "step.sandbox"
	WfStepAgent      = "step.agent" // an agent step's attempt started its agent run (Agent)
	WfGroupBudget    = "group.budget"
	WfRunInterrupted = "run.interrupted"
)

// CreateWorkflow is the body of workflow.create: a workflow document
// (YAML or JSON, as text) to validate and run.
type CreateWorkflow struct {
	// Document is the workflow document itself (YAML; JSON accepted).
	Document string `json:"document"`
	// Name overrides the document's name in listings (optional).
	Name string `json:"name,omitempty"`
	// Labels are kept with the run and given to every step's sandbox.
	Labels map[string]string `json:"labels,omitempty"`
}

// WorkflowRef names a run (workflow.get, workflow.cancel).
type WorkflowRef struct {
	Run string `json:"run"`
}

// ListWorkflows is the request of workflow.list.
type ListWorkflows struct {
	// State keeps only runs in this state; empty lists every run.
	State string `json:"state,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// WorkflowList is the answer of workflow.list (runs without their steps'
// results, newest first).
type WorkflowList struct {
	Runs []WorkflowRun `json:"runs"`
}

// ResumeWorkflow is the body of workflow.resume: run a finished (failed or
// cancelled) run again from a step. The steps before it keep their results
// and snapshots and are not run again.
type ResumeWorkflow struct {
	Run string `json:"run"`
	// From is the step to run again, with every step that comes after it
	// (waits for it, starts from it, takes its outputs); empty resumes at
	// the steps that did not succeed.
	From string `json:"from,omitempty"`
}

// AddWorkflowStep is the body of workflow.add_step: a step added to a
// running run's concurrent group.
type AddWorkflowStep struct {
	Run string `json:"run"`
	// Group is the id of a concurrent group of the run that has not ended.
	Group string `json:"group"`
	// Step is the step, as in the document (JSON object; YAML text is
	// accepted as a JSON string).
	Step json.RawMessage `json:"step"`
}

// WorkflowEvents is the request of workflow.events.
type WorkflowEvents struct {
	Run string `json:"run"`
	// After skips events up to this sequence number.
	After uint64 `json:"after,omitempty"`
	// Follow keeps the stream open until the run ends.
	Follow bool `json:"follow,omitempty"`
}

// WorkflowRun is a run of a workflow document.
type WorkflowRun struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	State string `json:"state"`
	// Error says why a failed or cancelled run ended.
	Error   string            `json:"error,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
	Updated time.Time         `json:"updated"`
	Ended   *time.Time        `json:"ended,omitempty"`
	// Resumes counts workflow.resume calls and daemon restarts that took
	// the run up again.
	Resumes int `json:"resumes,omitempty"`
	// Steps are the run's steps in document order (steps added to a
	// concurrent group at the end), each with its latest attempt.
	Steps []WorkflowStep `json:"steps,omitempty"`
	// Groups are the run's groups with their budgets.
	Groups []WorkflowGroup `json:"groups,omitempty"`
}

// WorkflowGroup is one group of a run.
type WorkflowGroup struct {
	ID          string `json:"id"`
	Mode        string `json:"mode"`
	MaxParallel int    `json:"max_parallel,omitempty"`
	// Budget is the group's resource budget (cpus, memory, pids; zero
	// fields unlimited).
	Budget *sandbox.Limits `json:"budget,omitempty"`
	State  string          `json:"state"`
}

// WorkflowStep is one step of a run.
type WorkflowStep struct {
	ID       string `json:"id"`
	Group    string `json:"group,omitempty"`
	Kind     string `json:"kind"` // "run" (argv or sh), "build" (a build: step), "agent" (an agent: step)
	State    string `json:"state"`
	Priority string `json:"priority,omitempty"`
	// Attempt is the number of the latest attempt (1 on the first); 0
	// before the first.
	Attempt  int                `json:"attempt"`
	Attempts []WorkflowAttempt  `json:"attempts,omitempty"`
	Snapshot string             `json:"snapshot,omitempty"` // kept after success
	Outputs  []WorkflowArtifact `json:"outputs,omitempty"`
	Started  *time.Time         `json:"started,omitempty"`
	Ended    *time.Time         `json:"ended,omitempty"`
	Error    string             `json:"error,omitempty"`
	Result   *sandbox.Result    `json:"result,omitempty"` // of the latest attempt
	Needs    []string           `json:"needs,omitempty"`  // resolved waits (step ids)
	From     string             `json:"from,omitempty"`
	Inputs   map[string]string  `json:"inputs,omitempty"`
}

// WorkflowAttempt is one attempt of a step.
type WorkflowAttempt struct {
	Attempt int `json:"attempt"`
	// Sandbox ran the attempt; StartSnapshot is the snapshot it started
	// from ("" for a fresh sandbox of its template).
	Sandbox       string          `json:"sandbox,omitempty"`
	StartSnapshot string          `json:"start_snapshot,omitempty"`
	Template      string          `json:"template,omitempty"`
	State         string          `json:"state"`
	Started       time.Time       `json:"started"`
	Ended         *time.Time      `json:"ended,omitempty"`
	Result        *sandbox.Result `json:"result,omitempty"`
	Error         string          `json:"error,omitempty"`
	// Build is the build a build step's attempt ran (build.get shows
	// it: its log, its artifacts, its settings); its Result then holds
	// the build's exit code, duration, peak memory and its log's head
	// and tail (as stderr).
	Build string `json:"build,omitempty"`
	// Agent is the agent run an agent step's attempt ran (agent.get and
	// agent.events show it: its conversation, tool calls and answer);
	// its Result then holds the run's answer as stdout.
	Agent string `json:"agent,omitempty"`
}

// WorkflowArtifact is one file a step's outputs collected.
type WorkflowArtifact struct {
	// Path is the file's path inside the step's sandbox.
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// WorkflowEvent is one event of a run (workflow.events; the workflow
// field of an Event).
type WorkflowEvent struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Run     string    `json:"run"`
	Type    string    `json:"type"`
	Step    string    `json:"step,omitempty"`
	Group   string    `json:"group,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	// Sandbox, Snapshot: of a step.sandbox / step.snapshot event.
	Sandbox  string `json:"sandbox,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	// Agent: of a step.agent event, the agent run (agent.get,
	// agent.events show it).
	Agent string `json:"agent,omitempty"`
	// Message says what happened in words (an error, a retry's reason).
	Message   string             `json:"message,omitempty"`
	Result    *sandbox.Result    `json:"result,omitempty"`
	Artifacts []WorkflowArtifact `json:"artifacts,omitempty"`
}

// RunEnded reports whether a run in state has ended (until a resume).
func RunEnded(state string) bool {
	return state == RunSucceeded || state == RunFailed || state == RunCancelled
}

// StepEnded reports whether a step in state has ended (until a resume).
func StepEnded(state string) bool {
	switch state {
	case StepSucceeded, StepFailed, StepSkipped, StepCancelled:
		return true
	}
	return false
}
