package sandbox

// Enforcement reports the protections in effect for a sandbox (or, from
// Runtime.Enforcement, those the runtime provides on this host). It is
// part of the wire format: a result's and a sandbox's "enforcement".
//
// Its fields are the ones every runtime has (the limits, the user, the
// network, the root filesystem, what a call's timeout kills, the outcome of
// Spec.Restrict). How a runtime isolates the sandbox is its Protections
// list, which each runtime fills with its own mechanisms: the Linux runtime
// lists its namespaces, seccomp, Landlock and so on; another runtime (a
// microVM) would list others. Callers look a protection up by name
// (Lookup) rather than assume a runtime's.
type Enforcement struct {
	// Runtime names the runtime that built the sandbox ("linux").
	Runtime string `json:"runtime"`
	// Limits in force (zero: none).
	Limits Limits `json:"limits"`
	// User is the uid the command runs as inside the sandbox.
	User int `json:"user"`
	// Network describes the sandbox's network in one line: its mode and
	// what the sandbox can reach.
	Network string `json:"network"`
	// RootFS describes the root filesystem: its template, layers and the
	// private upper layer the sandbox writes.
	RootFS string `json:"rootfs,omitempty"`
	// CallTree says what a call's timeout or cancel kills in this
	// sandbox: the whole sandbox (one-shot), the call's cgroup (every
	// descendant), or its process group only.
	CallTree string `json:"call_tree,omitempty"`
	// Restricted counts the Spec.Restrict entries in force (a path under
	// a hidden directory counts: it is covered by it). RestrictSkipped
	// lists the paths that did not exist when the sandbox was set up, so
	// nothing protects them.
	Restricted      int      `json:"restricted,omitempty"`
	RestrictSkipped []string `json:"restrict_skipped,omitempty"`
	// Protections are the isolation mechanisms in force, outermost
	// first, each named once. A protection that is listed is enforced;
	// one the runtime does not apply (a network namespace in network
	// mode open, a cgroup without limits) is absent.
	Protections []Protection `json:"protections"`
}

// Protection is one isolation mechanism a runtime enforces.
type Protection struct {
	// Name identifies the protection within its runtime, in lower case
	// with underscores ("seccomp", "user_namespace"). The names a runtime
	// reports are documented with it (docs/CLI.md, "enforcement").
	Name string `json:"name"`
	// Detail says how it is applied, in one line (the uid map of a user
	// namespace, a seccomp filter's summary, a Landlock ABI).
	Detail string `json:"detail,omitempty"`
}

// Lookup returns the protection called name and whether it is in force.
func (e Enforcement) Lookup(name string) (Protection, bool) {
	for _, p := range e.Protections {
		if p.Name == name {
			return p, true
		}
	}
	return Protection{}, false
}
