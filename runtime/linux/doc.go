// Package linux is moat's default runtime: each sandbox is a tree of
// processes in fresh user, mount, pid, net, ipc, uts and cgroup namespaces,
// rooted in a tmpfs that holds read-only binds of the host's system
// directories, a filtered /etc, a minimal /dev, a masked /proc and the
// workspace, hardened with no_new_privs, an empty capability bounding set,
// Landlock and a seccomp-BPF filter.
//
// The host half (Runtime, this package's non-init files) validates the
// spec, opens every host path itself (openat2, O_PATH, no symlinks),
// turns it into a detached, idmapped mount tree and hands the trees to the
// sandbox's init over a socket. The init half (Init) is the same binary
// re-executed as pid 1 of the sandbox: it builds the root from those trees,
// pivots into it, hardens itself and then serves process requests (package
// guest). Nothing on the host follows a path the sandbox could have
// planted.
package linux

// Paths inside every sandbox.
const (
	workspaceDir = "/workspace"
	homeDir      = "/home/sandbox"
)
