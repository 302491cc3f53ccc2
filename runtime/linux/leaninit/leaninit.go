// Package leaninit carries the lean init executable (cmd/moat-init) inside
// the moat binary: moat ships as one static binary, and a sandbox's pid 1
// starts several times faster from a 3 MB executable that links only the
// init than from moat itself, whose package inits (the CLI, the server,
// sqlite, the OCI registry client…) every start would run again.
//
// The executable is embedded only when moat is built with the build tag
// moatinit, with cmd/moat-init compiled beforehand and given to this
// package as the files moat-init and moat-init.sha256 (its SHA-256, as
// sha256sum prints it) through a build overlay (go build -overlay), so
// that the source tree holds no generated file: `make build` and
// internal/testutil's build of moat do this. Without the tag, Embedded
// reports nothing and the linux runtime re-executes moat itself as the
// init (the same code, package runtime/linux/sandboxinit).
package leaninit

// BuildTag is the build tag that embeds the lean init.
const BuildTag = "moatinit"

// Binary is the embedded init executable and the hex SHA-256 of its
// bytes, computed when it was built.
type Binary struct {
	Bytes  []byte
	SHA256 string
}

// Embedded returns the embedded init, or false in a moat built without
// the build tag moatinit.
func Embedded() (Binary, bool) {
	if len(embedded) == 0 {
		return Binary{}, false
	}
	return Binary{Bytes: embedded, SHA256: embeddedSum}, true
}
