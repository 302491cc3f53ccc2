package workflow

import (
	"bytes"
	"cmp"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/moat-sandbox/moat/agent"
	"github.com/moat-sandbox/moat/internal/yamlnode"
)

// An agent step (`agent:`) gives a task to one agent of the document's
// top-level `agents:` section and runs it to its answer as an agent run
// of the daemon (agent.create): the agent's model calls go through the
// daemon's model client, its tool calls into its own sandbox under its
// policy. The section is the agents list of an agents file (package
// agent: name, model, tags, system, tools, handoff, policy, sandbox),
// without providers: the daemon's own serve it.
//
//	agents:
//	  - name: reviewer
//	    model: small
//	    tools: [shell_exec, read_file, write_file]
//	steps:
//	  - id: fetch
//	    sh: git clone … /out/src
//	    outputs: [/out/src]
//	  - id: review
//	    agent:
//	      agent: reviewer
//	      task: Read the code under /in/out/src and write /work/review.md.
//	      max_turns: 30  # default: the agents document's (20)
//	    inputs: {fetch: /in}
//	    outputs: [/work/review.md]
//	    timeout: 30m
//
// The step's inputs are bound read-only into the agent's sandbox (and
// those of its per_call sandboxes), its outputs collected from the
// agent's long-lived sandbox once it answered, which the daemon keeps
// until then. An agent step takes needs, inputs, outputs, timeout,
// retry and priority; from the document's defaults only retry and
// priority. It keeps no snapshot and has no stdout: no step starts from
// it or reads its stdin from it; its outputs are inputs as any step's.
// The run's answer is the attempt's stdout in its result; a run that
// fails (max_turns, a model error) or is cancelled fails the attempt.

// KindAgent is the Kind of an agent step.
const KindAgent = "agent"

// Bounds of agent steps.
const (
	// MaxAgentTurns is the most model calls a step may allow its run
	// (the agents document's own bound).
	MaxAgentTurns = agent.MaxMaxTurns
	// maxTaskBytes bounds a step's task.
	maxTaskBytes = 64 << 10
	// maxAgentsNodes bounds the nodes of the agents section.
	maxAgentsNodes = 100000
)

// Agent is what an agent step runs.
type Agent struct {
	// Name is the agent of the document's agents the task is given to.
	Name string
	// Task is the run's first user message.
	Task string
	// MaxTurns, when not 0, is the document's max_turns for this run.
	MaxTurns int
	// Document is the agents document of the run: the workflow
	// document's agents section (and the step's max_turns), as
	// agent.create takes it.
	Document string
}

// validAgentName is the form of an agent's name the steps refer to (the
// agents document checks its own rules on top).
var validAgentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// docAgents is the document's agents section.
type docAgents struct {
	// line is the line of the agents key.
	line int
	// doc is the section as an agents document (without max_turns);
	// "" when the section is not valid.
	doc string
	// names are the agents' names, with whether each runs its tools in
	// a fresh sandbox per call (sandbox.per_call).
	names map[string]agentInfo
}

// agentInfo is what a step needs to know of one agent.
type agentInfo struct {
	perCall bool
}

// docAgentStep is a step's agent as written.
type docAgentStep struct {
	line, col int
	agent     *ref
	task      *string
	maxTurns  *int
	bad       bool
}

// agents reads the top-level agents section (key k, value n): a
// non-empty list of mappings, each with a name given once. The agents'
// other fields are the agents document's, which checks them; here only
// aliases and merge keys are refused anywhere in it, as in the rest of
// the document.
func (r *reader) agents(k, n *yaml.Node) *docAgents {
	const field = "agents"
	a := &docAgents{line: k.Line, names: make(map[string]agentInfo)}
	items, ok := r.Sequence(n, field, "a list of agents (mappings with a name)")
	if !ok {
		return a
	}
	if len(items) == 0 {
		r.Fail(n, field, "empty: give at least one agent")
		return a
	}
	before := len(r.errs.errs)
	if !r.plainTree(n, field) {
		return a
	}
	for i, it := range items {
		name := field + "[" + strconv.Itoa(i) + "]"
		var got string
		var perCall bool
		r.Mapping(it, name, func(key string, kn, v *yaml.Node) {
			switch key {
			case "name":
				if s, ok := r.Str(v, yamlnode.Join(name, key)); ok {
					if !validAgentName.MatchString(s) {
						r.Fail(v, yamlnode.Join(name, key), "%q is not a valid agent name (letters, digits, _, . and -, starting with a letter or digit, at most 63)", s)
						return
					}
					got = s
				}
			case "sandbox":
				perCall = perCallOf(v)
			}
		})
		if it.Kind != yaml.MappingNode {
			continue
		}
		if got == "" {
			if !r.hasKey(it, "name") {
				r.Fail(it, yamlnode.Join(name, "name"), "missing: an agent needs a name")
			}
			continue
		}
		if _, dup := a.names[got]; dup {
			r.Fail(it, yamlnode.Join(name, "name"), "%q is the name of an agent before", got)
			continue
		}
		a.names[got] = agentInfo{perCall: perCall}
	}
	if len(r.errs.errs) > before {
		return a
	}
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: "agents"}, n,
	}})
	if err != nil {
		r.Fail(n, field, "cannot be written as an agents document: %v", err)
		return a
	}
	a.doc = string(out)
	return a
}

