// Package build holds what moat's sandboxed builds need outside the
// sandbox: the settings of a build and the operator's caps (Limits,
// CheckSettings, Narrow), the command's environment (Env), the source
// package's check and normalized copy into the build's layer (Unpack,
// whose refusals are Refusal errors with a typed reason), and the log
// of the command's output (Log).
//
// The threat: the source and the compiler are hostile. A source package
// may name paths outside its tree, plant symlinks and hardlinks that
// escape it, carry devices, setuid files or a decompression bomb, or be
// no tar at all; Unpack checks every header before anything of it is
// written, and writes only through fstree (file descriptors, no symlink
// followed). The build command runs in a sandbox (the server's part) and
// may write without end: the log keeps a bounded head and tail in memory
// and a capped spill on disk.
//
// Package build imports only api, sandbox and fstree of moat
// (internal/importrules).
package build
