package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
)

// What the commands on agent runs (agent_cmds.go) and workflow runs
// (workflow_cmds.go) do alike.

// runListOpts are the flags of a list of runs ('moat agent ls', 'moat
// workflow ls').
type runListOpts struct {
	state  string
	limit  int
	asJSON bool
}

func (o *runListOpts) declare(fl *pflag.FlagSet) {
	fl.StringVar(&o.state, "state", "", "list only the runs in `STATE`")
	fl.IntVar(&o.limit, "limit", 0, "list at most `N` runs (0: the daemon's default)")
	fl.BoolVar(&o.asJSON, "json", false, "print the list as JSON")
}

// check refuses arguments, a state other than "" and those of states
// (pending, running, succeeded, failed and cancelled, in the constants of
// the kind of run), and a negative limit.
func (o *runListOpts) check(args, states []string) error {
	if len(args) > 0 {
		return usageError("ls takes no arguments")
	}
	if o.state != "" && !slices.Contains(states, o.state) {
		return usageError("--state %q: want pending, running, succeeded, failed or cancelled", o.state)
	}
	if o.limit < 0 {
		return usageError("--limit must not be negative")
	}
	return nil
}

// cancelCommand is the cancel command of a kind of run ('moat agent
// cancel', 'moat workflow cancel'), long its help: it cancels the run its
// argument names with cancelRun and prints the run's id and state, which
// idState reads (--json: the run).
func cancelCommand[R any](sio sandboxIO, long string, cancelRun func(context.Context, *client.Client, string) (R, error), idState func(R) (string, string)) *command {
	var asJSON bool
	return &command{
		name:  "cancel",
		usage: "[--json] RUN",
		short: "Cancel a run",
		long:  long,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print the run as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usageError("cancel takes one run id")
			}
			return withClient(func(c *client.Client) error {
				run, err := cancelRun(ctx, c, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printJSONTo(sio.stdout, run)
				}
				id, state := idState(run)
				_, err = fmt.Fprintf(sio.stdout, "%s %s\n", display.String(id), display.String(state))
				return err
			})
		},
	}
}
