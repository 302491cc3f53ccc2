package workflow

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/yamlnode"
)

// Bounds of step fields.
const (
	// MaxTimeout is the longest timeout a step may have.
	MaxTimeout = 24 * time.Hour
	// MaxAttempts is the most attempts a step's retry may give.
	MaxAttempts = 100
	// MaxBackoff caps the wait between two attempts (the backoff doubles
	// per attempt up to it; a larger backoff is an error).
	MaxBackoff = time.Minute
)

// field reads key, one of the step fields that defaults may give too, into
// f and reports whether key is one (prefix is "defaults" in the defaults,
// "" in a step: it starts the names of errors).
func (r *reader) field(f *fields, prefix, key string, v *yaml.Node) bool {
	name := yamlnode.Join(prefix, key)
	switch key {
	case "run":
		if args, ok := r.argv(v, name); ok {
			f.run = args
		}
	case "sh":
		if s, ok := r.Str(v, name); ok {
			if strings.TrimSpace(s) == "" {
				r.Fail(v, name, "empty command")
			} else {
				f.sh = &s
			}
		}
	case "template":
		if s, ok := r.Str(v, name); ok {
			f.template = &s
		}
	case "limits":
		r.limits(f, name, v)
	case "timeout":
		if d, ok := r.duration(v, name); ok {
			if d > MaxTimeout {
				r.Fail(v, name, "%s is more than the most a step may take (%s)", d, MaxTimeout)
			} else {
				f.timeout = &d
			}
		}
	case "env":
		f.env = r.env(v, name)
	case "policy":
		f.policy = r.policy(v, name)
	case "network":
		f.network = r.network(v, name)
	case "retry":
		r.retry(f, name, v)
	case "snapshot":
		f.snapshot = r.enum(v, name, "a snapshot kind", SnapshotNone, SnapshotLight, SnapshotFull)
	case "priority":
		f.priority = r.enum(v, name, "a priority", Critical, Normal, Background)
	default:
		return false
	}
	f.mark(key, v)
	return true
}

// enum reads a string that must be one of values.
func (r *reader) enum(n *yaml.Node, field, what string, values ...string) *string {
	s, ok := r.Str(n, field)
	if !ok {
		return nil
	}
	for _, v := range values {
		if s == v {
			return &s
		}
	}
	r.Fail(n, field, "%q is not %s (%s)", s, what, strings.Join(values, ", "))
	return nil
}

// argv reads run: a non-empty list of arguments, the first non-empty.
func (r *reader) argv(n *yaml.Node, field string) ([]string, bool) {
	items, ok := r.Sequence(n, field, "a list of arguments (or use sh for a shell command)")
	if !ok {
		return nil, false
	}
	if len(items) == 0 {
		r.Fail(n, field, "empty: give the program and its arguments")
		return nil, false
	}
	args := make([]string, 0, len(items))
	for _, it := range items {
		s, ok := r.Text(it, field)
		if !ok {
			return nil, false
		}
		args = append(args, s)
	}
	if args[0] == "" {
		r.Fail(items[0], field, "the program (first argument) is empty")
		return nil, false
	}
	return args, true
}

// limits reads limits: memory, cpus, pids, disk.
func (r *reader) limits(f *fields, field string, n *yaml.Node) {
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "memory":
			if x, ok := r.Size(v, name); ok {
				f.limits.memory = &x
			}
		case "disk":
			if x, ok := r.Size(v, name); ok {
				f.limits.disk = &x
			}
		case "pids":
			if x, ok := r.Integer(v, name); ok {
				if x < 0 {
					r.Fail(v, name, "must not be negative")
					return
				}
				f.limits.pids = &x
			}
		case "cpus":
			if x, ok := r.Number(v, name); ok {
				f.limits.cpus = &x
			}
		default:
			r.Fail(k, name, "unknown field")
			return
		}
		f.mark("limits."+key, v)
	})
}

// retry reads retry: attempts, backoff, from.
func (r *reader) retry(f *fields, field string, n *yaml.Node) {
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "attempts":
			if x, ok := r.Integer(v, name); ok {
				if x < 1 || x > MaxAttempts {
					r.Fail(v, name, "must be between 1 and %d", MaxAttempts)
					return
				}
				a := int(x)
				f.retry.attempts = &a
			}
		case "backoff":
			if d, ok := r.duration(v, name); ok {
				if d > MaxBackoff {
					r.Fail(v, name, "%s is more than the longest wait between attempts (%s)", d, MaxBackoff)
					return
				}
				f.retry.backoff = &d
			}
		case "from":
			f.retry.from = r.enum(v, name, "a retry source", FromSnapshot, FromScratch)
		default:
			r.Fail(k, name, "unknown field")
			return
		}
		f.mark("retry."+key, v)
	})
}

// ReservedEnv reports whether key is a variable the engine sets in every
// step (EnvRun, EnvStep, EnvAttempt): a document may not set it.
func ReservedEnv(key string) bool {
	return key == EnvRun || key == EnvStep || key == EnvAttempt
}

// env reads env: a mapping of names to string values.
func (r *reader) env(n *yaml.Node, field string) map[string]string {
	out := make(map[string]string)
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch {
		case key == "" || strings.ContainsAny(key, "=\x00"):
			r.Fail(k, field, "%q is not a variable name", key)
		case ReservedEnv(key):
			r.Fail(k, name, "set by the workflow engine in every step")
		default:
			if s, ok := r.Text(v, name); ok {
				out[key] = s
			}
		}
	})
	return out
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
			r.Fail(k, name, "unknown field")
		}
	})
	return p
}

// network reads network, shaped as api.Network (the fields a create
// takes).
func (r *reader) network(n *yaml.Node, field string) *api.Network {
	nw := &api.Network{}
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "mode":
			if s := r.enum(v, name, "a network mode", "none", "proxy", "open"); s != nil {
				nw.Mode = *s
			}
		case "allow_domains":
			nw.AllowDomains, _ = r.Strs(v, name)
		case "deny_domains":
			nw.DenyDomains, _ = r.Strs(v, name)
		default:
			r.Fail(k, name, "unknown field")
		}
	})
	return nw
}
