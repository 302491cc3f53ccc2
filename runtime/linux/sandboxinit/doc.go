// Package sandboxinit is a sandbox's pid 1 under the linux runtime
// (runtime/linux): it receives the setup over its control socket, joins
// its cgroup, builds the root (layers, overlay, /etc, /dev, /proc, the
// host's trees, restrictions) and pivots into it, hardens itself
// (capabilities, no_new_privs, Landlock, seccomp) and then serves the
// host as package guest's agent. It runs only inside a sandbox; the host
// half is package linux, which validated everything it sends.
//
// It links nothing of moat but guest, sandbox and the seccomp installer,
// so that the lean init executable built from it (cmd/moat-init) starts
// fast; keep it that way (no package-level work, no heavy imports).
package sandboxinit

// Arg is argv[1] of a sandbox's init. The init is either the lean
// moat-init executable (cmd/moat-init, embedded in moat by `make build`)
// or, in a moat built without it, the moat binary itself re-executed,
// which reaches Main through runtime.RunHelpers first thing in main.
const Arg = "__moat_init"
