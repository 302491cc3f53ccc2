package main

import "errors"

// Modes of moat run --local-daemon, and where the daemon's socket is.
const (
	// localAuto hands the run to a local daemon when one serves it, and
	// runs it here otherwise.
	localAuto = "auto"
	// localNever always runs here (the cold path).
	localNever = "never"
	// localRequire fails (125) when no local daemon serves the run.
	localRequire = "require"
	// defaultRunSocket is the local run socket of a daemon with the
	// default data directory.
	defaultRunSocket = defaultDataDir + "/" + runSocketName
	// runSocketName is the local run socket's name in a daemon's data
	// directory (server.LocalRunSocket).
	runSocketName = "run.sock"
)

// errNoLocalDaemon is moat run --local-daemon require's failure: no local
// daemon served the run (nothing ran).
var errNoLocalDaemon = errors.New("--local-daemon require: no local daemon served the run")
