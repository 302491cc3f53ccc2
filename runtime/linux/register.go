package linux

import (
	moatruntime "github.com/moat-sandbox/moat/runtime"
)

// Name is this runtime's name in the registry (moat --runtime linux).
const Name = "linux"

// Check is one probed host capability, for `moat doctor`.
type Check = moatruntime.Check

// The runtime registers itself everywhere: off Linux its factory and probe
// say it cannot run there (register_other.go), rather than it being
// unknown.
func init() {
	moatruntime.Register(Name, open)
	moatruntime.RegisterProbe(Name, Probe)
	moatruntime.RegisterHelper(Name, RunHelper)
}
