package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/server"
)

const workflowLong = `Run workflows: DAGs of steps, each in a sandbox of its own, described by a
YAML (or JSON) document. State flows from step to step through snapshots
('from'), output directories ('inputs'/'outputs') and pipes ('stdin_from');
a failed step is retried from the snapshot it started from; parallel and
concurrent groups run under a shared budget. docs/CLI.md describes the
document; examples/workflows/ holds one to start from.

Commands:
  run      Run a workflow document and wait for its end
  ls       List your runs
  get      Show a run: its steps, attempts, snapshots and artifacts
  logs     Print a run's events and each attempt's output
  wait     Wait for a run to end
  cancel   Cancel a run
  resume   Run a failed or cancelled run again from a step

Run 'moat workflow COMMAND --help' for a command's flags.

Where it runs: 'run' talks to a moat daemon when MOAT_URL is set
(MOAT_MODE=http), or when one answers at http://127.0.0.1:7070 and its
token can be read; otherwise (or with --local, or MOAT_MODE=stdio) it
starts a private daemon of its own ('moat serve --stdio', as root), which
ends with the command: the run's record, artifacts and light snapshots go
with it (MOAT_DATA names a data directory to keep), its full snapshots
stay in the store, owned by tenant "local". A daemon's runs are durable: they go
on when this command ends and resume by themselves after a restart of the
daemon. The other commands talk to a daemon over HTTP only, found as
'moat sandbox' finds it (MOAT_URL; MOAT_TOKEN, MOAT_TOKEN_FILE or
<MOAT_DATA>/token).

Exit codes: run, wait, and resume or logs with --follow: 0 when the run
succeeded, 1 when a step failed or the run was cancelled; 125 when the
document is invalid (the message names its line), the daemon cannot be
reached or refuses the request, or the command line is wrong; 130 when
interrupted (^C: a private daemon's run is cancelled first; a daemon's run
goes on). The other commands exit 0 when done.`

// workflowCommand is `moat workflow`.
func workflowCommand() *command {
	return &command{
		name:  "workflow",
		usage: "COMMAND [flags] [ARGS...]",
		short: "Run workflows: DAGs of sandboxed steps (run, ls, get, logs…)",
		long:  workflowLong,
		setup: func(*pflag.FlagSet) {},
		// The rest, flags included, is the subcommand's.
		flagsFirst: true,
		run: func(ctx context.Context, args []string) error {
			return runWorkflow(ctx, args, sandboxIO{os.Stdin, os.Stdout, os.Stderr})
		},
	}
}

// workflowSubcommands are the commands of `moat workflow`.
func workflowSubcommands(sio sandboxIO) []*command {
	return []*command{wfRun(sio), wfList(sio), wfGet(sio), wfLogs(sio), wfWait(sio), wfCancel(sio), wfResume(sio)}
}

// runWorkflow dispatches `moat workflow COMMAND ARGS...`.
func runWorkflow(ctx context.Context, args []string, sio sandboxIO) error {
	sub, err := dispatch(ctx, "workflow", workflowLong, workflowSubcommands(sio), args, sio)
	return withSub(sub, daemonHint(err))
}

// exitRunFailed is the exit code of the commands that wait for a run's
// end when it failed or was cancelled.
const exitRunFailed = 1

// runExit is the exit code of a run that ended: 0 succeeded, 1 failed
// or cancelled.
func runExit(run *api.WorkflowRun) error {
	if run.State == api.RunSucceeded {
		return nil
	}
	return &exitError{code: exitRunFailed}
}

