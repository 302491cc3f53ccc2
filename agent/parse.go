package agent

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/yamlnode"
)

// validName is the form of an agent's name (it is a sandbox label's value
// and a key of the run's record).
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// validTag is the form of a tag (as model.Provider's tags).
var validTag = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// document reads the root node of a document.
func (r *reader) document(root *yaml.Node) *Document {
	d := &Document{MaxTurns: DefaultMaxTurns}
	var agents *yaml.Node
	maxTurnsSet := false
	r.Mapping(root, "", func(key string, k, v *yaml.Node) {
		switch key {
		case "providers":
			d.ProvidersLine = k.Line
			d.Providers = r.providers(v, key)
		case "max_turns":
			if n, ok := r.IntegerIn(v, key, 1, MaxMaxTurns); ok {
				d.MaxTurns, maxTurnsSet = int(n), true
			}
		case "agents":
			agents = v
		default:
			r.Fail(k, key, "unknown field (providers, max_turns, agents)")
		}
	})
	if root.Kind != yaml.MappingNode {
		return d
	}
	if agents != nil {
		d.Agents = r.agents(agents, d.MaxTurns)
		r.check(d)
	} else if d.ProvidersLine == 0 {
		r.Fail(root, "agents", "missing: a document needs agents (or, for a daemon's models file, providers)")
	} else if maxTurnsSet {
		r.Fail(root, "max_turns", "given without agents")
	}
	return d
}

// providers reads the providers section into a model.Config, each
// provider checked by model.Config.Validate at its line.
func (r *reader) providers(n *yaml.Node, field string) model.Config {
	var cfg model.Config
	items, ok := r.Sequence(n, field, "a list of providers")
	if !ok {
		return cfg
	}
	if len(items) == 0 {
		r.Fail(n, field, "empty: give at least one provider")
		return cfg
	}
	names := map[string]int{}
	for i, it := range items {
		name := fmt.Sprintf("%s[%d]", field, i)
		p, ok := r.provider(it, name)
		if !ok {
			continue
		}
		if err := (model.Config{Providers: []model.Provider{p}}).Validate(); err != nil {
			r.Fail(it, name, "%s", strings.TrimPrefix(err.Error(), model.ErrInvalidConfig.Error()+": "))
			continue
		}
		if at, dup := names[p.Name]; dup {
			r.Fail(it, name, "provider %q is already defined at line %d", p.Name, at)
			continue
		}
		names[p.Name] = it.Line
		cfg.Providers = append(cfg.Providers, p)
	}
	return cfg
}

// provider reads one provider's keys.
func (r *reader) provider(n *yaml.Node, field string) (model.Provider, bool) {
	var p model.Provider
	bad := len(r.errs.errs)
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "name":
			p.Name, _ = r.Str(v, name)
		case "kind":
			p.Kind, _ = r.Str(v, name)
		case "base_url":
			p.BaseURL, _ = r.Str(v, name)
		case "model":
			p.Model, _ = r.Str(v, name)
		case "aliases":
			p.Aliases, _ = r.Strs(v, name)
		case "tags":
			p.Tags, _ = r.Strs(v, name)
		case "api_key_file":
			p.APIKeyFile, _ = r.Str(v, name)
		case "max_concurrency":
			if x, ok := r.IntegerIn(v, name, 1, model.MaxMaxConcurrency); ok {
				p.MaxConcurrency = int(x)
			}
		case "weight":
			if x, ok := r.IntegerIn(v, name, 1, model.MaxWeight); ok {
				p.Weight = int(x)
			}
		default:
			r.Fail(k, name, "unknown field")
		}
	})
	return p, len(r.errs.errs) == bad && n.Kind == yaml.MappingNode
}

// agents reads the agents list.
func (r *reader) agents(n *yaml.Node, maxTurns int) []*Agent {
	items, ok := r.Sequence(n, "agents", "a list of agents")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		r.Fail(n, "agents", "empty: give at least one agent")
		return nil
	}
	if len(items) > MaxAgents {
		r.Fail(n, "agents", "%d agents: at most %d", len(items), MaxAgents)
		return nil
	}
	var out []*Agent
	lines := map[string]int{}
	for i, it := range items {
		a := r.agent(it, i, maxTurns)
		if a == nil {
			continue
		}
		if at, dup := lines[a.Name]; dup {
			r.Fail(it, "agents."+a.Name, "agent %q is already defined at line %d", a.Name, at)
			continue
		}
		lines[a.Name] = a.Line
		out = append(out, a)
	}
	return out
}

