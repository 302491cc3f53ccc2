package agent

import (
	"slices"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// Defaults and bounds of an agents document.
const (
	// DefaultMaxTurns is the model calls an agent may make for one task
	// when the document does not say.
	DefaultMaxTurns = 20
	// MaxMaxTurns is the most max_turns may give.
	MaxMaxTurns = 200
	// DefaultTemplate is the template of an agent's sandbox.
	DefaultTemplate = "host"
	// DefaultToolTimeout is the longest one tool call may run when the
	// agent's sandbox.timeout does not say; MaxToolTimeout the most that
	// key may give.
	DefaultToolTimeout = 2 * time.Minute
	MaxToolTimeout     = time.Hour
	// MaxAgents is the most agents a document may define.
	MaxAgents = 64
	// MaxHandoffDepth is how many handoffs deep a chain may go (the run's
	// agent hands to a second, which hands to a third...): a handoff past
	// it is refused, as a tool error, at run time.
	MaxHandoffDepth = 4
	// maxSystem bounds an agent's system prompt.
	maxSystem = 256 << 10
)

// Network modes of an agent's sandbox.
const (
	NetworkNone  = "none"
	NetworkProxy = "proxy"
)

// Document is a compiled agents document.
type Document struct {
	// Providers is the document's providers section (empty when it has
	// none): parsed and checked (model.Config.Validate) here; whether a
	// daemon takes it is the daemon's decision.
	Providers model.Config
	// ProvidersLine is the line of the providers key (0 when absent).
	ProvidersLine int
	// MaxTurns is the document's max_turns (DefaultMaxTurns when absent):
	// the default of its agents.
	MaxTurns int
	// Agents are the document's agents, in order.
	Agents []*Agent
}

// Agent returns the agent named name, or nil.
func (d *Document) Agent(name string) *Agent {
	i := slices.IndexFunc(d.Agents, func(a *Agent) bool { return a.Name == name })
	if i < 0 {
		return nil
	}
	return d.Agents[i]
}

// Agent is one agent of a document, its defaults applied.
type Agent struct {
	Name string
	// Model is the model alias its requests name; Tags the tags every
	// provider serving it must carry.
	Model  string
	Tags   []string
	System string
	// Tools are the tools offered to the model, in the document's order
	// (ToolHandoff added last when Handoff names agents and the list
	// lacks it).
	Tools []string
	// Handoff names the agents it may hand a task to.
	Handoff []string
	// MaxTurns bounds its model calls for one task.
	MaxTurns int
	// Policy are its sandbox's own rules (they can only narrow the
	// daemon's policy); nil for none.
	Policy  *api.CallRules
	Sandbox SandboxConfig
	// Line is the document line of its entry.
	Line int
}

// SandboxConfig is the sandbox an agent's tools run in: the ceiling of
// every tool call's ACL.
type SandboxConfig struct {
	// Template is the sandbox's template (DefaultTemplate when absent).
	Template string
	Limits   sandbox.Limits
	// Network is its network: mode none (the default) or proxy with an
	// allowlist.
	Network api.Network
	// PerCall makes a fresh sandbox for each tool call, deleted after
	// it, instead of one long-lived sandbox per agent.
	PerCall bool
	// Timeout is the longest one tool call may run; a model's timeout
	// argument may only shorten it.
	Timeout time.Duration
}

// offers reports whether the agent offers tool name.
func (a *Agent) offers(name string) bool { return slices.Contains(a.Tools, name) }

// Compile parses an agents document (YAML; JSON is YAML too) and checks
// it. On error it returns every problem it found, each a *Error with its
// line, joined in line order (errors.Join); every error matches
// ErrInvalid.
func Compile(doc []byte) (*Document, error) {
	errs := &errList{}
	root := parseYAML(doc, errs)
	if root == nil {
		return nil, errs.err()
	}
	r := newReader(errs)
	d := r.document(root)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return d, nil
}
