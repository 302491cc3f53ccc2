package linux

import (
	"fmt"

	"github.com/moat-sandbox/moat/runtime/linux/seccomp"
	"github.com/moat-sandbox/moat/sandbox"
)

// Names of the protections this runtime reports in
// sandbox.Enforcement.Protections (docs/CLI.md, "enforcement").
const (
	protUserNS         = "user_namespace"
	protMountNS        = "mount_namespace"
	protPivotRoot      = "pivot_root"
	protMaskedProc     = "masked_proc"
	protPIDNS          = "pid_namespace"
	protNetNS          = "net_namespace"
	protIPCNS          = "ipc_namespace"
	protUTSNS          = "uts_namespace"
	protCgroupNS       = "cgroup_namespace"
	protCapabilities   = "capabilities"
	protNoNewPrivs     = "no_new_privs"
	protLandlock       = "landlock"
	protSeccomp        = "seccomp"
	protCgroup         = "cgroup"
	protBudget         = "budget"
	protWorkspaceIDMap = "workspace_idmap"
)

// maxLandlockABI is the newest Landlock ABI whose rights this runtime
// knows; a newer kernel's is enforced as this one.
const maxLandlockABI = 7

// Enforcement reports the protections every sandbox of this runtime gets
// on this host. A sandbox's own report adds its limits, uid map,
// hostname, cgroup, root and workspace (build.reportEnforcement).
func (r *Runtime) Enforcement() sandbox.Enforcement {
	return sandbox.Enforcement{
		Runtime:     Name,
		User:        sandbox.UID,
		Network:     networkDescription(sandbox.NetNone),
		Protections: r.protections(sandboxFacts{netMode: sandbox.NetNone}),
	}
}

// sandboxFacts are what the protections of one sandbox depend on. Left
// empty, a fact is described as every sandbox has it.
type sandboxFacts struct {
	netMode  sandbox.NetMode
	uidMap   string // "inside:host:count" of the user namespace
	hostname string
	// cgroup names the cgroup layout enforcing the limits; "" when the
	// sandbox has no cgroup.
	cgroup string
	// budget describes the budget the sandbox runs in; "" for none.
	budget string
	// workspace says how the workspace's owners are mapped; "" leaves
	// workspace_idmap out.
	workspace string
}

// protections lists, outermost first, what a sandbox with facts f has:
// its namespaces (no network namespace of its own in network mode open),
// its root, the init's hardening (capabilities, no_new_privs, Landlock,
// seccomp), its cgroup, its budget and its workspace's idmap.
func (r *Runtime) protections(f sandboxFacts) []sandbox.Protection {
	uidMap := f.uidMap
	if uidMap == "" {
		uidMap = fmt.Sprintf("0:(a host range of the sandbox's own):%d", uidsPer)
	}
	hostname := "a hostname of its own"
	if f.hostname != "" {
		hostname = "hostname " + f.hostname
	}
	ps := make([]sandbox.Protection, 0, 16)
	ps = append(ps,
		sandbox.Protection{Name: protUserNS, Detail: "uid map " + uidMap + " (inside:host:count)"},
		sandbox.Protection{Name: protMountNS, Detail: "nothing mounted inside propagates to the host"},
		sandbox.Protection{Name: protPivotRoot, Detail: "the root is an overlay of read-only layers; the host's tree is detached"},
		sandbox.Protection{Name: protMaskedProc, Detail: "procfs of the sandbox's pid namespace; kernel entries masked, sys, bus, fs and irq read-only"},
		sandbox.Protection{Name: protPIDNS, Detail: "the init is pid 1; only the sandbox's processes are visible"},
	)
	if f.netMode != sandbox.NetOpen {
		ps = append(ps, sandbox.Protection{Name: protNetNS, Detail: "loopback only, and in network mode proxy the egress proxy's listener"})
	}
	ps = append(ps,
		sandbox.Protection{Name: protIPCNS, Detail: "System V IPC and POSIX message queues of its own"},
		sandbox.Protection{Name: protUTSNS, Detail: hostname},
		sandbox.Protection{Name: protCgroupNS, Detail: "rooted at the sandbox's cgroup"},
		sandbox.Protection{Name: protCapabilities, Detail: "none (bounding, ambient, inheritable empty; non-root uid)"},
		sandbox.Protection{Name: protNoNewPrivs, Detail: "set: setuid bits and file capabilities grant nothing"},
		sandbox.Protection{Name: protLandlock, Detail: fmt.Sprintf("ABI %d", min(r.landlock, maxLandlockABI))},
		sandbox.Protection{Name: protSeccomp, Detail: r.seccompSummary()},
	)
	if f.cgroup != "" {
		ps = append(ps, sandbox.Protection{Name: protCgroup, Detail: f.cgroup})
	}
	if f.budget != "" {
		ps = append(ps, sandbox.Protection{Name: protBudget, Detail: f.budget})
	}
	if f.workspace != "" {
		ps = append(ps, sandbox.Protection{Name: protWorkspaceIDMap, Detail: f.workspace})
	}
	return ps
}

// seccompSummary describes the default seccomp profile in one line,
// computed once per runtime.
func (r *Runtime) seccompSummary() string {
	r.seccompOnce.Do(func() {
		sum := seccomp.Default().Summary()
		if sum.Error != "" {
			r.seccompSum = "error: " + sum.Error
			return
		}
		r.seccompSum = fmt.Sprintf("filter: %d syscalls denied, %d filtered by argument, foreign ABIs killed, unknown syscalls %s",
			sum.DeniedCount, len(sum.ArgFiltered), sum.UnknownSyscalls)
	})
	return r.seccompSum
}

// rootDescription names the root filesystem for the enforcement report.
func rootDescription(root *sandbox.RootFS, upperBytes int64) string {
	name := root.Template
	if name == "" {
		name = "host"
	}
	snapshots := len(root.Layers)
	if !root.Host {
		snapshots-- // the bottom layer is the template's root
	}
	d := fmt.Sprintf("overlay: template %s, %d snapshot layer(s), idmapped read-only lower layers, private upper layer (tmpfs, %d bytes)",
		name, snapshots, upperBytes)
	if !root.Host {
		user := root.User
		if user == "" {
			user = "root"
		}
		d += fmt.Sprintf("; writable root (the template's user %q owns as uid %d; not /dev, /proc, read-only binds)", user, sandbox.UID)
	} else if snapshots > 0 {
		d += "; the layers' own directories writable (the host's system directories stay read-only binds)"
	}
	return d
}
