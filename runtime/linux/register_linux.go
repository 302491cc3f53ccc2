package linux

import (
	moatruntime "github.com/moat-sandbox/moat/runtime"
	"github.com/moat-sandbox/moat/sandbox"
)

// open is the runtime's registry Factory: New with the registry's options.
func open(o moatruntime.Options) (sandbox.Runtime, error) {
	opts := []Option{WithDefaults(o.Defaults)}
	if o.KillGrace > 0 {
		opts = append(opts, WithKillGrace(o.KillGrace))
	}
	if o.Logger != nil {
		opts = append(opts, WithLogger(o.Logger))
	}
	if o.StateDir != "" {
		opts = append(opts, WithStateDir(o.StateDir))
	}
	if o.LongLived {
		opts = append(opts, WithSpawner())
	}
	rt, err := New(opts...)
	if err != nil {
		return nil, err // not a nil *Runtime in a non-nil interface
	}
	return rt, nil
}

// RunHelper runs this process as one of the runtime's own helper processes
// (a sandbox's init, a user namespace holder or the spawner) when it was
// started as one, and then never returns; otherwise it returns at once.
// It is registered with runtime.RegisterHelper, so the moat binary reaches
// it through runtime.RunHelpers first thing in main; test binaries that
// use this runtime directly call it in TestMain.
func RunHelper() {
	switch {
	case IsInit():
		Init()
	case IsUsernsHold():
		UsernsHold()
	case IsSpawner():
		Spawner()
	}
}
