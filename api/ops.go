package api

import "github.com/moat-sandbox/moat/sandbox"

// Body says how an HTTP request or answer carries its payload.
type Body int

const (
	// BodyJSON: a JSON object (the request type, the answer type).
	BodyJSON Body = iota
	// BodyNone: no request body; every field comes from the path and the
	// query string.
	BodyNone
	// BodyRaw: raw bytes (application/octet-stream, or application/x-tar
	// for archives): a file's content or a tar stream. Over JSON-RPC the
	// same bytes travel base64-encoded in the "content" field.
	BodyRaw
	// BodyStream: NDJSON (application/x-ndjson), one [Event] per line.
	// Over JSON-RPC the events are "process.event" notifications sent
	// before the response.
	BodyStream
)

// Op is one operation of the API.
type Op struct {
	// Name is the JSON-RPC method and the operation's id in the OpenAPI
	// document.
	Name string
	// Method and Path route it over HTTP; {sandbox}, {process},
	// {snapshot} and {id} fill the request's fields of those names.
	Method, Path string
	// In and Out say how the request and the answer travel over HTTP.
	In, Out Body
	// Summary documents the operation in one line.
	Summary string
	// Request and Response are zero values of the request type and of
	// the answer (for a stream: of the JSON-RPC response that follows
	// the events; for raw bodies: of the JSON-RPC form).
	Request, Response any
}

// Operation names.
const (
	OpSandboxCreate  = "sandbox.create"
	OpSandboxList    = "sandbox.list"
	OpSandboxGet     = "sandbox.get"
	OpSandboxDelete  = "sandbox.delete"
	OpExec           = "process.exec"
	OpStart          = "process.start"
	OpProcessList    = "process.list"
	OpProcessGet     = "process.get"
	OpOutput         = "process.output"
	OpStdin          = "process.stdin"
	OpSignal         = "process.signal"
	OpWait           = "process.wait"
	OpFileRead       = "file.read"
	OpFileWrite      = "file.write"
	OpFileList       = "file.list"
	OpFileStat       = "file.stat"
	OpFileMkdir      = "file.mkdir"
	OpFileRemove     = "file.remove"
	OpFileMove       = "file.move"
	OpFileUpload     = "file.upload"
	OpFileDownload   = "file.download"
	OpSandboxRestore = "sandbox.restore"
	OpSandboxNetwork = "sandbox.network"
	OpTemplateList   = "template.list"
	OpSnapshotCreate = "snapshot.create"
	OpSnapshotList   = "snapshot.list"
	OpSnapshotGet    = "snapshot.get"
	OpSnapshotDelete = "snapshot.delete"
	OpSnapshotFork   = "snapshot.fork"
	OpAuditQuery     = "audit.query"
	OpApprovalList   = "approvals.list"
	OpApprovalGet    = "approvals.get"
	OpApprovalAnswer = "approvals.answer"
	OpWorkflowCreate = "workflow.create"
	OpWorkflowList   = "workflow.list"
	OpWorkflowGet    = "workflow.get"
	OpWorkflowEvents = "workflow.events"
	OpWorkflowCancel = "workflow.cancel"
	OpWorkflowResume = "workflow.resume"
	OpWorkflowAdd    = "workflow.add_step"
	OpBuildCreate    = "build.create"
	OpBuildList      = "build.list"
	OpBuildGet       = "build.get"
	OpBuildLog       = "build.log"
	OpBuildArtifact  = "build.artifact"
	OpBuildDelete    = "build.delete"
	OpAgentCreate    = "agent.create"
	OpAgentList      = "agent.list"
	OpAgentGet       = "agent.get"
	OpAgentEvents    = "agent.events"
	OpAgentCancel    = "agent.cancel"
	OpAgentResume    = "agent.resume"

	// NotifyEvent is the JSON-RPC notification that carries a stream's
	// events (also the approval events of a waiting exec and of
	// approvals.list with follow): params {"id": <request id>, "event":
	// Event}.
	NotifyEvent = "process.event"
	// RPCCancel is the JSON-RPC notification a client sends to cancel a
	// request it no longer waits for: params {"id": <request id>}. A
	// cancelled exec kills its process, as a dropped HTTP connection does.
	RPCCancel = "$/cancelRequest"
)

const sb = "/v1/sandboxes/{sandbox}"

