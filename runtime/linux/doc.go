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
// (upper layer) to export its changes (ExportDiff, with the cgroup
// freezer) and to resize it. The init half (package sandboxinit) is a
// sandbox's pid 1: it builds the root, pivots into it, hardens itself and
// then serves process requests (package guest). Nothing on the host
// follows a path the sandbox could have planted.
//
// The init's executable is the lean moat-init (cmd/moat-init: package
// sandboxinit, guest and the seccomp installer, nothing else of moat),
// embedded in moat by `make build` (package leaninit, build tag moatinit)
// and installed once, content-addressed, under the state directory
// (initexe_linux.go), because its start is most of a sandbox's: a Go
// program runs every linked package's init before main, and moat's
// whole binary links the CLI, the server, sqlite and an OCI registry
// client. A moat built without it (a plain go build, a test binary)
// re-executes itself as the init instead: the same code (Init).
//
// The root is built in this order (buildRoot): the layers and the scratch
// tmpfs are attached on a staging tmpfs, the overlay is mounted, then
// read-only binds of the host's system directories, the /etc overlay and,
// on a host without a locale archive, the /usr/lib/locale overlay that
// adds one (host template; localelayer_linux.go), /dev (with /dev/shm on
// the scratch tmpfs), the masked /proc, the host's trees at their targets
// (attachTrees, parents first, each target resolved beneath the root
// without symlinks), then the spec's restrictions (applyRestrictions:
// hide, read-only and pin mounts that narrow the view inside those trees,
// which Landlock cannot do). Only then
// is the root pivoted into (the staging tmpfs goes with the old root), and
// the init hardened (capabilities, no_new_privs, Landlock, seccomp), so
// that everything is in place before the first sandbox process runs.
//
// # Landlock, thread by thread
//
// Landlock restricts threads: landlock_restrict_self puts the calling
// thread in a domain, and what it clones inherits it. The init enforces
// its ruleset on its main thread, locked to the goroutine that builds the
// root and then serves the agent, which resolves every path of a process
// request and forks every sandbox process (they inherit the domain), and
// each file worker thread of the agent enforces it on itself before its
// first operation (guest.Agent.SetThreadHardening). Its other threads run
// only the agent's plumbing (reaping, the control socket, relaying
// pipes) and the Go runtime, never sandbox code nor a path a sandbox
// names; seccomp's filter, installed with TSYNC, covers every thread.
// This replaces a broadcast of the call to every thread (go-landlock's
// psx way, which stops every thread of the init twice per start).
//
// # Files
//
// The code that runs inside a sandbox, as its pid 1, is package
// sandboxinit; every file of this package runs on the host (or in the
// host's helper processes: the spawner, the user namespace holders).
//
// Inside the sandbox (package sandboxinit, before it serves as package
// guest's agent):
//
//	init_linux.go          Main: receive the setup, join the cgroup, build, harden, report ready
//	rootfs_linux.go        buildRoot: layers, overlay, /etc, locale, /dev, /proc, host trees, pivot_root
//	restrict_linux.go      applyRestrictions: hide, read-only and pin mounts
//	harden_linux.go        harden: hostname, loopback, capabilities, no_new_privs, Landlock, seccomp
//	landlock_linux.go      the Landlock ruleset, enforced thread by thread
//
// On the host:
//
//	runtime_linux.go      Runtime: options, New, Create, Run, Reclaim, the spawner
//	initexe_linux.go      the init's executable: the lean init installed under the state directory, or this binary
//	create_linux.go       create's phases: validate, prepare, startInit, newSandbox, sendSetup, reportEnforcement
//	provision_linux.go    what create makes beside the starting init: cgroup, seccomp program, layers, scratch tmpfs
//	cleanup_linux.go      the undo stack that rolls back a half-built sandbox
//	enforcement_linux.go  the enforcement report and the protections it lists
//	sandbox_linux.go      the sandbox's handle: the control socket's read loop, Shutdown
//	exec_linux.go, files_linux.go, capture_linux.go, netns_linux.go: what a live sandbox does
//	hostmount_linux.go, layers_linux.go, etclayer_linux.go, localelayer_linux.go, cgroup_linux.go, cgroupstats_linux.go,
//	callcgroup_linux.go, uidslot_linux.go, child_linux.go, spawner_linux.go, probe_linux.go: host resources
//	restrict_linux.go     the host's checks of restrictions, and their wire form
//
// The seccomp program travels in the setup message in the kernel's
// layout (seccomp.Encode, seccomp.Decode). The setup message's
// descriptors are laid out by package guest's SetupFDs, which the host
// packs and the init unpacks.
package linux
