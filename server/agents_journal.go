package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/agent"
	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/store"
)

// agJournal is the agent runner's Journal over the store: a run's record
// is one row of agent_runs (the agent.Record as JSON: the run, its
// document and every agent's conversation), its events rows of
// agent_events, both written by one transaction per SaveRun.
//
// It also accounts for what the records and events say: each model call
// (a model.response or model.error event) writes one model.call audit
// event, attributed to the run's owner, run and agent (the client's
// attempts within the call, retries and failovers, are counted in the
// metrics by agentModel.observe); each tool.result event counts in
// moat_agent_tool_calls_total (by tool and the decision it had); a run reaching an
// end state writes one agent.run audit event. What it
// compares a record with is the state it last saved, or, for the first
// save of a run since the daemon started, the one in the store: a restart
// audits no end twice.
type agJournal struct {
	s *Service

	// runs are the runs saved since the start, with the state their last
	// record had (they are forgotten once ended).
	runs journalRuns[journaledAgent]
}

var _ agent.Journal = (*agJournal)(nil)

// journaledAgent is what the audit compares a run's next record with.
type journaledAgent struct {
	mu    sync.Mutex // serializes the saves of the run
	known bool       // state holds the last saved record's
	state string
	// doc is the run's document, compiled at its first model call
	// event (its agents' aliases and tags); nil until then.
	doc *agent.Document
}

func newAgJournal(s *Service) *agJournal {
	return &agJournal{s: s}
}

// SaveRun writes r's row (insert or replace) with evs, in one durable
// write, then counts its tool calls and audits its end.
func (j *agJournal) SaveRun(ctx context.Context, r *agent.Record, evs []api.AgentEvent) error {
	if r == nil || r.Run.ID == "" {
		return errors.New("agent journal: a record without a run id")
	}
	body, rows, err := encodeJournal("agent journal", r.Run.ID, r, evs, func(ev *api.AgentEvent, b json.RawMessage) store.AgentEvent {
		return store.AgentEvent{Seq: ev.Seq, Event: b}
	})
	if err != nil {
		return err
	}
	created, updated := journalTimes(r.Run.Created, r.Run.Updated)
	jr := j.runs.get(r.Run.ID)
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if !jr.known {
		jr.known = true
		if row, err := j.s.cfg.Store.GetAgentRun(ctx, r.Owner.Tenant, r.Run.ID); err == nil {
			jr.state = row.State
		}
	}
	defer j.s.slow("store put agent run", time.Now())
	if err := j.s.cfg.Store.PutAgentRun(ctx, &store.AgentRun{ID: r.Run.ID, Tenant: r.Owner.Tenant, State: r.Run.State,
		Created: created, Updated: updated, Record: body}, rows...); err != nil {
		return err
	}
	for _, ev := range evs {
		switch ev.Type {
		case api.AgentEvToolResult:
			// The decision is known once the call was judged.
			if ev.Tool != nil {
				j.s.metrics.agentToolCalls.Inc(toolMetricName(ev.Tool.Name), ev.Tool.Decision)
			}
		case api.AgentEvModelResponse, api.AgentEvModelError:
			if jr.doc == nil {
				jr.doc, _ = agent.Compile([]byte(r.Document)) // it compiled at the start
			}
			j.s.record(modelCallEvent(r, jr.doc, &ev))
		}
	}
	if agentEnded(r.Run.State) && jr.state != r.Run.State {
		j.s.record(agentRunEvent(r))
	}
	jr.state = r.Run.State
	if agentEnded(r.Run.State) {
		j.runs.forget(r.Run.ID)
	}
	return nil
}

// toolMetricName is the tool label of a tool call named name: the name
// of one of the runner's tools, or "unknown" for any other, which the
// model made up (a label value of its own per name would let a model grow
// the metrics without bound).
func toolMetricName(name string) string {
	if slices.Contains(agent.ToolNames, name) {
		return name
	}
	return "unknown"
}

// agentEnded reports whether a run in state has ended (a resume may take
// it up again).
func agentEnded(state string) bool {
	return state == api.AgentSucceeded || state == api.AgentFailed || state == api.AgentCancelled
}

// agentRunEvent is the agent.run audit event of a run's end: its agents,
// turns, tool calls, usage and state; never the task, the answer or a
// conversation.
func agentRunEvent(r *agent.Record) audit.Event {
	run := &r.Run
	agents := make([]map[string]any, len(run.Agents))
	tools := 0
	for i, a := range run.Agents {
		agents[i] = map[string]any{"name": a.Name, "messages": a.Messages, "tool_calls": a.ToolCalls,
			"input_tokens": a.Usage.InputTokens, "output_tokens": a.Usage.OutputTokens}
		if a.Sandbox != "" {
			agents[i]["sandbox"] = a.Sandbox
		}
		tools += a.ToolCalls
	}
	ev := audit.Event{Kind: "agent.run", Tenant: r.Owner.Tenant, Actor: r.Owner.Actor,
		Request: mustJSON(map[string]any{"run": run.ID, "agent": run.Agent, "task_bytes": len(run.Task)}),
		Result: mustJSON(map[string]any{"state": run.State, "turns": run.Turns, "tool_calls": tools, "resumes": run.Resumes,
			"input_tokens": run.Usage.InputTokens, "output_tokens": run.Usage.OutputTokens, "agents": agents}),
		Error: auditText(run.Error)}
	if run.Ended != nil {
		ev.DurationMs = run.Ended.Sub(run.Created).Milliseconds()
	}
	return ev
}

