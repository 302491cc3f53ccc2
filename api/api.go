// Package api is the wire contract of moat's control plane: the operations
// (one table, [Ops], that the HTTP server, the stdio JSON-RPC server and the
// Go SDK all read), their request and response bodies, streamed events and
// errors. The same operation has the same name as a JSON-RPC method and the
// same body over both transports; over HTTP the path parameters and query
// string fill the fields named by their json tags.
package api

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/sandbox"
)

// Version is the API version, the first element of every HTTP path.
const Version = "v1"

// Sandbox states.
const (
	StateRunning = "running" // the sandbox's init is up and takes calls
	StateStopped = "stopped" // deleted, pruned, or its init went away
)

// End reasons of a stopped sandbox.
const (
	EndDeleted  = "deleted"      // a client deleted it
	EndIdle     = "idle_timeout" // no call for its idle timeout
	EndTimeout  = "timeout"      // it reached its maximum age
	EndLost     = "lost"         // the daemon restarted (or was killed) while it ran
	EndExited   = "init_exited"  // its init process died
	EndShutdown = "shutdown"     // the daemon stopped
)

// CreateSandbox is the body of sandbox.create.
type CreateSandbox struct {
	// Workspace is a host directory bound at /workspace. Servers accept
	// host paths only when their operator allows it (stdio mode does);
	// empty means an in-memory workspace.
	Workspace string         `json:"workspace,omitempty"`
	Binds     []sandbox.Bind `json:"binds,omitempty"`
	Hostname  string         `json:"hostname,omitempty"`
	Limits    sandbox.Limits `json:"limits"`
	// TimeoutMs is the sandbox's maximum age; 0 takes the server default.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// IdleTimeoutMs ends the sandbox after this long without a call; 0
	// takes the server default.
	IdleTimeoutMs int64             `json:"idle_timeout_ms,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	// Policy are rules of this sandbox, the lowest layer below the
	// daemon's policy files: they can only narrow (deny, ask, the profile
	// "untrusted"); their allow rules grant nothing.
	Policy *CallRules `json:"policy,omitempty"`
	// Network is the sandbox's network; absent means mode none (loopback
	// only).
	Network *Network `json:"network,omitempty"`
	// Template names the template of the sandbox's root filesystem:
	// "host" (the default: the host's system directories, read-only) or
	// one imported with `moat template import`. Its env, workdir and
	// limits are defaults under the request's.
	Template string `json:"template,omitempty"`
	// Snapshot starts the sandbox from a snapshot of the caller's (a
	// fork); Template must then be empty or the snapshot's.
	Snapshot string `json:"snapshot,omitempty"`
	// Exec, when set, is the sandbox's first call: a process.exec body
	// (its sandbox field empty) that the daemon runs in the new sandbox
	// as soon as it can, queued behind the sandbox's setup where the
	// runtime allows. It is judged, approved, recorded and limited
	// exactly as a process.exec that followed the create; the answer is
	// the sandbox with the exec's outcome in its exec field (or, with
	// stream, the events of an exec after a first sandbox event). A
	// refused or failed exec does not undo the create.
	Exec *Exec `json:"exec,omitempty"`
}

// CallRules are policy rules of one sandbox (sandbox.create) or one call
// (process.exec, process.start): the lowest layer, below the daemon's
// policy files. They can only narrow: deny and ask rules count like any
// other, allow rules grant nothing, and the only profile they may name is
// "untrusted". Rules are Kind(pattern): Exec(git push*), Read(~/.ssh/**),
// Write(src/**), Net(domain:*.github.com).
//
// Its JSON is that of the policy engine's policy.CallRules, which the
// server converts it to (a test keeps the two the same).
type CallRules struct {
	// Profile is empty or "untrusted".
	Profile string   `json:"profile,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	Ask     []string `json:"ask,omitempty"`
	Deny    []string `json:"deny,omitempty"`
}

