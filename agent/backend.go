package agent

import (
	"context"
	"io"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
)

// Owner is who a run belongs to: every call it makes is theirs.
type Owner struct {
	Tenant string `json:"tenant"`
	Actor  string `json:"actor"`
}

// Model is the shared model client (model.Client implements it).
type Model interface {
	Complete(ctx context.Context, req model.Request) (*model.Response, error)
}

// Backend runs a run's tool calls: the daemon implements it with its own
// API operations, called as the run's owner, so every call is judged by
// the sandbox's policy (an ask holds until an approver answers),
// counted, recorded and audited as an API call would be.
type Backend interface {
	// Call makes API operation op (an api.Op* name) as o with req (a
	// value of the operation's request type); body is the raw request
	// body of a BodyRaw operation (nil otherwise), out receives a raw
	// answer. The answer is the operation's answer type (a pointer).
	// A policy refusal is an *api.Error of code policy_denied. For a
	// BodyStream operation (process.output) out receives the stream's
	// events as an HTTP answer carries them: NDJSON lines of api.Event.
	// The operations the agent makes, their request and answer types,
	// are listed in the package's doc.
	Call(ctx context.Context, o Owner, op string, req any, body io.Reader, out io.Writer) (any, error)
	// Fetch gets url for sandbox id's agent through the egress policy of
	// that sandbox (its allowlist, the proxy's DNS and address checks),
	// at most max bytes of body; a refusal is an error saying why.
	Fetch(ctx context.Context, o Owner, sandboxID, url string, max int64) (*FetchResult, error)
}

// FetchResult is what fetch_url got.
type FetchResult struct {
	Status      int
	ContentType string
	Body        []byte
	Truncated   bool
}

// Record is a run's whole state, journalled at every transition: the API's
// view, the document, and each agent's persistent conversation.
type Record struct {
	Run      api.AgentRun `json:"run"`
	Owner    Owner        `json:"owner"`
	Document string       `json:"document"`
	// Conversations are the agents' message logs, by agent name.
	Conversations map[string][]model.Message `json:"conversations"`
	// Seq is the last event's number.
	Seq uint64 `json:"seq"`
	// Progress is the engine's own state of each agent, by name: what
	// taking the run up again needs besides the conversations (added by
	// package agent's engine; a journal stores it with the rest).
	Progress map[string]*Progress `json:"progress,omitempty"`
}

// Journal keeps runs durable.
type Journal interface {
	// SaveRun writes the run's record (insert or replace) and appends evs
	// (their Seq set) as one durable write.
	SaveRun(ctx context.Context, r *Record, evs []api.AgentEvent) error
	// LoadRun returns tenant's run id (an error wrapping ErrNotFound if
	// none).
	LoadRun(ctx context.Context, tenant, id string) (*Record, error)
	// Events returns a run's events after seq, up to limit.
	Events(ctx context.Context, run string, after uint64, limit int) ([]api.AgentEvent, error)
	// Unfinished lists the runs not ended (a restart takes them up).
	Unfinished(ctx context.Context) ([]*Record, error)
}