// Ops is every operation, in the order the documentation lists them.
var Ops = []Op{
	{OpSandboxCreate, "POST", "/v1/sandboxes", BodyJSON, BodyJSON, "Create a sandbox and wait until it is ready.", CreateSandbox{}, Sandbox{}},
	{OpSandboxList, "GET", "/v1/sandboxes", BodyNone, BodyJSON, "List the caller's sandboxes.", ListSandboxes{}, SandboxList{}},
	{OpSandboxGet, "GET", sb, BodyNone, BodyJSON, "Describe one sandbox.", SandboxRef{}, Sandbox{}},
	{OpSandboxDelete, "DELETE", sb, BodyNone, BodyJSON, "Kill every process of a sandbox and remove it.", SandboxRef{}, Sandbox{}},
	{OpSandboxNetwork, "PUT", sb + "/network", BodyJSON, BodyJSON, "Set a running sandbox's network mode and allowlist, within the policy's ceiling.", SetNetwork{}, Network{}},
	{OpExec, "POST", sb + "/exec", BodyJSON, BodyJSON, "Run a process to completion; with stream=true the answer is an NDJSON event stream.", Exec{}, sandbox.Result{}},
	{OpStart, "POST", sb + "/processes", BodyJSON, BodyJSON, "Start a process in the background.", Exec{}, Process{}},
	{OpProcessList, "GET", sb + "/processes", BodyNone, BodyJSON, "List the sandbox's processes.", SandboxRef{}, ProcessList{}},
	{OpProcessGet, "GET", sb + "/processes/{process}", BodyNone, BodyJSON, "Describe one process (with its result once it has ended).", ProcessRef{}, Process{}},
	{OpOutput, "GET", sb + "/processes/{process}/output", BodyNone, BodyStream, "Stream a process's output from a sequence number; follow=true waits for the end.", ReadOutput{}, Process{}},
	{OpStdin, "POST", sb + "/processes/{process}/stdin", BodyJSON, BodyJSON, "Write to a process's standard input; eof=true closes it.", Stdin{}, OK{}},
	{OpSignal, "POST", sb + "/processes/{process}/signal", BodyJSON, BodyJSON, "Send a signal to a process's group.", Signal{}, OK{}},
	{OpWait, "POST", sb + "/processes/{process}/wait", BodyJSON, BodyJSON, "Wait for a process to end (bounded by timeout_ms).", ProcessRef{}, Process{}},
	{OpFileRead, "GET", sb + "/files", BodyNone, BodyRaw, "Read a file.", FilePath{}, FileContent{}},
	{OpFileWrite, "PUT", sb + "/files", BodyRaw, BodyJSON, "Replace a file atomically with the request body.", WriteFile{}, Written{}},
	{OpFileList, "GET", sb + "/files/list", BodyNone, BodyJSON, "List a directory.", FilePath{}, DirList{}},
	{OpFileStat, "GET", sb + "/files/stat", BodyNone, BodyJSON, "Describe a file without following a final symlink.", FilePath{}, sandbox.FileInfo{}},
	{OpFileMkdir, "POST", sb + "/files/mkdir", BodyJSON, BodyJSON, "Create a directory.", Mkdir{}, OK{}},
	{OpFileRemove, "POST", sb + "/files/remove", BodyJSON, BodyJSON, "Remove a file or directory.", Remove{}, OK{}},
	{OpFileMove, "POST", sb + "/files/move", BodyJSON, BodyJSON, "Move or rename a file or directory.", Move{}, OK{}},
	{OpFileUpload, "PUT", sb + "/archive", BodyRaw, BodyJSON, "Extract a tar stream under a directory.", WriteFile{}, Written{}},
	{OpFileDownload, "GET", sb + "/archive", BodyNone, BodyRaw, "Download a file or tree as a tar stream.", FilePath{}, FileContent{}},
	{OpTemplateList, "GET", "/v1/templates", BodyNone, BodyJSON, "List the templates sandboxes can be created from.", ListTemplates{}, TemplateList{}},
	{OpSnapshotCreate, "POST", sb + "/snapshots", BodyJSON, BodyJSON, "Pause the sandbox and capture its filesystem into an immutable snapshot.", CreateSnapshot{}, Snapshot{}},
	{OpSandboxRestore, "POST", sb + "/restore", BodyJSON, BodyJSON, "Roll the sandbox's filesystem back to a snapshot of its tenant; every process of it ends.", RestoreSandbox{}, Sandbox{}},
	{OpSnapshotList, "GET", "/v1/snapshots", BodyNone, BodyJSON, "List the caller's snapshots.", ListSnapshots{}, SnapshotList{}},
	{OpSnapshotGet, "GET", "/v1/snapshots/{snapshot}", BodyNone, BodyJSON, "Describe one snapshot.", SnapshotRef{}, Snapshot{}},
	{OpSnapshotDelete, "DELETE", "/v1/snapshots/{snapshot}", BodyNone, BodyJSON, "Delete a snapshot no other snapshot or live sandbox uses.", SnapshotRef{}, Snapshot{}},
	{OpSnapshotFork, "POST", "/v1/snapshots/{snapshot}/fork", BodyJSON, BodyJSON, "Create count sandboxes (1-64) from a snapshot.", ForkSnapshot{}, SandboxList{}},
	{OpAuditQuery, "GET", "/v1/audit", BodyNone, BodyJSON, "Query the caller's audit events.", AuditQuery{}, AuditPage{}},
	{OpApprovalList, "GET", "/v1/approvals", BodyNone, BodyJSON, "List the caller's approvals; with follow=true an NDJSON stream of approval events.", ListApprovals{}, ApprovalList{}},
	{OpApprovalGet, "GET", "/v1/approvals/{id}", BodyNone, BodyJSON, "Describe one approval.", ApprovalRef{}, Approval{}},
	{OpApprovalAnswer, "POST", "/v1/approvals/{id}", BodyJSON, BodyJSON, "Allow (once or always) or deny a pending approval (approver tokens only).", AnswerApproval{}, Approval{}},
	{OpWorkflowCreate, "POST", "/v1/workflows", BodyJSON, BodyJSON, "Validate a workflow document and start a run of it; answers the run.", CreateWorkflow{}, WorkflowRun{}},
	{OpWorkflowList, "GET", "/v1/workflows", BodyNone, BodyJSON, "List the caller's workflow runs, newest first.", ListWorkflows{}, WorkflowList{}},
	{OpWorkflowGet, "GET", "/v1/workflows/{run}", BodyNone, BodyJSON, "Describe one run: its steps, attempts, snapshots and artifacts.", WorkflowRef{}, WorkflowRun{}},
	{OpWorkflowEvents, "GET", "/v1/workflows/{run}/events", BodyNone, BodyStream, "Stream a run's events from a sequence number; follow=true waits for the run's end.", WorkflowEvents{}, WorkflowRun{}},
	{OpWorkflowCancel, "POST", "/v1/workflows/{run}/cancel", BodyJSON, BodyJSON, "Cancel a run: running steps are killed, waiting ones never start.", WorkflowRef{}, WorkflowRun{}},
	{OpWorkflowResume, "POST", "/v1/workflows/{run}/resume", BodyJSON, BodyJSON, "Run a failed or cancelled run again from a step, keeping the steps before it.", ResumeWorkflow{}, WorkflowRun{}},
	{OpWorkflowAdd, "POST", "/v1/workflows/{run}/steps", BodyJSON, BodyJSON, "Add a step to a running concurrent group of a run.", AddWorkflowStep{}, WorkflowRun{}},
	{OpBuildCreate, "POST", "/v1/builds", BodyRaw, BodyJSON, "Check a source package (a tar body), build it in a sandbox and collect its artifacts; answers at the end unless detach=true.", CreateBuild{}, Build{}},
	{OpBuildList, "GET", "/v1/builds", BodyNone, BodyJSON, "List the caller's builds, newest first.", ListBuilds{}, BuildList{}},
	{OpBuildGet, "GET", "/v1/builds/{id}", BodyNone, BodyJSON, "Describe one build; wait=true answers at its end.", BuildRef{}, Build{}},
	{OpBuildLog, "GET", "/v1/builds/{id}/log", BodyNone, BodyStream, "Stream a build's log from a byte offset; follow=true waits for the build's end.", BuildLogRequest{}, Build{}},
	{OpBuildArtifact, "GET", "/v1/builds/{id}/artifacts/{digest}", BodyNone, BodyRaw, "Download one artifact of a build by its sha256.", BuildArtifactRef{}, FileContent{}},
	{OpBuildDelete, "DELETE", "/v1/builds/{id}", BodyNone, BodyJSON, "Remove a build, its log and artifacts; a running build is stopped first.", BuildRef{}, Build{}},
	{OpAgentCreate, "POST", "/v1/agents/runs", BodyJSON, BodyJSON, "Start a run of an agent of an agents document on a task; answers the run.", CreateAgentRun{}, AgentRun{}},
	{OpAgentList, "GET", "/v1/agents/runs", BodyNone, BodyJSON, "List the caller's agent runs, newest first.", ListAgentRuns{}, AgentRunList{}},
	{OpAgentGet, "GET", "/v1/agents/runs/{run}", BodyNone, BodyJSON, "Describe one agent run: its agents, usage and answer.", AgentRunRef{}, AgentRun{}},
	{OpAgentEvents, "GET", "/v1/agents/runs/{run}/events", BodyNone, BodyStream, "Stream a run's events (model turns, tool calls with their decisions and results); follow=true waits for its end.", AgentEvents{}, AgentRun{}},
	{OpAgentCancel, "POST", "/v1/agents/runs/{run}/cancel", BodyJSON, BodyJSON, "Cancel a run: its model and tool calls are stopped.", AgentRunRef{}, AgentRun{}},
	{OpAgentResume, "POST", "/v1/agents/runs/{run}/resume", BodyJSON, BodyJSON, "Take up an ended run, its conversations kept, optionally with a new task.", ResumeAgentRun{}, AgentRun{}},
}

// Lookup returns the operation named name.
func Lookup(name string) (Op, bool) {
	for _, o := range Ops {
		if o.Name == name {
			return o, true
		}
	}
	return Op{}, false
}
