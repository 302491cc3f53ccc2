package main

import (
	"context"
	"fmt"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
)

// followAgent follows agent run id until it ends, printing its events
// after sequence number after (asJSON: as NDJSON on stdout, then the run
// on one line; otherwise as lines on stderr, then the answer on stdout),
// and returns the ended run. ^C: for a private daemon (t.local) it
// cancels the run and goes on to its end (a second ^C stops at once);
// for a daemon it stops following and says how to cancel the run, which
// goes on. Either way the error is exit 130.
func followAgent(ctx context.Context, c *client.Client, t target, id string, after uint64, asJSON bool, sio sandboxIO) (*api.AgentRun, error) {
	out := &lockedWriter{w: sio.stdout}
	errw := &lockedWriter{w: sio.stderr}
	p := &agentPrinter{w: errw}
	ctx, interrupted, stop := watchInterrupt(ctx, t, "agent run", id, func(ctx context.Context) error {
		_, err := c.CancelAgentRun(ctx, id)
		return err
	}, errw)
	defer stop()
	run, err := agentWaitEnd(ctx, c, id, after, func(ev api.AgentEvent) error {
		if asJSON {
			return printJSONLine(out, ev)
		}
		p.event(ev)
		return nil
	})
	if interrupted() {
		if run != nil {
			_ = printAgentEnd(out, errw, run, asJSON)
		} else if !t.local {
			fmt.Fprintf(errw, "moat: stopped following agent run %s; it goes on in the daemon ('moat agent cancel %s' ends it)\n", display.String(id), display.String(id))
		}
		return nil, &exitError{code: exitInterrupted}
	}
	if err != nil {
		if !t.local {
			err = fmt.Errorf("following agent run %s (it may go on in the daemon: 'moat agent logs --follow %s'): %w", id, id, err)
		}
		return nil, err
	}
	return run, printAgentEnd(out, errw, run, asJSON)
}

// agentWaitEnd follows run id's events after sequence number after,
// handing each to fn once, until the run ends, and returns the ended run.
// A stream that ends early (a daemon's timeout, a proxy) is taken up
// again after the last event seen.
func agentWaitEnd(ctx context.Context, c *client.Client, id string, after uint64, fn func(api.AgentEvent) error) (*api.AgentRun, error) {
	last := after
	var lastType string
	for {
		progressed := false
		_, err := c.AgentEvents(ctx, api.AgentEvents{Run: id, After: last, Follow: true}, func(ev api.AgentEvent) error {
			if ev.Seq <= last {
				return nil // already handed on
			}
			last, lastType, progressed = ev.Seq, ev.Type, true
			return fn(ev)
		})
		if err != nil {
			return nil, err
		}
		run, err := c.AgentRunGet(ctx, id)
		if err != nil {
			return nil, err
		}
		if s := agentEndState(lastType); s != "" && !agentEnded(run.State) {
			// The run's end was announced before its record caught up.
			run.State = s
		}
		if agentEnded(run.State) {
			return run, nil
		}
		if !progressed {
			return nil, fmt.Errorf("the event stream of agent run %s ended before the run (state %s)", id, run.State)
		}
	}
}

// agentEnded reports whether an agent run in state has ended.
func agentEnded(state string) bool {
	switch state {
	case api.AgentSucceeded, api.AgentFailed, api.AgentCancelled:
		return true
	}
	return false
}

// agentEndState is the run state an event of type typ announces (""
// for an event that does not end the run).
func agentEndState(typ string) string {
	switch typ {
	case api.AgentEvRunSucceeded:
		return api.AgentSucceeded
	case api.AgentEvRunFailed:
		return api.AgentFailed
	case api.AgentEvRunCancelled:
		return api.AgentCancelled
	}
	return ""
}
