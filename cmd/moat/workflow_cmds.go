package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/sandbox"
)

// The commands of `moat workflow` that talk to a daemon's runs (all but
// run, which may start a private daemon: workflow.go).

func wfList(sio sandboxIO) *command {
	var o runListOpts
	return &command{
		name:  "ls",
		usage: "[--state STATE] [--limit N] [--json]",
		short: "List your runs",
		long: `List your workflow runs, newest first: ID NAME STATE STEPS (succeeded of
all) CREATED DURATION. --state keeps the runs in one state: pending,
running, succeeded, failed or cancelled.`,
		setup: o.declare,
		run: func(ctx context.Context, args []string) error {
			states := []string{api.RunPending, api.RunRunning, api.RunSucceeded, api.RunFailed, api.RunCancelled}
			if err := o.check(args, states); err != nil {
				return err
			}
			return withClient(func(c *client.Client) error {
				list, err := c.ListWorkflows(ctx, api.ListWorkflows{State: o.state, Limit: o.limit})
				if err != nil {
					return err
				}
				now := time.Now()
				return printList(sio.stdout, o.asJSON, list, "ID\tNAME\tSTATE\tSTEPS\tCREATED\tDURATION", func(r api.WorkflowRun) string {
					steps := "-"
					if len(r.Steps) > 0 {
						ok := 0
						for _, s := range r.Steps {
							if s.State == api.StepSucceeded {
								ok++
							}
						}
						steps = fmt.Sprintf("%d/%d", ok, len(r.Steps))
					}
					d := display.String
					return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", d(r.ID), d(orDash(r.Name)), d(r.State), steps, ago(now, r.Created), span(r.Created, r.Ended, now))
				})
			})
		},
	}
}

func wfGet(sio sandboxIO) *command {
	var asJSON bool
	return &command{
		name:  "get",
		usage: "[--json] RUN",
		short: "Show a run: its steps, attempts, snapshots and artifacts",
		long: `Show a run: its state, groups and budgets, the table of its steps, then
each step's attempts (state, exit code, duration, sandbox, the snapshot or
template it started from) and the files its outputs collected, with their
sizes and sha256. --json prints the run as the API answers it.`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print the run as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usageError("get takes one run id")
			}
			return withClient(func(c *client.Client) error {
				run, err := c.Workflow(ctx, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printJSONTo(sio.stdout, run)
				}
				return printRun(sio.stdout, run, time.Now())
			})
		},
	}
}

func wfWait(sio sandboxIO) *command {
	var o followOpts
	return &command{
		name:  "wait",
		usage: "[--follow] [--json] RUN",
		short: "Wait for a run to end",
		long: `Wait until the run ends, then print the table of its steps (--json: the
run), as 'moat workflow run' does; --follow prints its events from the
start as they come. ^C stops waiting and leaves the run to the daemon.

Exit codes: 0 the run succeeded; 1 it failed or was cancelled; 125 no such
run, or the daemon cannot be reached; 130 interrupted.`,
		setup: func(fl *pflag.FlagSet) { o.declare(fl) },
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usageError("wait takes one run id")
			}
			return withClient(func(c *client.Client) error {
				run, err := follow(ctx, c, target{}, args[0], 0, o, sio)
				if err != nil {
					return err
				}
				return runExit(run)
			})
		},
	}
}

func wfCancel(sio sandboxIO) *command {
	return cancelCommand(sio, `Cancel a run: its running steps are killed, the waiting ones never
start. Prints the run's id and state (--json: the run). 'moat workflow
resume' runs it again.`,
		func(ctx context.Context, c *client.Client, id string) (*api.WorkflowRun, error) {
			return c.CancelWorkflow(ctx, id)
		},
		func(r *api.WorkflowRun) (string, string) { return r.ID, r.State })
}