func wfRun(sio sandboxIO) *command {
	var (
		o      followOpts
		local  bool
		detach bool
		name   string
		labels []string
	)
	return &command{
		name:  "run",
		usage: "[--follow] [--json] [--detach] [--local] [--name NAME] [--label K=V]... FILE",
		short: "Run a workflow document and wait for its end",
		long: `Submit the workflow document FILE ("-": standard input) and wait until
the run ends. Without --follow, print a table of its steps at the end
(STEP GROUP STATE ATTEMPTS EXIT DURATION SNAPSHOT; --json: the run as
JSON); with --follow, print each event as it comes ("12:00:01 step build
started (attempt 1)"), then the table (--json: the events, one JSON object
a line, then the run on one line). The run's id goes to stderr when it
starts. When a step failed, the end of its standard error follows on
stderr. --detach prints the run's id (--json: the run) and returns at
once, leaving the run to the daemon.

The document is validated before anything runs: an invalid one (unknown
field, cycle, missing id, 'from' that is not an ancestor, impossible
budget) exits 125 with the daemon's message, which names the line.

Where it runs: a daemon when MOAT_URL is set or one answers at the
default address; otherwise, or with --local, a private daemon started for
this command ('moat workflow --help' says more).

Exit codes: 0 the run succeeded; 1 a step failed (after its retries) or
the run was cancelled; 125 invalid document, daemon unreachable or bad
command line; 130 interrupted: ^C cancels a private daemon's run (a
second ^C stops at once), and stops following a daemon's run, which goes
on.`,
		setup: func(fl *pflag.FlagSet) {
			o.declare(fl)
			fl.BoolVarP(&detach, "detach", "d", false, "print the run's id and return without waiting (needs a daemon)")
			fl.BoolVar(&local, "local", false, "run in a private daemon started for this command, even when a daemon answers")
			fl.StringVar(&name, "name", "", "the run's `NAME` in listings (default the document's name)")
			fl.StringArrayVarP(&labels, "label", "l", nil, "label the run and its sandboxes `KEY=VALUE` (repeatable)")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usageError("run takes one workflow file (- for standard input)")
			}
			if detach && (o.follow || local) {
				return usageError("--detach goes with neither --follow nor --local")
			}
			req := api.CreateWorkflow{Name: name}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return usageError("--label %q: want KEY=VALUE", l)
				}
				if req.Labels == nil {
					req.Labels = map[string]string{}
				}
				req.Labels[k] = v
			}
			doc, err := readDocument(args[0], sio.stdin)
			if err != nil {
				return err
			}
			req.Document = doc
			return withDaemonTarget(ctx, local, detach, sio, func(c *client.Client, t target) error {
				run, err := c.CreateWorkflow(ctx, req)
				if err != nil {
					return invalidDocument(sio, args[0], err)
				}
				if detach {
					return printMade(sio.stdout, o.json, run.ID, run)
				}
				named := ""
				if run.Name != "" {
					named = " (" + display.String(run.Name) + ")"
				}
				fmt.Fprintf(sio.stderr, "moat: workflow run %s%s\n", display.String(run.ID), named)
				final, err := follow(ctx, c, t, run.ID, 0, o, sio)
				if t.local {
					dropLightSnapshots(ctx, c, run.ID, req.Document, sio.stderr)
				}
				if err != nil {
					return err
				}
				return runExit(final)
			})
		},
	}
}

// readDocument reads the workflow document at path ("-": in), at most
// server.MaxJSONBody bytes (a larger one cannot be submitted).
func readDocument(path string, in io.Reader) (string, error) {
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", usageError("%v", err)
		}
		defer f.Close()
		in = f
	}
	b, err := io.ReadAll(io.LimitReader(in, server.MaxJSONBody+1))
	if err != nil {
		return "", usageError("%s: %v", path, err)
	}
	if len(b) > server.MaxJSONBody {
		return "", usageError("%s: larger than %s, the most a daemon takes", path, formatBytes(server.MaxJSONBody))
	}
	return string(b), nil
}

// invalidDocument turns the daemon's refusal of the document (an
// invalid_argument, whose message names the line) into exit 125 with that
// message after the file's name; other errors are returned as they are.
func invalidDocument(sio sandboxIO, path string, err error) error {
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument {
		return err
	}
	if path == "-" {
		path = "<stdin>"
	}
	fmt.Fprintf(sio.stderr, "moat workflow run: %s: %s\n", display.String(path), display.String(ae.Message))
	return &exitError{code: sandbox.ExitSetupFailed}
}
