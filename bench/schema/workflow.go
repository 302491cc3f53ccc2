package schema

import "github.com/moat-sandbox/moat/bench/internal/stats"

// Workflow is bench/workflow's results: workflow runs through `moat serve`
// against one cold create → first exec of the same daemon, and the CPU
// fairness of many steps under one budget. Rounds are the measured
// rounds (each runs every row once, in a random order), Warmup the
// unrecorded ones first; times are in ms.
type Workflow struct {
	Run
	Config WorkflowConfig `json:"config"`
	Daemon Serve          `json:"daemon"`
	// Rows holds each row's times, in report order: the kinds below.
	Rows []WorkflowRow `json:"rows"`
	// Fairness is the budget phase; nil when it was not run.
	Fairness *WorkflowFairness `json:"fairness,omitempty"`
}

// The kinds of bench/workflow's rows (WorkflowRow.Kind).
const (
	// WorkflowBaseline is one cold API create (no pool) followed by an
	// exec of /bin/true, until its answer: two requests, as the workflow
	// engine makes for each step.
	WorkflowBaseline = "baseline"
	// WorkflowBaselineExec is the same as one request: a create carrying
	// its first exec.
	WorkflowBaselineExec = "baseline-create-exec"
	// WorkflowChainLight is a sequential chain of trivial steps, each
	// from its predecessor's snapshot, a light snapshot after each: run
	// wall time, submit → run succeeded seen by the client.
	WorkflowChainLight = "chain-light"
	// WorkflowChainNone is the same chain with no snapshot and no from:
	// every step a fresh sandbox of the template.
	WorkflowChainNone = "chain-none"
	// WorkflowRetry is the retry of a chain's last step from the
	// snapshot it started from: the failed attempt's end to the step's
	// success, from the run's own timestamps.
	WorkflowRetry = "retry"
	// WorkflowRetryRun is the whole run of that chain, retry included.
	WorkflowRetryRun = "retry-run"
	// WorkflowScratch is the same chain run again from scratch, every
	// step passing: its wall time.
	WorkflowScratch = "scratch"
)

// WorkflowConfig is bench/workflow's own flags and method.
type WorkflowConfig struct {
	ChainSteps     int     `json:"chain_steps"`
	RetrySteps     int     `json:"retry_steps"`
	FairSteps      int     `json:"fair_steps"`
	FairRuns       int     `json:"fair_runs"`
	FairWindowSec  float64 `json:"fair_window_s"`
	FairSettleSec  float64 `json:"fair_settle_s"`
	FairLeadSec    float64 `json:"fair_lead_s"`
	FairCPUs       float64 `json:"fair_cpus"`
	CallTimeoutSec float64 `json:"call_timeout_s"`
	Timing         string  `json:"timing"`
	// Documents holds the workflow documents of the rows, by kind, as
	// submitted (the fairness run's is too long: FairScript is the
	// script of each of its steps, its clock values 0).
	Documents  map[string]string `json:"documents,omitempty"`
	FairScript string            `json:"fair_script,omitempty"`
}

// WorkflowRow is one row: its samples and their statistics.
type WorkflowRow struct {
	Kind string `json:"kind"`
	What string `json:"what"`
	// Steps is the number of steps of the row's workflow (0 for the
	// baselines).
	Steps int            `json:"steps,omitempty"`
	Stats *stats.Summary `json:"ms"`
	// Samples are the measured times in the order taken.
	Samples []float64 `json:"samples_ms"`
	// PerStep is the chains' wall time divided by their steps.
	PerStep *stats.Summary `json:"per_step_ms,omitempty"`
	// Phases are the times between a step's consecutive events (from
	// the run's event stream, the daemon's clock), over every step of
	// every measured run.
	Phases []WorkflowPhase `json:"phases,omitempty"`
	// Check says what was verified of each sample's run (the state
	// carried along the chain, the retry started from the snapshot);
	// Checked counts the samples that passed it.
	Check   string `json:"check,omitempty"`
	Checked int    `json:"checked,omitempty"`
	// Failures counts the samples that failed (recorded in Errors).
	Failures int `json:"failures"`
}

