package workflow

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// The document as written, before defaults, ids and references are
// resolved. A nil pointer is a field not given; lines says where each
// given field's value is.

// document is a whole workflow document.
type document struct {
	name     string
	defaults *fields
	// agents is the agents section (agent.go); nil when not given.
	agents *docAgents
	items  []*item
}

// item is one entry of a steps list: a step or a group.
type item struct {
	step  *docStep
	group *docGroup
}

// id returns the item's id ("" when it has none).
func (it *item) id() string {
	if it.step != nil {
		return it.step.id
	}
	return it.group.id
}

// line returns the line of the item's id.
func (it *item) line() int {
	if it.step != nil {
		return it.step.line
	}
	return it.group.line
}

// ref is an id named by a field, with where it is written.
type ref struct {
	id        string
	line, col int
}

// input is one entry of a step's inputs.
type input struct {
	ref
	path string
}

// docStep is a step as written.
type docStep struct {
	id        string
	line, col int
	needs     []ref
	from      *ref
	inputs    []input
	outputs   []string
	stdinFrom *ref
	// build is the step's build (build.go); nil for a run step.
	build *docBuild
	// agent is the step's agent (agent.go); nil for other kinds.
	agent *docAgentStep
	f     fields
}

// docGroup is a group as written.
type docGroup struct {
	id          string
	line        int
	mode        string
	needs       []ref
	maxParallel *int
	budget      *sandbox.Limits
	items       []*item
	lines       map[string]int // "mode", "max_parallel", "budget", "budget.cpus"...
}

// fields are the step fields defaults may give too.
type fields struct {
	run      []string
	sh       *string
	template *string
	limits   docLimits
	timeout  *time.Duration
	env      map[string]string
	policy   *api.CallRules
	network  *api.Network
	retry    docRetry
	snapshot *string
	priority *string
	// lines maps a given field ("run", "limits.memory", "env") to the
	// line of its value.
	lines map[string]int
}

// docLimits are limits as written.
type docLimits struct {
	memory, disk, pids *int64
	cpus               *float64
}

// docRetry is a retry as written.
type docRetry struct {
	attempts *int
	backoff  *time.Duration
	from     *string
}

// mark records the line of a given field.
func (f *fields) mark(field string, n *yaml.Node) {
	if f.lines == nil {
		f.lines = make(map[string]int)
	}
	f.lines[field] = n.Line
}
