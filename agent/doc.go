// Package agent is moat's agent runner: the agents document (Compile),
// the engine that runs agents on it (Engine), and the tool dispatcher
// that runs their tool calls in sandboxes.
//
// Context flows through the model; danger is sandboxed in a process. An
// agent's conversation (its persistent context) goes to the shared model
// client (Model: agent/model's Client); every tool call that touches a
// system runs inside the agent's sandbox through the daemon's own API
// (Backend), as the run's owner, so it is judged by the sandbox's policy
// (an ask rule holds it until an approver answers), counted, recorded and
// audited as that API call. The agent's sandbox config (template,
// limits, network, policy) is the ceiling of every call; a model's
// arguments can only narrow it (a shorter timeout, a working directory)
// and paths are resolved inside the sandbox by its guest.
//
// The operations the engine makes through Backend.Call, with the request
// type it gives and the answer type it expects (a pointer to it, or the
// value):
//
//	sandbox.create  api.CreateSandbox               *api.Sandbox
//	sandbox.get     api.SandboxRef                  *api.Sandbox
//	sandbox.delete  api.SandboxRef                  *api.Sandbox (answer unused)
//	process.exec    api.Exec                        *sandbox.Result
//	process.start   api.Exec                        *api.Process
//	process.output  api.ReadOutput (no follow)      *api.Process; out gets the NDJSON api.Event lines
//	process.stdin   api.Stdin                       *api.OK (unused)
//	process.signal  api.Signal                      *api.OK (unused)
//	file.write      api.WriteFile (no Content)      *api.Written; body is the content
//	file.read       api.FilePath (MaxBytes set)     out gets the content (answer unused)
//	file.stat       api.FilePath                    *sandbox.FileInfo
//	file.list       api.FilePath                    *api.DirList
//
// and fetch_url goes through Backend.Fetch with the agent's sandbox.
//
// Durability: a run's Record (its API view, the document, every agent's
// conversation and Progress) is journalled at every transition together
// with the events of that transition, in one Journal.SaveRun: the run's
// start; each model call's start (model.request) and its answer
// (model.response: the assistant message added); each tool call's start
// (tool.call, with the sandbox it runs in) and its result (tool.result:
// the tool message added); a handoff (the other agent's task added) and
// its result (the other agent's answer and the caller's tool message);
// the run's end (the first agent's answer with run.succeeded, or
// run.failed, run.cancelled). Recover takes unfinished runs up after a
// restart.
//
// It imports api, sandbox and agent/model of moat; the server implements
// Backend and Journal.
package agent