// modelCallEvent is the model.call audit event of one model call of run
// r (doc its document, nil if it does not compile): the agent, the
// provider that answered, the alias and tags asked for, tokens, latency
// and, for a failure, its class and message; never a prompt, an answer
// or a key.
func modelCallEvent(r *agent.Record, doc *agent.Document, ev *api.AgentEvent) audit.Event {
	req := map[string]any{"run": r.Run.ID, "agent": ev.Agent}
	if doc != nil {
		if a := doc.Agent(ev.Agent); a != nil {
			req["alias"] = a.Model
			if len(a.Tags) > 0 {
				req["tags"] = a.Tags
			}
		}
	}
	res := map[string]any{}
	if ev.Provider != "" {
		res["provider"], res["model"] = ev.Provider, ev.Model
	}
	if ev.Usage != nil {
		res["input_tokens"], res["output_tokens"] = ev.Usage.InputTokens, ev.Usage.OutputTokens
	}
	out := audit.Event{Kind: "model.call", Tenant: r.Owner.Tenant, Actor: r.Owner.Actor,
		Request: mustJSON(req), DurationMs: ev.DurationMs}
	if ev.Type == api.AgentEvModelError {
		res["class"] = modelErrorClass(ev.Text)
		out.Error = auditText(ev.Text)
	}
	out.Result = mustJSON(res)
	return out
}

// modelErrorClass sorts a failed model call by its error's text (as
// model.ErrorClass does its attempts): what the engine journals of it.
func modelErrorClass(text string) string {
	switch {
	case strings.Contains(text, model.ErrNoProvider.Error()):
		return string(model.ClassNoProvider)
	case strings.Contains(text, "HTTP 429"):
		return string(model.ClassRateLimited)
	case strings.Contains(text, "HTTP 5"):
		return string(model.ClassServer)
	case strings.Contains(text, "HTTP 4"):
		return string(model.ClassClient)
	}
	for _, c := range []model.ErrorClass{model.ClassTimeout, model.ClassConnection, model.ClassProtocol, model.ClassCanceled} {
		if strings.Contains(text, ": "+string(c)) {
			return string(c)
		}
	}
	return "error"
}

// LoadRun returns tenant's run; a missing run, or another tenant's, wraps
// agent.ErrNotFound.
func (j *agJournal) LoadRun(ctx context.Context, tenant, id string) (*agent.Record, error) {
	row, err := j.s.cfg.Store.GetAgentRun(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("no agent run %q: %w", id, agent.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return decodeAgentRecord(row)
}

// Events returns a run's events after seq, up to limit.
func (j *agJournal) Events(ctx context.Context, run string, after uint64, limit int) ([]api.AgentEvent, error) {
	rows, err := j.s.cfg.Store.AgentEvents(ctx, run, after, limit)
	if err != nil {
		return nil, err
	}
	return decodeJournalEvents[api.AgentEvent]("agent journal", run, rows, func(r *store.AgentEvent) (uint64, json.RawMessage) {
		return r.Seq, r.Event
	})
}

// Unfinished returns every tenant's runs in state pending or running.
func (j *agJournal) Unfinished(ctx context.Context) ([]*agent.Record, error) {
	rows, err := j.s.cfg.Store.UnfinishedAgentRuns(ctx)
	if err != nil {
		return nil, err
	}
	return j.decodeRecords(rows), nil
}

// list returns a tenant's runs in state ("" for any), newest first.
func (j *agJournal) list(ctx context.Context, tenant, state string, limit int) ([]api.AgentRun, error) {
	rows, err := j.s.cfg.Store.ListAgentRuns(ctx, tenant, state, limit)
	if err != nil {
		return nil, err
	}
	recs := j.decodeRecords(rows)
	out := make([]api.AgentRun, len(recs))
	for i, r := range recs {
		out[i] = r.Run
	}
	return out, nil
}

// decodeAgentRecord is the runner's record of a row; the row's tenant is
// the owner's, whatever the record says.
func decodeAgentRecord(row *store.AgentRun) (*agent.Record, error) {
	var r agent.Record
	if err := json.Unmarshal(row.Record, &r); err != nil {
		return nil, fmt.Errorf("agent journal: the record of run %s: %w", row.ID, err)
	}
	r.Owner.Tenant = row.Tenant
	return &r, nil
}

// decodeRecords decodes rows; a row that does not decode is logged and
// left out (one bad row must not hide the others, nor stop a restart).
func (j *agJournal) decodeRecords(rows []store.AgentRun) []*agent.Record {
	return decodeJournalRecords(j.s.log, "an agent run's record does not decode: left out", rows, decodeAgentRecord,
		func(r *store.AgentRun) string { return r.ID })
}