// Network is a sandbox's network.
type Network struct {
	// Mode is "none" (default: loopback only), "proxy" (moat's egress
	// proxy at 127.0.0.1:3128 inside the sandbox is the only way out) or
	// "open" (the host's network; only where the managed policy sets
	// open_network = true).
	Mode string `json:"mode,omitempty"`
	// AllowDomains admits destinations through the egress proxy (mode
	// proxy): names ("pypi.org") and subdomain wildcards
	// ("*.github.com", which does not match github.com itself). An IP
	// address or CIDR range ("127.0.0.1", "10.0.0.0/8") is accepted only
	// inside the managed policy's allow_cidr_entries (else 403
	// policy_denied). In an answer: the effective allowlist, without the
	// entries listed in dropped.
	AllowDomains []string `json:"allow_domains,omitempty"`
	// DenyDomains refuses destinations even where an allowlist admits
	// them (names, wildcards, IP addresses or CIDR ranges).
	DenyDomains []string `json:"deny_domains,omitempty"`
	// Dropped (answers only) are the requested allow_domains entries the
	// policy's ceiling refuses entirely: a deny rule of a policy file (or
	// of the sandbox's own rules, or deny_domains) covers all they name.
	// They stay refused, by that rule.
	Dropped []NetworkDrop `json:"dropped,omitempty"`
}

// NetworkDrop is an allowlist entry the policy's ceiling refuses.
type NetworkDrop struct {
	// Entry is the allow_domains entry as given.
	Entry string `json:"entry"`
	// Rule is the deny rule that covers it, Source where that rule is
	// written ("user /root/.config/moat/policy.toml:3").
	Rule   string `json:"rule,omitempty"`
	Source string `json:"source,omitempty"`
	// Reason says it in a sentence.
	Reason string `json:"reason"`
}

// SetNetwork sets a running sandbox's network mode and allowlist
// (sandbox.network): the whole network is replaced, like a create's
// network field. none -> proxy adds the egress proxy's listener inside
// the sandbox's network namespace; proxy -> none closes it and every
// proxied connection; open can be neither entered nor left after the
// create (409 conflict).
type SetNetwork struct {
	// Sandbox is the sandbox's id.
	Sandbox string `json:"sandbox"`
	// Mode is none, proxy or open; empty keeps the sandbox's mode.
	Mode string `json:"mode,omitempty"`
	// AllowDomains is the new allowlist (mode proxy), as in a create.
	AllowDomains []string `json:"allow_domains,omitempty"`
	// DenyDomains is the new list of refused destinations (mode proxy).
	DenyDomains []string `json:"deny_domains,omitempty"`
}

// SandboxPolicy is what the policy made of a sandbox at its create.
type SandboxPolicy struct {
	// Profile is the effective profile: untrusted or trusted.
	Profile string `json:"profile"`
	// Files are the policy files that were loaded, with their layer
	// ("managed /etc/moat/policy.toml").
	Files []string `json:"files,omitempty"`
	// Warnings are the policy's own (ignored widening rules of the
	// project file, ...).
	Warnings []string `json:"warnings,omitempty"`
	// Unenforced lists, one line each, what the kernel does not enforce
	// and only the daemon's decisions do (for the calls it judges).
	Unenforced []string `json:"unenforced,omitempty"`
	// Restrictions counts the paths hidden or made read-only in the
	// sandbox by the policy.
	Restrictions int `json:"restrictions"`
	// Created lists host entries made so they could be protected (the
	// empty directory of a submodule that had none).
	Created []string `json:"created,omitempty"`
}

// Sandbox describes one sandbox.
type Sandbox struct {
	ID            string            `json:"id"`
	Tenant        string            `json:"tenant"`
	State         string            `json:"state"`
	EndReason     string            `json:"end_reason,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	LastActiveAt  time.Time         `json:"last_active_at"`
	EndedAt       *time.Time        `json:"ended_at,omitempty"`
	TimeoutMs     int64             `json:"timeout_ms"`
	IdleTimeoutMs int64             `json:"idle_timeout_ms"`
	Workspace     string            `json:"workspace,omitempty"`
	Hostname      string            `json:"hostname,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	// Running counts the sandbox's processes that have not ended.
	Running     int                  `json:"running"`
	Enforcement *sandbox.Enforcement `json:"enforcement,omitempty"`
	// Policy is what the policy made of the sandbox (running sandboxes).
	Policy *SandboxPolicy `json:"policy,omitempty"`
	// Network is the sandbox's network as created.
	Network *Network `json:"network,omitempty"`
	// Template is the template of its root filesystem.
	Template string `json:"template"`
	// Snapshot is the snapshot it was started from or last restored to.
	Snapshot string `json:"snapshot,omitempty"`
	// Pooled: it was handed out from a warm pool.
	Pooled bool `json:"pooled,omitempty"`
	// Exec is, in the answer of a sandbox.create that carried an exec
	// (CreateSandbox.Exec), that exec's outcome; absent elsewhere.
	Exec *ExecOutcome `json:"exec,omitempty"`
}

