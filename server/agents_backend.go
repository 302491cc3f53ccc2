package server

import (
	"context"
	"encoding/json"
	"io"
	"reflect"

	"github.com/moat-sandbox/moat/agent"
	"github.com/moat-sandbox/moat/api"
)

// The agent runner's Backend over the Service.
//
// Call is an API call of the run's owner (its tenant and actor, never an
// approver) through the dispatcher: the sandbox.create of an agent's
// sandbox (quotas, template, policy admission, network), each tool's
// process.exec, file.write… are admitted, judged by the sandbox's policy
// (an ask rule holds the call until an approver answers, the agent's
// model waiting meanwhile), counted, recorded and audited as the same
// calls made through the API. Only the operations a tool makes are open
// to it (agentOps): a run cannot answer approvals, read the audit or
// start runs. A sandbox of a workflow's agent step is made and deleted
// through agentSandboxCall. Fetch goes through the egress proxy of the agent's sandbox
// (agents_fetch.go).

// agBackend implements agent.Backend.
type agBackend struct{ s *Service }

var _ agent.Backend = agBackend{}

// agentOps are the operations an agent's tools make.
var agentOps = map[string]bool{
	api.OpSandboxCreate: true, api.OpSandboxGet: true, api.OpSandboxDelete: true,
	api.OpExec: true, api.OpStart: true, api.OpProcessGet: true, api.OpOutput: true,
	api.OpStdin: true, api.OpSignal: true, api.OpWait: true,
	api.OpFileRead: true, api.OpFileWrite: true, api.OpFileList: true, api.OpFileStat: true, api.OpFileMkdir: true,
}

// Call makes operation op as o with req (a value, or a pointer to one, of
// the operation's request type); body and out are a raw operation's
// request body and answer. A process.exec answers a *sandbox.Result with
// its output in it.
func (b agBackend) Call(ctx context.Context, o agent.Owner, op string, req any, body io.Reader, out io.Writer) (any, error) {
	if !agentOps[op] {
		return nil, api.Errorf(api.CodePermissionDenied, "an agent's tools do not make %s calls", op)
	}
	if rv := reflect.ValueOf(req); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		req = rv.Elem().Interface()
	}
	c := agentCaller(o)
	// The sandbox of a workflow's agent step gets the step's inputs, and
	// is kept for its outputs (workflows_agent.go).
	if resp, handled, err := b.s.agentSandboxCall(ctx, c, op, req); handled {
		return resp, err
	}
	in := internalInput(req)
	in.body, in.out = body, out
	if o, ok := api.Lookup(op); ok && o.Out == api.BodyStream && out != nil {
		// A stream's events go to out as NDJSON, as an HTTP answer
		// carries them (agent.Backend's contract).
		enc := json.NewEncoder(out)
		in.emit = func(ev api.Event) error { return enc.Encode(ev) }
	}
	resp, err := b.s.call(ctx, c, op, in)
	if err != nil {
		releaseAnswer(resp)
		return nil, err
	}
	if op == api.OpExec {
		// The capture's text, out of the buffers the answer holds.
		defer releaseAnswer(resp)
		return answerResult(resp)
	}
	return resp, nil
}

// Fetch gets url for the agent of sandbox id through that sandbox's
// egress proxy, as o.
func (b agBackend) Fetch(ctx context.Context, o agent.Owner, sandboxID, url string, max int64) (*agent.FetchResult, error) {
	return b.s.fetch(ctx, agentCaller(o), sandboxID, url, max)
}