// nameOf returns the name key's value of the mapping n, if it is a string.
func nameOf(n *yaml.Node) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Value == "name" && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
			return v.Value
		}
	}
	return ""
}

// agent reads one agent (the i-th); nil when it has no valid name.
func (r *reader) agent(n *yaml.Node, i, maxTurns int) *Agent {
	field := fmt.Sprintf("agents[%d]", i)
	if s := nameOf(n); validName.MatchString(s) {
		field = "agents." + s
	}
	a := &Agent{Line: n.Line, MaxTurns: maxTurns}
	a.Sandbox.Template = DefaultTemplate
	a.Sandbox.Network.Mode = NetworkNone
	a.Sandbox.Timeout = DefaultToolTimeout
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "name":
			if s, ok := r.Str(v, name); ok {
				if !validName.MatchString(s) {
					r.Fail(v, name, "%q is not a valid name (lowercase letters, digits, _ and -, starting with a letter or digit, at most 63)", s)
					return
				}
				a.Name = s
			}
		case "model":
			if s, ok := r.Str(v, name); ok {
				if s == "" || len(s) > 256 || strings.ContainsFunc(s, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) {
					r.Fail(v, name, "want a model alias: 1 to 256 printable characters without spaces")
					return
				}
				a.Model = s
			}
		case "tags":
			tags, _ := r.Strs(v, name)
			for _, t := range tags {
				if !validTag.MatchString(t) {
					r.Fail(v, name, "tag %q: want 1 to 64 of [a-z0-9._-], starting with a letter or digit", t)
					return
				}
				if !slices.Contains(a.Tags, t) {
					a.Tags = append(a.Tags, t)
				}
			}
		case "system":
			if s, ok := r.Str(v, name); ok {
				if len(s) > maxSystem {
					r.Fail(v, name, "%d bytes: at most %d", len(s), maxSystem)
					return
				}
				a.System = s
			}
		case "tools":
			a.Tools = r.tools(v, name)
		case "handoff":
			if list, ok := r.Strs(v, name); ok {
				for _, h := range list {
					if !slices.Contains(a.Handoff, h) {
						a.Handoff = append(a.Handoff, h)
					}
				}
			}
		case "max_turns":
			if x, ok := r.IntegerIn(v, name, 1, MaxMaxTurns); ok {
				a.MaxTurns = int(x)
			}
		case "policy":
			a.Policy = r.policy(v, name)
		case "sandbox":
			r.sandbox(&a.Sandbox, v, name)
		default:
			r.Fail(k, name, "unknown field")
		}
	})
	if n.Kind != yaml.MappingNode {
		return nil
	}
	if a.Name == "" {
		if nameOf(n) == "" {
			r.Fail(n, field, "missing name")
		}
		return nil
	}
	if a.Model == "" {
		r.Fail(n, yamlnode.Join(field, "model"), "missing: name the model alias the agent's requests use")
	}
	r.agentTools(a, n, field)
	return a
}

// tools reads a tools list: known names, each once.
func (r *reader) tools(n *yaml.Node, field string) []string {
	items, ok := r.Sequence(n, field, "a list of tool names")
	if !ok {
		return nil
	}
	var out []string
	for _, it := range items {
		s, ok := r.Str(it, field)
		if !ok {
			continue
		}
		switch {
		case !slices.Contains(ToolNames, s):
			r.Fail(it, field, "unknown tool %q (%s)", s, strings.Join(ToolNames, ", "))
		case slices.Contains(out, s):
			r.Fail(it, field, "tool %q given twice", s)
		default:
			out = append(out, s)
		}
	}
	return out
}

// agentTools checks that an agent's tools fit its sandbox and handoff list.
func (r *reader) agentTools(a *Agent, n *yaml.Node, field string) {
	sb := a.Sandbox
	if a.offers(ToolHandoff) && len(a.Handoff) == 0 {
		r.Fail(n, yamlnode.Join(field, "tools"), "handoff is offered but the handoff list names no agent")
	}
	if len(a.Handoff) > 0 && !a.offers(ToolHandoff) {
		a.Tools = append(a.Tools, ToolHandoff)
	}
	if sb.PerCall {
		for _, t := range a.Tools {
			if strings.HasPrefix(t, "process_") {
				r.Fail(n, yamlnode.Join(field, "tools"), "%s needs a long-lived sandbox: not with sandbox.per_call", t)
			}
		}
	}
	if a.offers(ToolFetchURL) && sb.Network.Mode != NetworkProxy {
		r.Fail(n, yamlnode.Join(field, "tools"), "fetch_url needs sandbox.network.mode proxy (and its allow_domains)")
	}
}

