package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
)

// errJournal marks an error of the journal: it ends the run (a tool call
// is never run without its tool.call journalled first).
var errJournal = errors.New("journal")

// maxEventArgs bounds the arguments an event carries (a write_file's
// content can be megabytes; the conversation keeps them whole).
const maxEventArgs = 64 << 10

// run is one run the engine runs. Everything below mu is guarded by it;
// mu is never held across a Model or Backend call (journal calls are made
// under it, so that the journal sees transitions in order).
type run struct {
	e    *Engine
	id   string
	doc  *Document
	ctx  context.Context // cancelled by Cancel and by the engine's Close
	stop context.CancelFunc
	done chan struct{} // closed when the run's goroutine has returned

	// stack are the agents at work, the run's agent first, each waiting
	// for the next one's answer (a handoff). Only the run's goroutine
	// uses it.
	stack []string

	mu  sync.Mutex
	rec *Record
	// cancelled: agent.cancel was called. When ctx is done and cancelled
	// is false, the engine is closing: nothing more is journalled.
	cancelled bool
	// batch holds the events emitted since the last commit.
	batch []api.AgentEvent
	// asked names the agents whose next model call's model.request went
	// out with their last tool result (one journal write for both).
	asked map[string]bool
	// changed is closed (and replaced) at every commit: followers of the
	// run's events wait on it.
	changed chan struct{}
}

// newRun makes the state of rec, whose document is doc. The caller starts
// it (Engine.startRun).
func newRun(e *Engine, rec *Record, doc *Document) *run {
	ctx, stop := context.WithCancel(e.ctx)
	if rec.Conversations == nil {
		rec.Conversations = map[string][]model.Message{}
	}
	if rec.Progress == nil {
		rec.Progress = map[string]*Progress{}
	}
	return &run{
		e: e, id: rec.Run.ID, doc: doc, ctx: ctx, stop: stop,
		done:    make(chan struct{}),
		stack:   []string{rec.Run.Agent},
		rec:     rec,
		changed: make(chan struct{}),
	}
}

// progress returns agent name's progress, made if need be. Called with mu
// held.
func (r *run) progress(name string) *Progress {
	p := r.rec.Progress[name]
	if p == nil {
		p = &Progress{}
		r.rec.Progress[name] = p
	}
	return p
}

// state returns agent name's api.AgentState, added if need be. Called
// with mu held.
func (r *run) state(name string) *api.AgentState {
	for i := range r.rec.Run.Agents {
		if r.rec.Run.Agents[i].Name == name {
			return &r.rec.Run.Agents[i]
		}
	}
	r.rec.Run.Agents = append(r.rec.Run.Agents, api.AgentState{Name: name})
	return &r.rec.Run.Agents[len(r.rec.Run.Agents)-1]
}

// add appends m to agent name's conversation. Called with mu held.
func (r *run) add(name string, m model.Message) {
	r.rec.Conversations[name] = append(r.rec.Conversations[name], m)
	r.state(name).Messages = len(r.rec.Conversations[name])
}

// emit queues an event of the run; the next commit journals it.
func (r *run) emit(ev api.AgentEvent) {
	r.rec.Seq++
	ev.Seq = r.rec.Seq
	ev.Time = r.e.now()
	if ev.Tool != nil && len(ev.Tool.Arguments) > maxEventArgs {
		t := *ev.Tool
		t.Arguments, _ = json.Marshal(map[string]any{"elided_bytes": len(ev.Tool.Arguments)})
		ev.Tool = &t
	}
	r.batch = append(r.batch, ev)
}

// commit journals the run's record and the events emitted since the last
// commit (one write), and wakes the followers of its events. It is called
// at every transition, with mu held. Its error wraps errJournal.
func (r *run) commit() error {
	r.rec.Run.Updated = r.e.now()
	if r.rec.Run.State == api.AgentPending && len(r.batch) > 0 && r.batch[0].Type != api.AgentEvRunStarted {
		r.rec.Run.State = api.AgentRunning
	}
	err := r.e.j.SaveRun(context.WithoutCancel(r.ctx), cloneRecord(r.rec), r.batch)
	r.batch = nil
	close(r.changed)
	r.changed = make(chan struct{})
	if err != nil {
		r.e.log.Error("agent journal", "run", r.id, "err", err)
		return fmt.Errorf("%w: run %s: %w", errJournal, r.id, err)
	}
	return nil
}

// closing reports whether the engine is closing the run (its context is
// done and no one cancelled it): its state is then left as journalled.
// Called with mu held.
func (r *run) closing() bool {
	return r.ctx.Err() != nil && !r.cancelled
}

// view returns a copy of the run's state. Called with mu held.
func (r *run) view() *api.AgentRun {
	v := cloneRun(&r.rec.Run)
	return &v
}

// cloneRun returns a deep copy of a run's API view.
func cloneRun(in *api.AgentRun) api.AgentRun {
	out := *in
	out.Labels = maps.Clone(in.Labels)
	out.Agents = slices.Clone(in.Agents)
	if in.Ended != nil {
		t := *in.Ended
		out.Ended = &t
	}
	return out
}

// cloneRecord returns a copy of rec that the engine never changes: its
// maps and the views' slices are copied; messages are never changed once
// added, so the conversations' slices are shared up to their length.
func cloneRecord(rec *Record) *Record {
	out := *rec
	out.Run = cloneRun(&rec.Run)
	out.Conversations = make(map[string][]model.Message, len(rec.Conversations))
	for k, v := range rec.Conversations {
		out.Conversations[k] = slices.Clip(v)
	}
	out.Progress = make(map[string]*Progress, len(rec.Progress))
	for k, v := range rec.Progress {
		out.Progress[k] = v.clone()
	}
	return &out
}