// WorkflowPhase is the time between two events of one step, or from
// one step's end to the next one's start ("handoff").
type WorkflowPhase struct {
	Name  string         `json:"name"`
	Stats *stats.Summary `json:"ms"`
}

// WorkflowFairness is the budget phase: Steps CPU-bound steps in one
// parallel group with budget.cpus = CPUs. Every step sleeps until a
// common start LeadSec after the submit, then spins; each measures its
// CPU time from SettleSec after the start (every step spinning by then)
// for WindowSec.
type WorkflowFairness struct {
	Steps     int     `json:"steps"`
	CPUs      float64 `json:"cpus"`
	WindowSec float64 `json:"window_s"`
	SettleSec float64 `json:"settle_s"`
	LeadSec   float64 `json:"lead_s"`
	Method    string  `json:"method"`
	// Runs holds each run; the report judges the worst.
	Runs []WorkflowFairRun `json:"runs"`
}

// WorkflowFairRun is one run of the budget phase.
type WorkflowFairRun struct {
	// Run is the workflow run's id, State its final state.
	Run   string `json:"run"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// WallSec is submit → the run's end; ReadySec submit → the last
	// step's script started (every sandbox created).
	WallSec  float64 `json:"wall_s"`
	ReadySec float64 `json:"ready_s"`
	// SpinSpreadMs is how long after the start the last step began to
	// spin (waking every step of a budget takes time).
	SpinSpreadMs float64 `json:"spin_spread_ms"`
	// Reported counts the steps whose report was read; Late those that
	// began to spin after the measurement's start (not every step was
	// spinning through it).
	Reported int `json:"reported"`
	Late     int `json:"late"`
	// GroupCPUs is the sum of the steps' CPU rates in their windows: the
	// group's CPU use in CPUs. APIGroupCPUs is the steps' results
	// (cpu_user_ms + cpu_sys_ms of the whole process, its set-up, sleep
	// and settling included) over the time from the start to the end.
	GroupCPUs    float64 `json:"group_cpus"`
	APIGroupCPUs float64 `json:"api_group_cpus"`
	// HostCPUBusy is, per CPU of the machine, the fraction of the window
	// it was busy (/proc/stat); OtherCPUs is their sum less GroupCPUs:
	// what other processes used meanwhile (a budget smaller than the
	// machine is confined to some of its CPUs, which other processes may
	// share).
	HostCPUBusy []float64 `json:"host_cpu_busy,omitempty"`
	OtherCPUs   float64   `json:"other_cpus"`
	// MaxDevPct and P95DevPct are the largest and the 95th percentile of
	// the steps' |rate / mean rate − 1| in percent: how far a step's
	// share of the group's CPU is from a fair one.
	MaxDevPct float64            `json:"max_dev_pct"`
	P95DevPct float64            `json:"p95_dev_pct"`
	Steps     []WorkflowFairStep `json:"steps"`
}

// WorkflowFairStep is one step of a fairness run, its times relative to
// the run's clock: SpinMs to the start, BeginMs to the measurement's
// start, EndMs to its end (negative: before).
type WorkflowFairStep struct {
	ID       string  `json:"id"`
	ArriveMs float64 `json:"arrive_ms"`
	SpinMs   float64 `json:"spin_ms"`
	BeginMs  float64 `json:"begin_ms"`
	EndMs    float64 `json:"end_ms"`
	// CPUMs is the step's CPU time in its window of WindowMs (its
	// shell's own accounting, times before and after the loop), CPUs
	// the rate; APICPUMs is its result's cpu_user_ms + cpu_sys_ms.
	CPUMs    float64 `json:"cpu_ms"`
	WindowMs float64 `json:"window_ms"`
	CPUs     float64 `json:"cpus"`
	APICPUMs int64   `json:"api_cpu_ms"`
	// DevPct is (CPUs / the mean of the steps' CPUs − 1) in percent.
	DevPct float64 `json:"dev_pct"`
}

// Row returns the row of kind, or nil.
func (f *Workflow) Row(kind string) *WorkflowRow {
	for i := range f.Rows {
		if f.Rows[i].Kind == kind {
			return &f.Rows[i]
		}
	}
	return nil
}

func (f *Workflow) check() error {
	if f.Rows == nil {
		return missing(`"rows"`)
	}
	return nil
}
