package main

import (
	"errors"
	"io"
	"strings"

	"github.com/moat-sandbox/moat/config"
	moatruntime "github.com/moat-sandbox/moat/runtime"
	"github.com/moat-sandbox/moat/sandbox"

	// The runtimes this binary offers (--runtime NAME): each registers
	// itself with package runtime. Another runtime is one more import.
	_ "github.com/moat-sandbox/moat/runtime/linux"
)

// runtimeFlagUsage documents --runtime for the commands that take it.
func runtimeFlagUsage() string {
	return "sandbox runtime `NAME`, one of: " + strings.Join(moatruntime.Names(), ", ") +
		" (default: the config's runtime, else " + moatruntime.Default + ")"
}

// runtimeName picks the runtime: the --runtime flag, else the config's
// runtime key, else moat's default. A name no runtime registered is a
// usage error (exit 125) that lists the known ones.
func runtimeName(flag string, d config.Defaults) (string, error) {
	name, from := flag, "--runtime"
	if name == "" {
		name, from = d.Runtime, "config "+d.Source+": runtime"
	}
	if name == "" {
		return moatruntime.Default, nil
	}
	if !moatruntime.Known(name) {
		return "", usageError("%s: %v", from, &moatruntime.UnknownError{Name: name, Known: moatruntime.Names()})
	}
	return name, nil
}

// openRuntime opens runtime name; closeRT releases what it holds (linux:
// its spawner) and must run once its sandboxes have ended.
func openRuntime(name string, opts moatruntime.Options) (rt sandbox.Runtime, closeRT func(), err error) {
	rt, err = moatruntime.Open(name, opts)
	if err != nil {
		if _, unknown := errors.AsType[*moatruntime.UnknownError](err); unknown {
			return nil, nil, usageError("%v", err)
		}
		return nil, nil, err
	}
	closeRT = func() {}
	if c, ok := rt.(io.Closer); ok {
		closeRT = func() { _ = c.Close() }
	}
	return rt, closeRT, nil
}
