// Package linux is moat's default runtime: each sandbox is a tree of
// processes in fresh user, mount, pid, net, ipc, uts and cgroup namespaces,
// rooted in a tmpfs that holds read-only binds of the host's system
// directories, a filtered /etc, a minimal /dev, a masked /proc and the
// workspace, hardened with no_new_privs, an empty capability bounding set,
// Landlock and a seccomp-BPF filter.
//
// The host half (Runtime, this package's non-init files) validates the
// spec, opens every host path itself (openat2, O_PATH, no symlinks),
// turns it into a detached, idmapped, private mount tree and hands the
// trees to the sandbox's init over a socket. The init half (Init) is the
// same binary re-executed as pid 1 of the sandbox: it builds the root,
// pivots into it, hardens itself and then serves process requests (package
// guest). Nothing on the host follows a path the sandbox could have
// planted.
//
// The root is built on a tmpfs (buildRoot), in this order: read-only binds
// of the system directories, the /etc overlay, /dev, the masked /proc, the
// scratch tmpfs (/tmp, home, /dev/shm, an in-memory workspace), the host's
// trees at their targets (attachTrees, parents first, each target resolved
// beneath the root without symlinks), then the spec's restrictions
// (applyRestrictions: hide, read-only and pin mounts that narrow the view
// inside those trees, which Landlock cannot do). Only then is the root
// tmpfs made read-only and pivoted into, and the init hardened
// (capabilities, no_new_privs, Landlock, seccomp), so that everything is in
// place before the first sandbox process runs.
package linux

// Paths inside every sandbox.
const (
	workspaceDir = "/workspace"
	homeDir      = "/home/sandbox"
)
