package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/moat-sandbox/moat/api"
)

// eventBatch is how many events one journal read returns.
const eventBatch = 500

// Recover takes up every run the journal has as unfinished (at the
// daemon's start, before serving). Each agent's long-lived sandbox is
// kept when it still runs (sandbox.get), else forgotten (a new one is
// made at its next tool call); a per_call sandbox of a call under way is
// deleted. Each agent goes on from its saved conversation: a model call
// whose answer was not journalled is made again; a tool call under way
// is answered to the model as a tool error ("interrupted by a daemon
// restart; re-run it if still needed"), never run a second time; a
// handoff under way goes on in the other agent's conversation. Each run
// gets the events run.interrupted and run.resumed and one more Resumes.
// A run whose document no longer compiles ends failed. Errors of single
// runs are joined and returned once every run was tried.
func (e *Engine) Recover(ctx context.Context) error {
	e.take.Lock()
	defer e.take.Unlock()
	recs, err := e.j.Unfinished(ctx)
	if err != nil {
		return fmt.Errorf("recover agent runs: %w", err)
	}
	var errs []error
	for _, rec := range recs {
		if e.owned(rec.Owner.Tenant, rec.Run.ID) != nil || ended(rec.Run.State) {
			continue
		}
		if err := e.recoverRun(ctx, rec); err != nil {
			errs = append(errs, fmt.Errorf("recover run %s: %w", rec.Run.ID, err))
		}
	}
	return errors.Join(errs...)
}

// recoverRun takes up one unfinished run.
func (e *Engine) recoverRun(ctx context.Context, rec *Record) error {
	// Events journalled after the record's last save keep their numbers.
	for {
		evs, err := e.j.Events(ctx, rec.Run.ID, rec.Seq, eventBatch)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		if len(evs) == 0 {
			break
		}
		rec.Seq = max(rec.Seq, evs[len(evs)-1].Seq)
		if len(evs) < eventBatch {
			break
		}
	}
	d, err := Compile([]byte(rec.Document))
	if err == nil && d.Agent(rec.Run.Agent) == nil {
		err = fmt.Errorf("%w: no agent %q", ErrInvalid, rec.Run.Agent)
	}
	r := newRun(e, rec, d)
	if err != nil {
		r.stop()
		// Its sandboxes end with it, as any ended run's do.
		r.deleteAll()
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seal("the run's document no longer compiles")
		now := e.now()
		rec.Run.State, rec.Run.Error, rec.Run.Ended = api.AgentFailed, fmt.Sprintf("the run's document no longer compiles: %v", err), &now
		r.emit(api.AgentEvent{Type: api.AgentEvRunFailed, Agent: rec.Run.Agent, Text: rec.Run.Error})
		return errors.Join(err, r.commit())
	}
	var drop []string
	for i := range rec.Run.Agents {
		st := &rec.Run.Agents[i]
		if st.Sandbox != "" && !r.alive(ctx, rec.Owner, st.Sandbox) {
			drop = append(drop, st.Sandbox)
			st.Sandbox = ""
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rec.Progress)) {
		if p := rec.Progress[name]; p.CallSandbox != "" {
			drop = append(drop, p.CallSandbox)
			p.CallSandbox = ""
		}
	}
	for _, id := range drop {
		r.deleteSandbox(id)
	}
	r.mu.Lock()
	r.emit(api.AgentEvent{Type: api.AgentEvRunInterrupted, Agent: rec.Run.Agent, Text: "the daemon stopped"})
	rec.Run.Resumes++
	rec.Run.State = api.AgentRunning
	r.emit(api.AgentEvent{Type: api.AgentEvRunResumed, Agent: rec.Run.Agent, Text: "taken up after a restart"})
	err = r.commit()
	r.mu.Unlock()
	if err != nil {
		r.stop()
		return err
	}
	return e.startRun(r)
}
