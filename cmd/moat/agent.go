package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
)

// moat agent: the command line and run (this file), the document as it
// is sent (agent_doc.go), where it runs (agent_target.go), following a
// run (agent_follow.go), its events as lines (agent_print.go) and the
// commands on a daemon's runs (agent_cmds.go).

const agentLong = `Run AI agents whose tool calls run in sandboxes. An agents file (YAML;
JSON accepted) names model providers and agents: each agent has a model
alias, tags, a system prompt, its tools (shell_exec, write_file,
read_file, list_dir, fetch_url, process_*, handoff), a policy and a
sandbox; docs/CLI.md describes the document. The daemon runs the agent's
loop: model calls through its one shared model client, every tool call
in the agent's sandbox under its policy.

Commands:
  run      Run an agent of an agents file on a task and wait for its answer
  ls       List your agent runs
  logs     Print a run's events
  resume   Take up an ended or interrupted run, optionally with a new task
  cancel   Cancel a run

Run 'moat agent COMMAND --help' for a command's flags.

Where it runs: 'run' and 'resume' talk to a moat daemon when MOAT_URL is
set (MOAT_MODE=http), or when one answers at http://127.0.0.1:7070 and
its token can be read: the daemon's own model providers serve the run
(the file's providers section is not sent). Otherwise (or with --local,
or MOAT_MODE=stdio) they start a private daemon ('moat serve --stdio
--models FILE', as root) whose providers are the file's; it ends with the
command (MOAT_DATA names a data directory that keeps its runs, so that
'moat agent resume --local --config FILE' can take one up). The other
commands talk to a daemon over HTTP only, found as 'moat sandbox' finds
it (MOAT_URL; MOAT_TOKEN, MOAT_TOKEN_FILE or <MOAT_DATA>/token).

Exit codes: run, and resume or logs with --follow: 0 when the agent gave
its answer, 1 when the run failed (max_turns reached, a model error) or
was cancelled; 125 when the file is invalid (the message names its line),
the daemon cannot be reached or refuses the request, or the command line
is wrong; 130 when interrupted (^C: a private daemon's run is cancelled
first; a daemon's run goes on). The other commands exit 0 when done.`

// agentCommand is `moat agent`.
func agentCommand() *command {
	return &command{
		name:  "agent",
		usage: "COMMAND [flags] [ARGS...]",
		short: "Run AI agents whose tool calls run in sandboxes (run, ls, logs…)",
		long:  agentLong,
		setup: func(*pflag.FlagSet) {},
		// The rest, flags included, is the subcommand's.
		flagsFirst: true,
		run: func(ctx context.Context, args []string) error {
			return runAgent(ctx, args, sandboxIO{os.Stdin, os.Stdout, os.Stderr})
		},
	}
}

// agentSubcommands are the commands of `moat agent`.
func agentSubcommands(sio sandboxIO) []*command {
	return []*command{agRun(sio), agList(sio), agLogs(sio), agResume(sio), agCancel(sio)}
}

// runAgent dispatches `moat agent COMMAND ARGS...`.
func runAgent(ctx context.Context, args []string, sio sandboxIO) error {
	sub, err := dispatch(ctx, "agent", agentLong, agentSubcommands(sio), args, sio)
	return withSub(sub, daemonHint(err))
}

// agentExit is the exit code of a run that ended: 0 succeeded, 1 failed
// or cancelled.
func agentExit(run *api.AgentRun) error {
	if run.State == api.AgentSucceeded {
		return nil
	}
	return &exitError{code: exitRunFailed}
}

func agRun(sio sandboxIO) *command {
	var (
		config, name string
		asJSON       bool
		local        bool
		labels       []string
	)
	return &command{
		name:  "run",
		usage: "--config FILE --agent NAME [--json] [--local] [--label K=V]... TASK",
		short: "Run an agent of an agents file on a task and wait for its answer",
		long: `Run agent NAME of the agents file FILE on TASK and wait for its answer.
The file is checked here first: an invalid one exits 125 with the line
at fault. The run's id goes to stderr when it starts; while it runs its
events follow on stderr, one a line: the model's answers ("[NAME] model:
PROVIDER/MODEL, IN→OUT tokens" and its text), each tool call ("[NAME]
tool shell_exec {…}") and its result with the policy's decision ("→
allow, exit 0, 12 lines"; a refusal "→ refused (rule R): WHY"), handoffs
between agents. The final answer goes to stdout. Everything a model or a sandbox
chose is shown escaped and cut. --json prints the events on stdout
instead, one JSON object (api.AgentEvent) a line, then the run
(api.AgentRun) on one line.

Where it runs: a daemon when MOAT_URL is set or one answers at the
default address (its own providers serve the run: the file's providers
section is not sent, and a note says so); otherwise, or with --local, a
private daemon started for this command with the file's providers
('moat agent --help' says more).

Exit codes: 0 the agent gave its answer; 1 the run failed (max_turns
reached, a model error) or was cancelled; 125 invalid file, daemon
unreachable or refusing, or a bad command line; 130 interrupted: ^C
cancels a private daemon's run (a second ^C stops at once), and stops
following a daemon's run, which goes on ('moat agent cancel RUN' ends
it).`,
		setup: func(fl *pflag.FlagSet) {
			fl.StringVarP(&config, "config", "c", "", "the agents `FILE` (YAML or JSON; - for standard input)")
			fl.StringVarP(&name, "agent", "a", "", "run the agent `NAME` of the file")
			fl.BoolVar(&asJSON, "json", false, "print the events as JSON, one a line, then the run on one line")
			fl.BoolVar(&local, "local", false, "run in a private daemon started for this command, even when a daemon answers")
			fl.StringArrayVarP(&labels, "label", "l", nil, "label the run and its sandboxes `KEY=VALUE` (repeatable)")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return usageError("run takes one task (quote it: moat agent run --config FILE --agent NAME \"TASK\")")
			}
			if config == "" || name == "" {
				return usageError("run needs --config FILE and --agent NAME")
			}
			l, err := parseLabels(labels)
			if err != nil {
				return err
			}
			doc, err := loadAgentsFile("run", config, name, sio)
			if err != nil {
				return err
			}
			req := api.CreateAgentRun{Agent: name, Task: args[0], Labels: l}
			return withAgentDaemon(ctx, local, doc, sio, func(c *client.Client, t target) error {
				req.Document = doc.forTarget(t, sio)
				run, err := c.AgentRun(ctx, req)
				if err != nil {
					return invalidAgentsFile(sio, config, err)
				}
				fmt.Fprintf(sio.stderr, "moat: agent run %s (agent %s)\n", display.String(run.ID), display.String(run.Agent))
				final, err := followAgent(ctx, c, t, run.ID, 0, asJSON, sio)
				if err != nil {
					return err
				}
				return agentExit(final)
			})
		},
	}
}

// parseLabels turns --label KEY=VALUE flags into a map (nil for none).
func parseLabels(labels []string) (map[string]string, error) {
	var m map[string]string
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, usageError("--label %q: want KEY=VALUE", l)
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = v
	}
	return m, nil
}
