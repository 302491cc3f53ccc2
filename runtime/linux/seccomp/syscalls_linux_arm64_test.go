package seccomp

// xsysArchOnly lists arm64-only syscalls of the default profile: none.
var xsysArchOnly = map[string]uintptr{}
