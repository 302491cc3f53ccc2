package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
)

// followOpts are the output flags of the commands that wait for a run's
// end (run, wait, resume).
type followOpts struct {
	// follow prints each event as it comes.
	follow bool
	json   bool
}

func (o *followOpts) declare(fl *pflag.FlagSet) {
	fl.BoolVarP(&o.follow, "follow", "f", false, "print the run's events as they come")
	fl.BoolVar(&o.json, "json", false, "print JSON: the run (with --follow: the events, one a line, then the run on one line)")
}

// follow waits for run id to end, printing (with o.follow) its events
// after sequence number after, then the run as o says, and returns the
// ended run. ^C: for a private daemon (t.local) it cancels the run and
// goes on waiting for its end (a second ^C stops at once); for a daemon
// it stops following, leaving the run to the daemon. Either way the
// error is exit 130.
func follow(ctx context.Context, c *client.Client, t target, id string, after uint64, o followOpts, sio sandboxIO) (*api.WorkflowRun, error) {
	out := &lockedWriter{w: sio.stdout}
	errw := &lockedWriter{w: sio.stderr}
	sio = sandboxIO{sio.stdin, out, errw}
	ctx, interrupted, stop := watchInterrupt(ctx, t, "run", id, func(ctx context.Context) error {
		_, err := c.CancelWorkflow(ctx, id)
		return err
	}, errw)
	defer stop()
	run, err := waitEnd(ctx, c, id, after, func(ev api.WorkflowEvent) error {
		if !o.follow {
			return nil
		}
		if o.json {
			return printJSONLine(sio.stdout, ev)
		}
		_, err := fmt.Fprintln(sio.stdout, eventLine(ev))
		return err
	})
	if interrupted() {
		if run != nil {
			_ = printEnd(sio, run, o)
		} else if !t.local {
			fmt.Fprintf(sio.stderr, "moat: stopped following run %s; it goes on in the daemon ('moat workflow cancel %s' ends it)\n", display.String(id), display.String(id))
		}
		return nil, &exitError{code: exitInterrupted}
	}
	if err != nil {
		if !t.local {
			err = fmt.Errorf("following run %s (it may go on in the daemon: 'moat workflow wait %s'): %w", id, id, err)
		}
		return nil, err
	}
	return run, printEnd(sio, run, o)
}

// waitEnd follows run id's events after sequence number after, handing
// each to fn, until the run ends, and returns the ended run.
func waitEnd(ctx context.Context, c *client.Client, id string, after uint64, fn func(api.WorkflowEvent) error) (*api.WorkflowRun, error) {
	last := after
	var lastType string
	for {
		progressed := false
		_, err := c.WorkflowEvents(ctx, api.WorkflowEvents{Run: id, After: last, Follow: true}, func(ev api.WorkflowEvent) error {
			if ev.Seq <= last {
				return nil // already handed on
			}
			last, lastType, progressed = ev.Seq, ev.Type, true
			return fn(ev)
		})
		if err != nil {
			return nil, err
		}
		run, err := c.Workflow(ctx, id)
		if err != nil {
			return nil, err
		}
		if s := endState(lastType); s != "" && !api.RunEnded(run.State) {
			// The run's end was announced before its record caught up.
			run.State = s
		}
		if api.RunEnded(run.State) {
			return run, nil
		}
		if !progressed {
			return nil, fmt.Errorf("the event stream of run %s ended before the run (state %s)", id, run.State)
		}
	}
}

// endState is the run state an event of type typ announces ("" for an
// event that does not end the run).
func endState(typ string) string {
	switch typ {
	case api.WfRunSucceeded:
		return api.RunSucceeded
	case api.WfRunFailed:
		return api.RunFailed
	case api.WfRunCancelled:
		return api.RunCancelled
	}
	return ""
}
