package schema

import "github.com/moat-sandbox/moat/bench/internal/stats"

// Agent is bench/agent's results: moat's agent runs (issue 23) through
// one `moat serve` whose model client calls a fake OpenAI-compatible
// provider in the benchmark's process that answers at once. Times are in
// ms.
type Agent struct {
	Run
	Config AgentConfig `json:"config"`
	Daemon Serve       `json:"daemon"`
	// Overhead is one run at a time: each tool call's overhead against
	// the exec round trip of a live sandbox.
	Overhead AgentOverhead `json:"overhead"`
	// Concurrency is Concurrency.Runs runs at once on the daemon's one
	// model client.
	Concurrency AgentConcurrency `json:"concurrency"`
}

// AgentConfig is bench/agent's own flags and method.
type AgentConfig struct {
	// Calls is the tool calls of each overhead run (Rounds runs after
	// Warmup unrecorded ones); ConcurrentRuns the runs started at once,
	// ConcurrentCalls the tool calls of each.
	Calls           int `json:"calls"`
	ConcurrentRuns  int `json:"concurrent_runs"`
	ConcurrentCalls int `json:"concurrent_calls"`
	// MaxConcurrency is the fake provider's max_concurrency in the
	// daemon's models file: the model calls in flight at once.
	MaxConcurrency int `json:"max_concurrency"`
	// Tool is the command of every tool call (shell_exec), Exec the
	// baseline's argv.
	Tool           string   `json:"tool"`
	Exec           []string `json:"exec"`
	CallTimeoutSec float64  `json:"call_timeout_s"`
	Timing         string   `json:"timing"`
}

// AgentOverhead is the tool-call overhead, one run at a time.
type AgentOverhead struct {
	// ToolCall is each tool call but a run's first: the model's answer
	// asking for it leaving the fake provider → the next model request
	// (carrying its result) arriving there. FirstCall is the first call
	// of each run, which also makes the agent's sandbox.
	ToolCall  *stats.Summary `json:"tool_call_ms"`
	FirstCall *stats.Summary `json:"first_call_ms"`
	// Exec is the baseline: one exec round trip of Config.Exec in a live
	// sandbox through the SDK (process.exec, the same daemon).
	Exec *stats.Summary `json:"exec_ms"`
	// Run is each measured run's wall time, agent.create to its end.
	Run *stats.Summary `json:"run_ms"`
	// Samples are ToolCall's and Exec's samples, in the order taken.
	ToolCallSamples []float64 `json:"tool_call_samples_ms"`
	ExecSamples     []float64 `json:"exec_samples_ms"`
	Failures        int       `json:"failures"`
}

// AgentConcurrency is the tool latency with many runs at once.
type AgentConcurrency struct {
	// Runs is how many runs were started at once; Succeeded how many
	// ended with their answer.
	Runs      int `json:"runs"`
	Succeeded int `json:"succeeded"`
	// ToolCall is every tool call but a run's first (as in
	// AgentOverhead); FirstCall the first ones (each makes a sandbox, all
	// at once).
	ToolCall  *stats.Summary `json:"tool_call_ms"`
	FirstCall *stats.Summary `json:"first_call_ms"`
	// Model is the fake provider's own time per request (arrival to the
	// answer sent): nothing, as it answers at once.
	Model *stats.Summary `json:"model_ms"`
	// PeakInFlight is the most model requests the fake had in flight at
	// once (at most Config.MaxConcurrency).
	PeakInFlight int `json:"peak_in_flight"`
	// WallMs is the first create to the last run's end.
	WallMs          float64   `json:"wall_ms"`
	ToolCallSamples []float64 `json:"tool_call_samples_ms"`
	Failures        int       `json:"failures"`
}

func (a *Agent) check() error {
	if a.Overhead.ToolCall == nil && a.Concurrency.ToolCall == nil && a.Overhead.Exec == nil {
		return missing(`"overhead"`)
	}
	return nil
}
