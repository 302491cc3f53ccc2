// Command moat runs the tool calls of AI agents inside isolated Linux
// sandboxes. This file dispatches the re-executed roles of the binary (a
// sandbox's init, a user-namespace holder) before anything else runs, then
// hands over to the CLI; each subcommand lives in its own file.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/moat-sandbox/moat/runtime/linux"
	"github.com/moat-sandbox/moat/sandbox"
)

func main() {
	switch {
	case linux.IsInit():
		linux.Init()
	case linux.IsUsernsHold():
		linux.UsernsHold()
	}
	if os.Getenv("MOAT_LOG") == "debug" {
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}
	os.Exit(execute(os.Args[1:]))
}

// exitError carries the exit code a command wants moat to end with.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "moat",
		Short: "Run AI agents' tool calls in isolated Linux sandboxes",
		Long: `moat runs untrusted commands (an AI agent's shell commands, code, builds)
inside fresh Linux sandboxes: user, mount, pid, net, ipc, uts and cgroup
namespaces, a read-only view of the host's system directories, seccomp,
Landlock, no capabilities and no network.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newRunCmd(), newDoctorCmd())
	return root
}

// execute runs the CLI and maps its outcome to moat's exit codes: a
// command's own code, or 125 for anything that kept it from running
// (bad flags, bad paths, a host that cannot enforce the sandbox).
func execute(args []string) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
	})
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "moat:", err)
	return sandbox.ExitSetupFailed
}