// check checks what refers to what across agents: handoff names agents
// of the document, not the agent itself.
func (r *reader) check(d *Document) {
	for _, a := range d.Agents {
		for _, h := range a.Handoff {
			switch {
			case h == a.Name:
				r.errs.add(a.Line, 0, "agents."+a.Name+".handoff", "an agent cannot hand a task to itself")
			case d.Agent(h) == nil:
				r.errs.add(a.Line, 0, "agents."+a.Name+".handoff", "no agent %q in the document", h)
			}
		}
	}
}

// sandbox reads an agent's sandbox section.
func (r *reader) sandbox(sb *SandboxConfig, n *yaml.Node, field string) {
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "template":
			if s, ok := r.Str(v, name); ok {
				if s == "" || len(s) > 256 || strings.ContainsFunc(s, unicode.IsControl) {
					r.Fail(v, name, "want a template's name")
					return
				}
				sb.Template = s
			}
		case "limits":
			r.limits(sb, v, name)
		case "network":
			r.network(sb, v, name)
		case "per_call":
			sb.PerCall, _ = r.Bool(v, name)
		case "timeout":
			if d, ok := r.duration(v, name, 1e9, MaxToolTimeout); ok {
				sb.Timeout = d
			}
		default:
			r.Fail(k, name, "unknown field (template, limits, network, per_call, timeout)")
		}
	})
}

// limits reads limits: memory, cpus, pids, disk (as workflow steps give
// them).
func (r *reader) limits(sb *SandboxConfig, n *yaml.Node, field string) {
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "memory":
			sb.Limits.MemoryBytes, _ = r.Size(v, name)
		case "disk":
			sb.Limits.DiskBytes, _ = r.Size(v, name)
		case "pids":
			sb.Limits.Pids, _ = r.IntegerIn(v, name, 0, 1<<22)
		case "cpus":
			sb.Limits.CPUs, _ = r.Number(v, name)
		default:
			r.Fail(k, name, "unknown field (memory, cpus, pids, disk)")
		}
	})
}

// network reads network: mode none or proxy, allow_domains and
// deny_domains (mode proxy).
func (r *reader) network(sb *SandboxConfig, n *yaml.Node, field string) {
	var lists *yaml.Node
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "mode":
			if s, ok := r.Str(v, name); ok {
				if s != NetworkNone && s != NetworkProxy {
					r.Fail(v, name, "%q is not a mode (none, proxy)", s)
					return
				}
				sb.Network.Mode = s
			}
		case "allow_domains":
			lists = k
			sb.Network.AllowDomains = r.domains(v, name)
		case "deny_domains":
			lists = k
			sb.Network.DenyDomains = r.domains(v, name)
		default:
			r.Fail(k, name, "unknown field (mode, allow_domains, deny_domains)")
		}
	})
	if lists != nil && sb.Network.Mode != NetworkProxy {
		r.Fail(lists, field, "allow_domains and deny_domains need mode proxy")
	}
}

// domains reads a list of domain entries (checked by the daemon's
// admission at the sandbox's create; here only their shape).
func (r *reader) domains(n *yaml.Node, field string) []string {
	list, ok := r.Strs(n, field)
	if !ok {
		return nil
	}
	for _, s := range list {
		if s == "" || len(s) > 253 || strings.ContainsFunc(s, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) {
			r.Fail(n, field, "%q is not a domain", s)
			return nil
		}
	}
	return list
}

// policy reads policy, shaped as api.CallRules.
func (r *reader) policy(n *yaml.Node, field string) *api.CallRules {
	p := &api.CallRules{}
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "profile":
			if s, ok := r.Str(v, name); ok {
				if s != "" && s != "untrusted" {
					r.Fail(v, name, "%q is not a profile (untrusted)", s)
					return
				}
				p.Profile = s
			}
		case "allow":
			p.Allow, _ = r.Strs(v, name)
		case "ask":
			p.Ask, _ = r.Strs(v, name)
		case "deny":
			p.Deny, _ = r.Strs(v, name)
		default:
			r.Fail(k, name, "unknown field (profile, allow, ask, deny)")
		}
	})
	return p
}
