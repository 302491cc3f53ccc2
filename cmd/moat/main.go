// Command moat runs the tool calls of AI agents inside isolated Linux
// sandboxes. This file dispatches the re-executed roles of the binary (a
// sandbox's init, a user-namespace holder) before anything else runs, then
// the subcommands; each subcommand lives in its own file.
//
// The CLI is built on pflag alone: every sandbox starts this binary twice
// (the CLI and the sandbox's init), and a heavier CLI framework measurably
// slowed both starts.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/display"
	moatruntime "github.com/moat-sandbox/moat/runtime"
	"github.com/moat-sandbox/moat/sandbox"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// A runtime's helper processes (a sandbox's init…) are this binary.
	moatruntime.RunHelpers()
	// Descriptors moat inherited must not reach anything it starts; the
	// sandbox's init also closes whatever it inherits.
	closeInherited()
	if os.Getenv("MOAT_LOG") == "debug" {
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}
	os.Exit(execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand: its flags and what it runs.
type command struct {
	name  string
	usage string // after "moat NAME "
	short string
	long  string
	// setup declares the flags; run gets the parsed FlagSet's args.
	setup func(fs *pflag.FlagSet)
	run   func(ctx context.Context, args []string) error
	// flagsFirst ends the flags at the first positional argument: for
	// moat run, whose command line follows its flags with or without --,
	// and for the commands made of subcommands (moat sandbox…), whose
	// subcommand parses the rest. Every other command takes flags after
	// its arguments too (parseFlags).
	flagsFirst bool
	// rawArgs, when set, gets the command's arguments as given, before
	// parsing (moat run hands them to a local daemon).
	rawArgs *[]string
}

// exitError carries the exit code a command wants moat to end with.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// errUsage marks a command line moat cannot run; it exits 125.
var errUsage = errors.New("usage")

// usageError is a command line moat cannot run; the message is shown as is.
func usageError(format string, a ...any) error {
	return &usage{msg: fmt.Sprintf(format, a...)}
}

type usage struct{ msg string }

func (u *usage) Error() string { return u.msg }
func (u *usage) Unwrap() error { return errUsage }

func commands() []*command {
	run := runCommand()
	run.flagsFirst = true // moat run echo -n hi: -n is echo's
	return []*command{run, serveCommand(), sandboxCommand(), snapshotCommand(), templateCommand(), workflowCommand(), buildCommand(), agentCommand(), approvalsCommand(), auditCommand(), policyCommand(), doctorCommand(), completionCommand(), versionCommand()}
}

const rootHelp = `moat runs untrusted commands (an AI agent's shell commands, code, builds)
inside fresh Linux sandboxes: user, mount, pid, net, ipc, uts and cgroup
namespaces, a read-only view of the host's system directories, seccomp,
Landlock, no capabilities and no network.

Usage:
  moat COMMAND [flags]
  moat --version

Commands:
`

func printRootHelp(w io.Writer) {
	fmt.Fprint(w, rootHelp)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.short)
	}
	fmt.Fprint(w, "\nRun 'moat COMMAND --help' for a command's flags and exit codes. Flags may\nfollow a command's arguments (not moat run's: its command line follows\nits flags); after --, words are a command line's own.\n")
}

// execute runs the CLI and maps its outcome to moat's exit codes: a
// command's own code, or 125 for anything that kept it from running (bad
// flags, bad paths, a host that cannot enforce the sandbox).
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			args = []string{args[1], "--help"}
		} else {
			printRootHelp(stdout)
			return 0
		}
	}
	if args[0] == "--version" {
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	var cmd *command
	for _, c := range commands() {
		if c.name == args[0] {
			cmd = c
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "moat: unknown command %q (see 'moat --help')\n", args[0])
		return sandbox.ExitSetupFailed
	}
	rest, ok, err := parseFlags(cmd.name, cmd, args[1:], stdout)
	if err != nil {
		fmt.Fprintf(stderr, "moat %s: %s\n", cmd.name, display.String(err.Error()))
		return sandbox.ExitSetupFailed
	}
	if !ok {
		return 0
	}
	if cmd.rawArgs != nil {
		*cmd.rawArgs = args[1:]
	}
	return exitCode(cmd.name, cmd.run(ctx, rest), stderr)
}

// exitCode maps a command's outcome to moat's exit code, writing the
// error of a failure that is not an exit code to stderr.
func exitCode(name string, err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// An error can carry what a sandbox chose (a path, a daemon's message).
	fmt.Fprintf(stderr, "moat %s: %s\n", name, display.String(err.Error()))
	return sandbox.ExitSetupFailed
}