// ExecOutcome is the outcome of the exec a sandbox.create carried: the
// process's result (which may be a failure of the process itself: see
// its exit_code and exit_reason), or the error that refused or failed the
// call (policy_denied, busy, storage…), exactly as a process.exec would
// have answered it. The sandbox exists either way.
type ExecOutcome struct {
	Result *sandbox.Result `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// SandboxRef names a sandbox (sandbox.get, sandbox.delete).
type SandboxRef struct {
	Sandbox string `json:"sandbox"`
}

// ListSandboxes is the body of sandbox.list.
type ListSandboxes struct {
	// State keeps only sandboxes in this state ("running", "stopped");
	// empty lists running ones and those that stopped recently.
	State string `json:"state,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// SandboxList is the answer of sandbox.list.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// Exec is the body of process.exec (run to completion) and process.start
// (run in the background).
type Exec struct {
	Sandbox   string   `json:"sandbox"`
	Args      []string `json:"args"`
	Env       []string `json:"env,omitempty"`
	Cwd       string   `json:"cwd,omitempty"`
	TimeoutMs int64    `json:"timeout_ms,omitempty"`
	// Stdin is the process's whole standard input (exec only; start
	// takes stdin through process.stdin). StdinBase64 is the same for
	// bytes that are not UTF-8.
	Stdin       string `json:"stdin,omitempty"`
	StdinBase64 []byte `json:"stdin_base64,omitempty"`
	// OutputLimit caps each captured stream (exec) or the retained
	// output a reader can still fetch (start).
	OutputLimit int `json:"output_limit,omitempty"`
	// Stream sends output as events while the process runs (exec only).
	Stream bool `json:"stream,omitempty"`
	// Concurrent lets this exec run beside another running exec in the
	// same sandbox; otherwise the second one is refused (409 busy).
	Concurrent bool `json:"concurrent,omitempty"`
	// Policy are rules for this call alone, below the sandbox's: they can
	// only narrow.
	Policy *CallRules `json:"policy,omitempty"`
}

// Process states.
const (
	ProcRunning = "running"
	ProcExited  = "exited"
)

// Process describes a process started in a sandbox.
type Process struct {
	ID        uint64          `json:"id"`
	Sandbox   string          `json:"sandbox"`
	Args      []string        `json:"args"`
	State     string          `json:"state"`
	StartedAt time.Time       `json:"started_at"`
	EndedAt   *time.Time      `json:"ended_at,omitempty"`
	Result    *sandbox.Result `json:"result,omitempty"`
}

// ProcessRef names a process (process.get, process.wait).
type ProcessRef struct {
	Sandbox string `json:"sandbox"`
	Process uint64 `json:"process"`
	// TimeoutMs bounds process.wait; on expiry the process is returned
	// still running. 0 waits as long as the request may last.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
}

// ProcessList is the answer of process.list.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// ReadOutput is the body of process.output.
type ReadOutput struct {
	Sandbox string `json:"sandbox"`
	Process uint64 `json:"process"`
	// After resumes after the event with this sequence number.
	After uint64 `json:"after,omitempty"`
	// Follow keeps the stream open until the process ends.
	Follow bool `json:"follow,omitempty"`
}

// Stdin is the body of process.stdin.
type Stdin struct {
	Sandbox    string `json:"sandbox"`
	Process    uint64 `json:"process"`
	Data       string `json:"data,omitempty"`
	DataBase64 []byte `json:"data_base64,omitempty"`
	// EOF closes the process's standard input after the data.
	EOF bool `json:"eof,omitempty"`
}

// Signal is the body of process.signal.
type Signal struct {
	Sandbox string `json:"sandbox"`
	Process uint64 `json:"process"`
	// Signal is a name ("TERM", "SIGKILL") or a number ("15").
	Signal string `json:"signal"`
}

// Event types of a stream.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventExit   = "exit"  // the last event: the process's result
	EventError  = "error" // the last event: the call failed
	EventLost   = "lost"  // output before this event was dropped
	// EventApproval carries an approval: a call waiting for one (its
	// creation and its answer), or the approvals.list follow stream.
	EventApproval = "approval"
	// EventSandbox carries the sandbox a streamed sandbox.create with an
	// exec made: the stream's first event, before the exec's.
	EventSandbox = "sandbox"
	// EventWorkflow carries one event of a workflow run (workflow.events);
	// its seq is the run event's own.
	EventWorkflow = "workflow"
	// EventAgent carries one event of an agent run (agent.events); its
	// seq is the run event's own.
	EventAgent = "agent"
)

