package api

import (
	"encoding/json"
	"time"
)

// Agent run states (AgentRun.State).
const (
	AgentPending   = "pending"   // accepted, its first model call not made yet
	AgentRunning   = "running"   // a model call or a tool call is under way
	AgentSucceeded = "succeeded" // the agent gave its final answer
	AgentFailed    = "failed"    // an error, or max_turns reached
	AgentCancelled = "cancelled" // agent.cancel
)

// Agent event types (AgentEvent.Type).
const (
	AgentEvRunStarted     = "run.started"
	AgentEvRunResumed     = "run.resumed"
	AgentEvRunSucceeded   = "run.succeeded"
	AgentEvRunFailed      = "run.failed"
	AgentEvRunCancelled   = "run.cancelled"
	AgentEvRunInterrupted = "run.interrupted" // the daemon stopped; it resumes at the next start
	AgentEvModelRequest   = "model.request"   // a model call starts (provider chosen)
	AgentEvModelResponse  = "model.response"  // the model answered: text and/or tool calls, usage
	AgentEvModelError     = "model.error"     // a provider failed (a retry or failover follows, or the run fails)
	AgentEvToolCall       = "tool.call"       // the model asked for a tool; Decision says the policy's verdict
	AgentEvToolResult     = "tool.result"     // the tool's result as the model gets it
	AgentEvHandoff        = "handoff"         // an agent handed a task to another (Tool.Arguments: to, task)
	AgentEvHandoffResult  = "handoff.result"  // the other agent's answer came back
	AgentEvMessage        = "message"         // a user message added (the task, or agent.resume's)
)

// CreateAgentRun is the request of agent.create: run Agent of Document on
// Task.
type CreateAgentRun struct {
	// Document is the agents file (YAML; JSON accepted): its agents and
	// max_turns. A daemon's providers are its own (its model client):
	// a document's providers section is refused by the daemon's API
	// unless it is the daemon that moat agent run started for itself.
	Document string `json:"document"`
	// Agent names the agent the task is given to.
	Agent string `json:"agent"`
	// Task is the first user message.
	Task string `json:"task"`
	// Labels are kept with the run and given to its sandboxes.
	Labels map[string]string `json:"labels,omitempty"`
}

// AgentRun is one run: the agent, its sub-agents (handoffs), their
// conversations' sizes, usage, the final answer.
type AgentRun struct {
	ID    string `json:"id"`
	Agent string `json:"agent"`
	Task  string `json:"task"`
	State string `json:"state"`
	// Answer is the agent's final answer (succeeded).
	Answer string `json:"answer,omitempty"`
	// Error says why a failed or cancelled run ended.
	Error   string            `json:"error,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
	Updated time.Time         `json:"updated"`
	Ended   *time.Time        `json:"ended,omitempty"`
	// Turns counts model calls of every agent of the run.
	Turns int        `json:"turns"`
	Usage AgentUsage `json:"usage"`
	// Agents are the agents the run used (the first is Agent), each with
	// its own persistent conversation and sandbox.
	Agents []AgentState `json:"agents,omitempty"`
	// Resumes counts agent.resume calls and daemon restarts that took the
	// run up again.
	Resumes int `json:"resumes,omitempty"`
}

// AgentUsage is what model calls cost.
type AgentUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// AgentState is one agent of a run.
type AgentState struct {
	Name string `json:"name"`
	// Messages is the length of its conversation (its persistent context).
	Messages int `json:"messages"`
	// Sandbox is its long-lived sandbox (sandbox: per_call false), if made.
	Sandbox   string     `json:"sandbox,omitempty"`
	Usage     AgentUsage `json:"usage"`
	ToolCalls int        `json:"tool_calls"`
}

// AgentEvent is one event of a run (agent.events; the agent field of an
// Event).
type AgentEvent struct {
	Seq   uint64    `json:"seq"`
	Time  time.Time `json:"time"`
	Type  string    `json:"type"`
	Agent string    `json:"agent,omitempty"`
	// Text: the model's text (model.response), a message (message), the
	// final answer (run.succeeded), an error (model.error, run.failed).
	Text string `json:"text,omitempty"`
	// Provider and Model answered the model call (model.*).
	Provider string      `json:"provider,omitempty"`
	Model    string      `json:"model,omitempty"`
	Usage    *AgentUsage `json:"usage,omitempty"`
	// Tool is the tool call of tool.*, handoff and handoff.result.
	Tool       *AgentToolCall `json:"tool,omitempty"`
	DurationMs int64          `json:"duration_ms,omitempty"`
}

// AgentToolCall is one tool call and, once it ran, its result.
type AgentToolCall struct {
	// ID is the model's id of the call.
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Decision is the policy's: allow, ask, deny (and, after ask, the
	// approver's answer in Error when refused).
	Decision string `json:"decision,omitempty"`
	Rule     string `json:"rule,omitempty"`
	// Result is the text the model gets back (head/tail-truncated output,
	// the exit code); Error is set for a refused or failed call (also
	// given to the model, as a tool error).
	Result   string `json:"result,omitempty"`
	Error    string `json:"error,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Sandbox  string `json:"sandbox,omitempty"`
}

// AgentRunRef names one run.
type AgentRunRef struct {
	Run string `json:"run"`
}

// ListAgentRuns is the request of agent.list.
type ListAgentRuns struct {
	State string `json:"state,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// AgentRunList is the answer of agent.list, newest first.
type AgentRunList struct {
	Runs []AgentRun `json:"runs"`
}

// AgentEvents is the request of agent.events: the events after After;
// Follow waits for more until the run ends.
type AgentEvents struct {
	Run    string `json:"run"`
	After  uint64 `json:"after,omitempty"`
	Follow bool   `json:"follow,omitempty"`
}

// ResumeAgentRun is the request of agent.resume: take up a run that
// ended (failed, cancelled, or succeeded: its conversation persists) with
// Task as a new user message to its first agent ("" to retry a failed or
// cancelled run from where it stopped).
type ResumeAgentRun struct {
	Run  string `json:"run"`
	Task string `json:"task,omitempty"`
}