// checkAgents checks the agents document a made of the agents section
// (key k) of data (root its root) as agent.Compile checks an agents
// file, and records its errors at their lines of data. The document's
// errors are at lines of its own; when the section stands on lines of
// its own (a block mapping at the root, as YAML is usually written),
// the section is checked again in place, every other line blanked out,
// so that they are at the lines of data; otherwise (JSON, a flow
// mapping) at the agents key's.
func (r *reader) checkAgents(a *docAgents, data []byte, root, k *yaml.Node) {
	if a.doc == "" {
		return
	}
	_, err := agent.Compile([]byte(a.doc))
	if err == nil {
		return
	}
	before := len(r.errs.errs)
	if in := sectionInPlace(data, root, k); in != nil {
		if _, err2 := agent.Compile(in); err2 != nil && r.addAgentErrors(err2, 0) {
			a.doc = ""
			return
		}
		r.errs.errs = r.errs.errs[:before]
	}
	r.addAgentErrors(err, k.Line)
	a.doc = ""
}

// addAgentErrors records the errors of agent.Compile, each at its own
// line or, when line is not 0, at line; it reports whether it recorded
// any.
func (r *reader) addAgentErrors(err error, line int) bool {
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	n := 0
	for _, e := range list {
		ae := (*agent.Error)(nil)
		if !errors.As(e, &ae) {
			r.errs.add(line, 0, "agents", "%v", e)
			n++
			continue
		}
		l, c := ae.Line, ae.Column
		if line != 0 {
			l, c = line, 0
		}
		r.errs.add(l, c, cmp.Or(ae.Field, "agents"), "%s", ae.Msg)
		n++
	}
	return n > 0
}

