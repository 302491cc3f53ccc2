package workflow

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/moat-sandbox/moat/api"
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
	name := join(prefix, key)
	switch key {
	case "run":
		if args, ok := r.argv(v, name); ok {
			f.run = args
		}
	case "sh":
		if s, ok := r.str(v, name); ok {
			if strings.TrimSpace(s) == "" {
				r.fail(v, name, "empty command")
			} else {
				f.sh = &s
			}
		}
	case "template":
		if s, ok := r.str(v, name); ok {
			f.template = &s
		}
	case "limits":
		r.limits(f, name, v)
	case "timeout":
		if d, ok := r.duration(v, name); ok {
			if d > MaxTimeout {
				r.fail(v, name, "%s is more than the most a step may take (%s)", d, MaxTimeout)
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
	s, ok := r.str(n, field)
	if !ok {
		return nil
	}
	for _, v := range values {
		if s == v {
			return &s
		}
	}
	r.fail(n, field, "%q is not %s (%s)", s, what, strings.Join(values, ", "))
	return nil
}

// argv reads run: a non-empty list of arguments, the first non-empty.
func (r *reader) argv(n *yaml.Node, field string) ([]string, bool) {
	items, ok := r.sequence(n, field, "a list of arguments (or use sh for a shell command)")
	if !ok {
		return nil, false
	}
	if len(items) == 0 {
		r.fail(n, field, "empty: give the program and its arguments")
		return nil, false
	}
	args := make([]string, 0, len(items))
	for _, it := range items {
		s, ok := r.text(it, field)
		if !ok {
			return nil, false
		}
		args = append(args, s)
	}
	if args[0] == "" {
		r.fail(items[0], field, "the program (first argument) is empty")
		return nil, false
	}
	return args, true
}

// limits reads limits: memory, cpus, pids, disk.
func (r *reader) limits(f *fields, field string, n *yaml.Node) {
	r.mapping(n, field, func(key string, k, v *yaml.Node) {
		name := join(field, key)
		switch key {
		case "memory":
			if x, ok := r.size(v, name); ok {
				f.limits.memory = &x
			}
		case "disk":
			if x, ok := r.size(v, name); ok {
				f.limits.disk = &x
			}
		case "pids":
			if x, ok := r.integer(v, name); ok {
				if x < 0 {
					r.fail(v, name, "must not be negative")
					return
				}
				f.limits.pids = &x
			}
		case "cpus":
			if x, ok := r.number(v, name); ok {
				f.limits.cpus = &x
			}
		default:
			r.fail(k, name, "unknown field")
			return
		}
		f.mark("limits."+key, v)
	})
}

// retry reads retry: attempts, backoff, from.
func (r *reader) retry(f *fields, field string, n *yaml.Node) {
	r.mapping(n, field, func(key string, k, v *yaml.Node) {
		name := join(field, key)
		switch key {
		case "attempts":
			if x, ok := r.integer(v, name); ok {
				if x < 1 || x > MaxAttempts {
					r.fail(v, name, "must be between 1 and %d", MaxAttempts)
					return
				}
				a := int(x)
				f.retry.attempts = &a
			}
		case "backoff":
			if d, ok := r.duration(v, name); ok {
				if d > MaxBackoff {
					r.fail(v, name, "%s is more than the longest wait between attempts (%s)", d, MaxBackoff)
					return
				}
				f.retry.backoff = &d
			}
		case "from":
			f.retry.from = r.enum(v, name, "a retry source", FromSnapshot, FromScratch)
		default:
			r.fail(k, name, "unknown field")
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
	r.mapping(n, field, func(key string, k, v *yaml.Node) {
		name := join(field, key)
		switch {
		case key == "" || strings.ContainsAny(key, "=\x00"):
			r.fail(k, field, "%q is not a variable name", key)
		case ReservedEnv(key):
			r.fail(k, name, "set by the workflow engine in every step")
		default:
			if s, ok := r.text(v, name); ok {
				out[key] = s
			}
		}
	})
	return out
}

// policy reads policy, shaped as api.CallRules.
func (r *reader) policy(n *yaml.Node, field string) *api.CallRules {
	p := &api.CallRules{}
	r.mapping(n, field, func(key string, k, v *yaml.Node) {
		name := join(field, key)
		switch key {
		case "profile":
			if s, ok := r.str(v, name); ok {
				if s != "" && s != "untrusted" {
					r.fail(v, name, "%q is not a profile (untrusted)", s)
					return
				}
				p.Profile = s
			}
		case "allow":
			p.Allow, _ = r.strs(v, name)
		case "ask":
			p.Ask, _ = r.strs(v, name)
		case "deny":
			p.Deny, _ = r.strs(v, name)
		default:
			r.fail(k, name, "unknown field")
		}
	})
	return p
}

// network reads network, shaped as api.Network (the fields a create
// takes).
func (r *reader) network(n *yaml.Node, field string) *api.Network {
	nw := &api.Network{}
	r.mapping(n, field, func(key string, k, v *yaml.Node) {
		name := join(field, key)
		switch key {
		case "mode":
			if s := r.enum(v, name, "a network mode", "none", "proxy", "open"); s != nil {
				nw.Mode = *s
			}
		case "allow_domains":
			nw.AllowDomains, _ = r.strs(v, name)
		case "deny_domains":
			nw.DenyDomains, _ = r.strs(v, name)
		default:
			r.fail(k, name, "unknown field")
		}
	})
	return nw
}
