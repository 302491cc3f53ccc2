package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
)

// The commands of `moat agent` on existing runs: ls, logs and cancel talk
// to a daemon over HTTP; resume, which may need a private daemon to take
// up a run of one, chooses as run does.

func agList(sio sandboxIO) *command {
	var o runListOpts
	return &command{
		name:  "ls",
		usage: "[--state STATE] [--limit N] [--json]",
		short: "List your agent runs",
		long: `List your agent runs, newest first: ID AGENT STATE TURNS TOKENS (in→out)
CREATED DURATION. --state keeps the runs in one state: pending, running,
succeeded, failed or cancelled.`,
		setup: o.declare,
		run: func(ctx context.Context, args []string) error {
			states := []string{api.AgentPending, api.AgentRunning, api.AgentSucceeded, api.AgentFailed, api.AgentCancelled}
			if err := o.check(args, states); err != nil {
				return err
			}
			return withClient(func(c *client.Client) error {
				list, err := c.AgentRuns(ctx, api.ListAgentRuns{State: o.state, Limit: o.limit})
				if err != nil {
					return err
				}
				now := time.Now()
				return printList(sio.stdout, o.asJSON, list, "ID\tAGENT\tSTATE\tTURNS\tTOKENS\tCREATED\tDURATION", func(r api.AgentRun) string {
					d := display.String
					return fmt.Sprintf("%s\t%s\t%s\t%d\t%d→%d\t%s\t%s", d(r.ID), d(r.Agent), d(r.State), r.Turns,
						r.Usage.InputTokens, r.Usage.OutputTokens, ago(now, r.Created), span(r.Created, r.Ended, now))
				})
			})
		},
	}
}

func agLogs(sio sandboxIO) *command {
	var follow, asJSON bool
	return &command{
		name:  "logs",
		usage: "[--follow] [--json] RUN",
		short: "Print a run's events",
		long: `Print a run's events, one a line with its time, as 'moat agent run' shows
them: the model's answers and text, each tool call with the policy's
decision and its result, handoffs, the run's end. With --follow, go on
until the run ends. --json prints the events, one JSON object
(api.AgentEvent) a line (with --follow, then the run on one line).

Exit codes: 0 done (with --follow: the agent gave its answer); 1 with
--follow, the run failed or was cancelled; 125 no such run, or the daemon
cannot be reached; 130 interrupted.`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVarP(&follow, "follow", "f", false, "go on until the run ends")
			fl.BoolVar(&asJSON, "json", false, "print the events as JSON, one a line")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usageError("logs takes one run id")
			}
			id := args[0]
			return withClient(func(c *client.Client) error {
				ctx, stop := interruptible(ctx)
				defer stop()
				p := &agentPrinter{w: sio.stdout, times: true}
				fn := func(ev api.AgentEvent) error {
					if asJSON {
						return printJSONLine(sio.stdout, ev)
					}
					p.event(ev)
					return nil
				}
				var err error
				var run *api.AgentRun
				if follow {
					run, err = agentWaitEnd(ctx, c, id, 0, fn)
				} else {
					_, err = c.AgentEvents(ctx, api.AgentEvents{Run: id}, fn)
				}
				if err != nil {
					if ctx.Err() != nil {
						return &exitError{code: exitInterrupted}
					}
					return err
				}
				if run == nil {
					return nil
				}
				if asJSON {
					if err := printJSONLine(sio.stdout, run); err != nil {
						return err
					}
				}
				return agentExit(run)
			})
		},
	}
}

func agCancel(sio sandboxIO) *command {
	return cancelCommand(sio, `Cancel a run: its model call and tool calls are stopped and its sandboxes
deleted; its conversations are kept ('moat agent resume' takes it up
again). Prints the run's id and state (--json: the run).`,
		func(ctx context.Context, c *client.Client, id string) (*api.AgentRun, error) {
			return c.CancelAgentRun(ctx, id)
		},
		func(r *api.AgentRun) (string, string) { return r.ID, r.State })
}

