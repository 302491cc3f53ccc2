// Package escape is moat's escape test suite: one test per runtime row of
// docs/THREAT-MODEL.md. Each test makes the attempt inside a sandbox (through
// the probe program in ./probe, bound read-only at /opt/probe) and asserts
// that it fails, and runs the same attempt outside the sandbox as a control
// (as an unprivileged uid, or in a throwaway user namespace, or, for
// harmless reads and invalid-argument calls only, as root) to show that the
// attempt is real and that the sandbox is what stops it.
//
// The tests need root (they run moat) and are skipped without it, except
// under CI=true where they fail instead.
//
// The suite tests the Linux sandbox: its files build on Linux only.
package escape