// Event is one element of a stream (NDJSON line over HTTP, a
// "process.event" notification over JSON-RPC). Seq numbers the events of
// one process from 1; a reader resumes with After = the last Seq it saw.
type Event struct {
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Process uint64 `json:"process,omitempty"`
	// LostBytes is, in a lost event, how many bytes of output were
	// dropped before the next event.
	LostBytes int64 `json:"lost_bytes,omitempty"`
	// Text carries output that is valid UTF-8; Data (base64) any other.
	Text   string          `json:"text,omitempty"`
	Data   []byte          `json:"data,omitempty"`
	Result *sandbox.Result `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	// Approval is the approval of an approval event.
	Approval *Approval `json:"approval,omitempty"`
	// Sandbox is the sandbox of a sandbox event.
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	// Workflow is the workflow event of a workflow.events stream (type
	// "workflow").
	Workflow *WorkflowEvent `json:"workflow,omitempty"`
	// Agent is the agent event of an agent.events stream (type "agent").
	Agent *AgentEvent `json:"agent,omitempty"`
}

// SetOutput puts p in Text when it is valid UTF-8, else in Data.
func (e *Event) SetOutput(p []byte) {
	if utf8.Valid(p) {
		e.Text = string(p)
		return
	}
	e.Data = p
}

// Output returns the bytes of an output event.
func (e *Event) Output() []byte {
	if e.Data != nil {
		return e.Data
	}
	return []byte(e.Text)
}

// FilePath names a file (file.read, file.list, file.stat, file.download).
type FilePath struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path"`
	// MaxBytes caps a read or download below the server's cap.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// WriteFile is the body of file.write (and file.upload, whose Content is
// a tar stream). Over HTTP the content is the raw request body.
type WriteFile struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path"`
	Content []byte `json:"content"`
	// Mode is the octal permission of a new file ("0644" by default).
	Mode string `json:"mode,omitempty"`
}

// FileContent is the answer of file.read and file.download over JSON-RPC
// (over HTTP the body is the raw content).
type FileContent struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Content []byte `json:"content"`
}

// Written is the answer of file.write and file.upload.
type Written struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// DirList is the answer of file.list.
type DirList struct {
	Path    string             `json:"path"`
	Entries []sandbox.FileInfo `json:"entries"`
}

// Mkdir is the body of file.mkdir.
type Mkdir struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
	Mode    string `json:"mode,omitempty"`
}