func wfResume(sio sandboxIO) *command {
	var (
		o    followOpts
		from string
	)
	return &command{
		name:  "resume",
		usage: "[--from STEP] [--follow] [--json] RUN",
		short: "Run a failed or cancelled run again from a step",
		long: `Run a failed or cancelled run again: from STEP (it and every step after
it: those that wait for it, start from it or take its outputs), or
without --from from the steps that did not succeed. The steps before keep
their results and snapshots and do not run again. Without --follow,
print the run's id and return (--json: the run); with --follow, print the
events from the resume on and wait for the end, as 'moat workflow run
--follow' does.

Exit codes: 0 resumed (with --follow: the run succeeded); 1 with --follow,
a step failed or the run was cancelled; 125 no such run or step, a run
that is not failed or cancelled, or the daemon cannot be reached; 130
interrupted (the run goes on).`,
		setup: func(fl *pflag.FlagSet) {
			fl.StringVar(&from, "from", "", "run again from step `STEP` (default: the steps that did not succeed)")
			o.declare(fl)
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usageError("resume takes one run id")
			}
			return withClient(func(c *client.Client) error {
				var last uint64
				if o.follow {
					// Follow from the resume on: skip the events before it.
					if _, err := c.WorkflowEvents(ctx, api.WorkflowEvents{Run: args[0]}, func(ev api.WorkflowEvent) error {
						last = max(last, ev.Seq)
						return nil
					}); err != nil {
						return err
					}
				}
				run, err := c.ResumeWorkflow(ctx, api.ResumeWorkflow{Run: args[0], From: from})
				if err != nil {
					return err
				}
				if !o.follow {
					return printMade(sio.stdout, o.json, run.ID, run)
				}
				final, err := follow(ctx, c, target{}, run.ID, last, o, sio)
				if err != nil {
					return err
				}
				return runExit(final)
			})
		},
	}
}

func wfLogs(sio sandboxIO) *command {
	var (
		follow bool
		asJSON bool
		step   string
	)
	return &command{
		name:  "logs",
		usage: "[--follow] [--step STEP] [--json] RUN",
		short: "Print a run's events and each attempt's output",
		long: `Print a run's events, one a line, and after each attempt that ended what
it wrote (its captured stdout and stderr, each line under "STEP#N
stdout| " or "stderr| ", escaped); --step keeps one step's. With
--follow, go on until the run ends. --json prints the events only, one
JSON object a line.

Exit codes: 0 done (with --follow: the run succeeded); 1 with --follow,
the run failed or was cancelled; 125 no such run, or the daemon cannot be
reached; 130 interrupted.`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVarP(&follow, "follow", "f", false, "go on until the run ends")
			fl.StringVar(&step, "step", "", "only the events and output of step `STEP`")
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
				l := &runLog{c: c, id: id}
				fn := func(ev api.WorkflowEvent) error {
					if step != "" && ev.Step != step {
						return nil
					}
					if asJSON {
						return printJSONLine(sio.stdout, ev)
					}
					fmt.Fprintln(sio.stdout, eventLine(ev))
					return l.printAttemptOutput(ctx, sio.stdout, ev)
				}
				var err error
				var run *api.WorkflowRun
				if follow {
					run, err = waitEnd(ctx, c, id, 0, fn)
				} else {
					_, err = c.WorkflowEvents(ctx, api.WorkflowEvents{Run: id}, fn)
				}
				if err != nil {
					if ctx.Err() != nil {
						return &exitError{code: exitInterrupted}
					}
					return err
				}
				if run != nil {
					return runExit(run)
				}
				return nil
			})
		},
	}
}

// runLog finds the output of a run's attempts for `moat workflow logs`.
type runLog struct {
	c   *client.Client
	id  string
	run *api.WorkflowRun // the latest description fetched
}

// printAttemptOutput prints the output of the attempt that ev ended (a
// step's succeeded, failed, retrying or cancelled event), from the run's
// record of it, or else from the event.
func (l *runLog) printAttemptOutput(ctx context.Context, w io.Writer, ev api.WorkflowEvent) error {
	switch ev.Type {
	case api.WfStepSucceeded, api.WfStepFailed, api.WfStepRetrying, api.WfStepCancelled:
	default:
		return nil
	}
	if ev.Attempt < 1 {
		return nil
	}
	r := l.attemptResult(ev.Step, ev.Attempt)
	if r == nil {
		// Fetch the run again: the record may be newer than the last fetch.
		run, err := l.c.Workflow(ctx, l.id)
		if err != nil {
			return err
		}
		l.run = run
		r = l.attemptResult(ev.Step, ev.Attempt)
	}
	if r == nil {
		r = ev.Result
	}
	if r != nil {
		printOutput(w, ev.Step, ev.Attempt, r)
	}
	return nil
}

// attemptResult is the result of attempt n of step in the last fetched
// run, or nil.
func (l *runLog) attemptResult(step string, n int) *sandbox.Result {
	if l.run == nil {
		return nil
	}
	for _, s := range l.run.Steps {
		if s.ID != step {
			continue
		}
		for _, a := range s.Attempts {
			if a.Attempt == n && a.Result != nil {
				return a.Result
			}
		}
		if s.Attempt == n {
			return s.Result
		}
	}
	return nil
}
