// Command moat-init is a sandbox's pid 1, built lean: it links only the
// init (runtime/linux/sandboxinit) and what it needs (package guest, the
// seccomp installer, Landlock), none of moat's CLI, server, store or
// registry code, so that it starts in a fraction of the time the whole
// moat binary takes.
//
// It is not installed on its own: `make build` compiles it and embeds it
// in moat (package runtime/linux/leaninit, build tag moatinit), and the
// linux runtime writes it once to its state directory and starts every
// sandbox's init from there. A moat built without it re-executes itself
// as the init instead (the same code, package sandboxinit).
//
// The Go runtime's container-aware GOMAXPROCS is off (the //go:debug
// lines): it would read the init's cgroup files at every start, and poll
// them, for an init that does no parallel work of its own.
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main