// Remove is the body of file.remove.
type Remove struct {
	Sandbox   string `json:"sandbox"`
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// Move is the body of file.move.
type Move struct {
	Sandbox string `json:"sandbox"`
	From    string `json:"from"`
	To      string `json:"to"`
}

// OK is the answer of operations that return nothing else.
type OK struct {
	OK bool `json:"ok"`
}

// AuditQuery is the body of audit.query; the server restricts it to the
// caller's tenant.
type AuditQuery struct {
	Sandbox  string    `json:"sandbox,omitempty"`
	Call     string    `json:"call,omitempty"`
	Kind     string    `json:"kind,omitempty"`
	Decision string    `json:"decision,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Until    time.Time `json:"until,omitzero"`
	AfterSeq uint64    `json:"after_seq,omitempty"`
	// BeforeSeq, when not 0, keeps events with a smaller sequence
	// number: with Newest, the Seq of a page's first event gives the page
	// before it.
	BeforeSeq uint64 `json:"before_seq,omitempty"`
	Actor     string `json:"actor,omitempty"`
	Limit     int    `json:"limit,omitempty"`
	Newest    bool   `json:"newest,omitempty"`
}

// AuditEvent is one audit record. Its JSON is that of the audit log's
// audit.Event, which the server converts to it (a test keeps the two the
// same).
type AuditEvent struct {
	// Seq is the event's sequence number: it starts at 1 and increases by
	// one with every event of the daemon's audit log.
	Seq uint64 `json:"seq"`
	// Time is when the event happened (UTC).
	Time time.Time `json:"time"`
	// Tenant is the tenant on whose behalf the call was made ("" for
	// operator or system events).
	Tenant string `json:"tenant"`
	// Actor is who made the call: a token's id (token:xxxxxxxx), stdio,
	// system, pruner, anonymous.
	Actor string `json:"actor"`
	// Sandbox is the id of the sandbox concerned, if any.
	Sandbox string `json:"sandbox,omitempty"`
	// Call is the id of the call or process concerned, if any.
	Call string `json:"call,omitempty"`
	// Kind says what happened, as a dotted name such as "sandbox.create",
	// "process.exec", "process.exit", "file.write" or "policy.decision".
	Kind string `json:"kind"`
	// Decision is the policy decision: allow, deny, ask, or "" when no
	// decision was involved.
	Decision string `json:"decision,omitempty"`
	// Rule is the policy rule that decided, if any.
	Rule string `json:"rule,omitempty"`
	// Request is what was asked, as JSON, redacted.
	Request json.RawMessage `json:"request,omitempty"`
	// Result is a summary of the outcome, as JSON, redacted.
	Result json.RawMessage `json:"result,omitempty"`
	// DurationMs is how long the call took, in milliseconds.
	DurationMs int64 `json:"duration_ms,omitempty"`
	// Error is the error message of a failed call.
	Error string `json:"error,omitempty"`
}

// AuditPage is the answer of audit.query.
type AuditPage struct {
	Events []AuditEvent `json:"events"`
	// More is true when more events match after the last one returned.
	More bool `json:"more"`
}

// Approval states.
const (
	ApprovalPending   = "pending"   // waiting for an answer
	ApprovalAllowed   = "allowed"   // an approver allowed it
	ApprovalDenied    = "denied"    // an approver denied it
	ApprovalExpired   = "expired"   // nobody answered in time: denied
	ApprovalWithdrawn = "withdrawn" // the waiting call went away (cancelled, sandbox ended)
)

// Approval answers and scopes.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	ScopeOnce     = "once"   // this call only
	ScopeAlways   = "always" // and the same request in the same sandbox from now on
)

// Approval is a call that a policy's ask rule holds until a person
// answers.
type Approval struct {
	ID      string `json:"id"`
	Tenant  string `json:"tenant"`
	Sandbox string `json:"sandbox"`
	// Op is the operation that waits (process.exec, file.read, ...);
	// Actor who called it.
	Op    string `json:"op"`
	Actor string `json:"actor"`
	// Kind is the request's kind: Exec, Read or Write.
	Kind string `json:"kind"`
	// Request is the request written like a rule: Exec(git push origin),
	// Write(/home/u/project/.env).
	Request string `json:"request"`
	// Rule, Source and Reason are the policy's: the ask rule, where it is
	// written, and the sentence that says why.
	Rule      string    `json:"rule"`
	Source    string    `json:"source"`
	Reason    string    `json:"reason"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when a pending approval is denied for want of an
	// answer.
	ExpiresAt  time.Time  `json:"expires_at"`
	AnsweredAt *time.Time `json:"answered_at,omitempty"`
	// AnsweredBy is the approver (a token's id, stdio) or "system" for an
	// expired or withdrawn approval.
	AnsweredBy string `json:"answered_by,omitempty"`
	// Scope of an allow: once or always.
	Scope string `json:"scope,omitempty"`
	// Comment is the approver's reason, given with the answer.
	Comment string `json:"comment,omitempty"`
}

// ListApprovals is the body of approvals.list.
type ListApprovals struct {
	// State keeps approvals in this state (default pending); "all" keeps
	// every state.
	State   string `json:"state,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	// Follow streams approval events: the matching approvals, then every
	// approval created or answered from then on.
	Follow bool `json:"follow,omitempty"`
}

// ApprovalList is the answer of approvals.list.
type ApprovalList struct {
	Approvals []Approval `json:"approvals"`
}

// ApprovalRef names an approval (approvals.get).
type ApprovalRef struct {
	ID string `json:"id"`
}

// AnswerApproval is the body of approvals.answer.
type AnswerApproval struct {
	ID string `json:"id"`
	// Decision is allow or deny.
	Decision string `json:"decision"`
	// Scope of an allow: once (default) or always.
	Scope string `json:"scope,omitempty"`
	// Reason is the approver's, told to the agent with a denial.
	Reason string `json:"reason,omitempty"`
}

// Health is the answer of /healthz and /readyz.
type Health struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}
