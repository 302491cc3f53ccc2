package main

import (
	"fmt"
	"os"
	"os/signal"

	"github.com/moat-sandbox/moat/sandbox"
)

// runIO is what moat run uses besides its flags: the stdio the command
// and moat's own lines go to, the terminal an ask rule asks on, the home
// of the user policy, the signals that end the run, and the runtime. The
// CLI's is its own process's (processIO); a local daemon serving a run
// (localrun_serve.go) gives its caller's stdio and terminal, received over
// the socket, and its own long-lived runtime.
type runIO struct {
	stdin, stdout, stderr *os.File
	// openTTY opens the terminal an ask rule asks on; an error means
	// there is none (the ask is denied, "no terminal").
	openTTY func() (*os.File, error)
	// home is what ~ means for the user policy; "" means none (an error,
	// as without $HOME).
	home string
	// notify starts delivering endSignals to c; stop ends it.
	notify func(c chan<- os.Signal)
	stop   func(c chan<- os.Signal)
	// runtime, when set, runs the sandbox instead of a runtime opened
	// for the run (a daemon's, which outlives the run); its name is
	// rtName.
	runtime sandbox.Runtime
	rtName  string
}

// processIO is the runIO of this process: its stdio, /dev/tty, $HOME and
// the signals it gets.
func processIO() *runIO {
	home, _ := os.UserHomeDir()
	return &runIO{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		openTTY: func() (*os.File, error) { return os.OpenFile("/dev/tty", os.O_RDWR, 0) },
		home:    home,
		notify:  func(c chan<- os.Signal) { signal.Notify(c, endSignals...) },
		stop:    func(c chan<- os.Signal) { signal.Stop(c) },
	}
}

// homeDir returns the home of the user policy.
func (r *runIO) homeDir() (string, error) {
	if r.home == "" {
		return "", fmt.Errorf("%w: no home directory for the user policy ($HOME)", sandbox.ErrInvalidSpec)
	}
	return r.home, nil
}