// sectionInPlace is data with every line outside the section of key k
// (its key's line to the line before the next key of the root mapping,
// or the end) blank, or nil when root is not a block mapping.
func sectionInPlace(data []byte, root, k *yaml.Node) []byte {
	if root.Kind != yaml.MappingNode || root.Style&yaml.FlowStyle != 0 {
		return nil
	}
	end := 0 // the first line after the section; 0: the end
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i] == k && i+2 < len(root.Content) {
			end = root.Content[i+2].Line
		}
	}
	if end != 0 && end <= k.Line {
		return nil
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	var out bytes.Buffer
	out.Grow(len(data))
	for i, l := range lines {
		n := i + 1
		if n >= k.Line && (end == 0 || n < end) {
			out.Write(l)
		} else if bytes.HasSuffix(l, []byte("\n")) {
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

// hasKey reports whether mapping n has key.
func (r *reader) hasKey(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// perCallOf reads sandbox.per_call of an agent (false when it is not a
// plain true: the agents document checks it).
func perCallOf(sb *yaml.Node) bool {
	if sb.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(sb.Content); i += 2 {
		if sb.Content[i].Value == "per_call" {
			v := sb.Content[i+1]
			return v.Kind == yaml.ScalarNode && v.ShortTag() == "!!bool" && v.Value == "true"
		}
	}
	return false
}

// plainTree reports whether the tree under n has no alias and no merge
// key and at most maxAgentsNodes nodes, recording the first problem.
func (r *reader) plainTree(n *yaml.Node, field string) bool {
	count := 0
	var walk func(n *yaml.Node) bool
	walk = func(n *yaml.Node) bool {
		if count++; count > maxAgentsNodes {
			r.Fail(n, field, "more than %d values", maxAgentsNodes)
			return false
		}
		if !r.Plain(n, field) {
			return false
		}
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!merge" {
			r.Fail(n, field, "merge keys (<<) are not supported")
			return false
		}
		for _, c := range n.Content {
			if !walk(c) {
				return false
			}
		}
		return true
	}
	return walk(n)
}

// agentStep reads a step's agent, the value n of key k.
func (r *reader) agentStep(k, n *yaml.Node, field string) *docAgentStep {
	a := &docAgentStep{line: k.Line, col: k.Column}
	before := len(r.errs.errs)
	defer func() { a.bad = len(r.errs.errs) > before }()
	ok := r.Mapping(n, field, func(key string, kn, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "agent":
			a.agent = r.ref(v, name)
		case "task":
			s, ok := r.Str(v, name)
			switch {
			case !ok:
			case strings.TrimSpace(s) == "":
				r.Fail(v, name, "empty: say what the agent is to do")
			case len(s) > maxTaskBytes || !utf8.ValidString(s):
				r.Fail(v, name, "must be valid UTF-8 of at most %d bytes", maxTaskBytes)
			default:
				a.task = &s
			}
		case "max_turns":
			if x, ok := r.count(v, name); ok {
				if x < 1 || x > MaxAgentTurns {
					r.Fail(v, name, "must be between 1 and %d", MaxAgentTurns)
				} else {
					a.maxTurns = &x
				}
			}
		default:
			r.Fail(kn, name, "unknown field")
		}
	})
	if !ok {
		return a
	}
	if a.agent == nil && !r.hasKey(n, "agent") {
		r.Fail(k, yamlnode.Join(field, "agent"), "missing: name the agent (of the document's agents) the task is for")
	}
	if a.task == nil && !r.hasKey(n, "task") {
		r.Fail(k, yamlnode.Join(field, "task"), "missing: give the agent its task")
	}
	return a
}

// agentOnly records the step-level fields an agent step s does not take
// (keys are its keys), and drops its links but inputs and outputs: its
// sandbox is its agent's, it keeps no snapshot and has no stdin.
func (r *reader) agentOnly(s *docStep, keys []*yaml.Node) {
	s.from, s.stdinFrom = nil, nil
	for _, k := range keys {
		var msg string
		switch k.Value {
		case "run", "sh":
			msg = "an agent step runs its agent on agent.task"
		case "template", "limits", "network", "policy", "env":
			msg = "an agent step runs in its agent's sandbox: give it in the agent's sandbox or policy (the document's agents)"
		case "snapshot":
			msg = "an agent step keeps no snapshot"
		case "from":
			msg = "an agent step starts its agent's own sandbox, not a snapshot (take outputs as inputs)"
		case "stdin_from":
			msg = "an agent step has no standard input"
		case "build":
			msg = "a step is a build or an agent, not both"
		default:
			continue
		}
		r.Fail(k, k.Value, "%s", msg)
	}
}

// resolveAgent fills st, an agent step written as s: its agent's name,
// task and max_turns, the step's own timeout, inputs and outputs, and
// no snapshot. The agent is looked up, and the run's document made, by
// agentRef once the plan is known.
func resolveAgent(st *Step, s *docStep) {
	a := s.agent
	st.Kind = KindAgent
	st.Snapshot = SnapshotNone
	st.Timeout = or(s.f.timeout, nil, 0)
	st.Outputs = slices.Clone(s.outputs)
	if len(s.inputs) > 0 {
		st.Inputs = make(map[string]string, len(s.inputs))
		for _, in := range s.inputs {
			st.Inputs[in.id] = in.path
		}
	}
	st.Agent = &Agent{Task: or(a.task, nil, ""), MaxTurns: or(a.maxTurns, nil, 0)}
	if a.agent != nil {
		st.Agent.Name = a.agent.id
	}
}

// agentRef checks the agent of s, an agent step (src is where it is
// written), against the plan's agents section, and gives s the run's
// agents document.
func (b *builder) agentRef(s *PlanStep, src *docStep) {
	x := src.agent.agent
	if x == nil {
		return
	}
	fail := func(format string, args ...any) {
		b.errs.add(x.line, x.col, "agent.agent", format, args...)
	}
	agents := b.p.agents
	if agents == nil {
		fail("the document has no agents section: an agent step gives its task to one of its agents")
		return
	}
	info, ok := agents.names[x.id]
	if !ok {
		if len(agents.names) > 0 || agents.doc != "" {
			fail("no agent %q in the document's agents", x.id)
		}
		return
	}
	if info.perCall && len(s.Outputs) > 0 {
		fail("agent %q runs each tool call in a fresh sandbox (sandbox.per_call): it has no sandbox to collect outputs from", x.id)
	}
	if agents.doc == "" {
		return
	}
	s.Agent.Document = agents.doc
	if s.Agent.MaxTurns > 0 {
		s.Agent.Document += "max_turns: " + strconv.Itoa(s.Agent.MaxTurns) + "\n"
	}
}