func agResume(sio sandboxIO) *command {
	var (
		config string
		asJSON bool
		local  bool
	)
	return &command{
		name:  "resume",
		usage: "[--json] [--local --config FILE] RUN [TASK]",
		short: "Take up an ended or interrupted run, optionally with a new task",
		long: `Take up run RUN again and follow it as 'moat agent run' does: its agents'
conversations are kept, so the agent goes on from where it stopped. With
TASK, TASK is a new message to its first agent (a follow-up question to a
run that succeeded); without, a failed or cancelled run is tried again
from where it stopped. A run that is still going (one a restarted daemon
took up by itself) is followed.

Where it runs: as for 'moat agent run'. A private daemon (--local, or no
daemon answers) takes up a run of the private daemon whose data directory
MOAT_DATA names (one killed mid-run, say), with the model providers of
--config FILE.

Exit codes: 0 the agent gave its answer; 1 the run failed or was
cancelled; 125 no such run, a run that cannot be resumed, the daemon
cannot be reached, or a bad command line; 130 interrupted (as for run).`,
		setup: func(fl *pflag.FlagSet) {
			fl.StringVarP(&config, "config", "c", "", "with a private daemon, its model providers: the agents `FILE`")
			fl.BoolVar(&asJSON, "json", false, "print the events as JSON, one a line, then the run on one line")
			fl.BoolVar(&local, "local", false, "take the run up in a private daemon on MOAT_DATA, even when a daemon answers")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageError("resume takes a run id and, optionally, a new task")
			}
			req := api.ResumeAgentRun{Run: args[0]}
			if len(args) == 2 {
				req.Task = args[1]
			}
			var f *agentsFile
			if config != "" {
				var err error
				if f, err = loadAgentsFile("resume", config, "", sio); err != nil {
					return err
				}
			}
			isLocal, err := chooseLocal(ctx, local)
			if err != nil {
				return err
			}
			if isLocal && os.Getenv("MOAT_DATA") == "" {
				return usageError("a private daemon (--local, or none answers at %s) keeps no runs: set MOAT_DATA to the data directory of the run's daemon", daemonURL())
			}
			return withAgentDaemon(ctx, isLocal, f, sio, func(c *client.Client, t target) error {
				return resumeAgent(ctx, c, t, req, asJSON, sio)
			})
		},
	}
}

// resumeAgent resumes the run of req (or, when it is still going and req
// has no task, only follows it) and follows it from its last event on.
func resumeAgent(ctx context.Context, c *client.Client, t target, req api.ResumeAgentRun, asJSON bool, sio sandboxIO) error {
	run, err := c.AgentRunGet(ctx, req.Run)
	if err != nil {
		return err
	}
	// Follow from the resume on: skip the events before it.
	var last uint64
	if _, err := c.AgentEvents(ctx, api.AgentEvents{Run: req.Run}, func(ev api.AgentEvent) error {
		last = max(last, ev.Seq)
		return nil
	}); err != nil {
		return err
	}
	if req.Task == "" && run.State == api.AgentSucceeded {
		// Nothing to take up (a restarted daemon may have finished it
		// already): show its end.
		fmt.Fprintf(sio.stderr, "moat: agent run %s has succeeded (give a TASK to go on with it)\n", display.String(run.ID))
		return printAgentEnd(sio.stdout, sio.stderr, run, asJSON)
	}
	if agentEnded(run.State) || req.Task != "" {
		if run, err = c.ResumeAgentRun(ctx, req); err != nil {
			return err
		}
		fmt.Fprintf(sio.stderr, "moat: agent run %s resumed (agent %s)\n", display.String(run.ID), display.String(run.Agent))
	} else {
		fmt.Fprintf(sio.stderr, "moat: agent run %s is %s: following it\n", display.String(run.ID), display.String(run.State))
	}
	final, err := followAgent(ctx, c, t, run.ID, last, asJSON, sio)
	if err != nil {
		return err
	}
	return agentExit(final)
}
