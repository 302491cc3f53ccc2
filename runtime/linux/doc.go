// Package linux is moat's default runtime: each sandbox is a tree of
// processes in fresh user, mount, pid, net, ipc, uts and cgroup namespaces,
// rooted in an overlayfs whose read-only lower layers are a template (the
// host's system directories, or an imported root) and snapshots, and whose
// upper layer is a private, size-capped tmpfs; with a filtered /etc, a
// minimal /dev, a masked /proc and the workspace, hardened with
// no_new_privs, an empty capability bounding set, Landlock and a
// seccomp-BPF filter.
//
// The host half (Runtime, this package's non-init files) validates the
// spec, opens every host path itself (openat2, O_PATH, no symlinks),
// turns it into a detached, idmapped, private mount tree and hands the
// trees to the sandbox's init over a socket. Layers are idmapped through
// the sandbox's own user namespace, so one copy of a template serves every
// sandbox whatever its host id range; the host keeps the scratch tmpfs
// (upper layer) to capture it (Capture, with the cgroup freezer) and to
// resize it. The init half (Init) is the same binary re-executed as pid 1
// of the sandbox: it builds the root, pivots into it, hardens itself and
// then serves process requests (package guest). Nothing on the host
// follows a path the sandbox could have planted.
//
// The root is built in this order (buildRoot): the layers and the scratch
// tmpfs are attached on a staging tmpfs, the overlay is mounted, then
// read-only binds of the host's system directories and the /etc overlay
// (host template), /dev (with /dev/shm on the scratch tmpfs), the masked
// /proc, the host's trees at their targets (attachTrees, parents first,
// each target resolved beneath the root without symlinks), then the spec's
// restrictions (applyRestrictions: hide, read-only and pin mounts that
// narrow the view inside those trees, which Landlock cannot do). Only then
// is the root pivoted into (the staging tmpfs goes with the old root), and
// the init hardened (capabilities, no_new_privs, Landlock, seccomp), so
// that everything is in place before the first sandbox process runs.
package linux
