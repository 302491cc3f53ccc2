// Package compile compiles an effective policy (package policy) into a
// sandbox.Spec, so that the kernel enforces the same ceiling the policy
// engine decides: the binds that show the host (the trusted profile's
// read-only host directories, its writable roots) and the restrictions
// that narrow what those binds show (credentials and deny-read rules
// hidden, every .git (see git.go), shell rc files, policy files and
// deny-write rules read-only inside writable trees).
//
// Literal paths are compiled directly; patterns ("**/*.pem",
// "/ws/**/.git") are expanded by walking the host trees the sandbox
// sees, within a budget. What the kernel cannot enforce — a protected name
// that does not exist yet inside a writable tree (a mount needs an entry),
// a pattern in a tree too big to walk or not walked, Exec rules, a network
// allowlist without an egress proxy — is listed in Report.Unenforced, one
// line each, and stays enforced by the policy engine for the requests moat
// judges itself (commands it runs, file operations of its API).
//
// View maps sandbox paths to host paths for those requests.
package compile
