package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/store"
	"github.com/moat-sandbox/moat/workflow/engine"
)

// wfJournal is the engine's Journal over the store: a run's record is one
// row of workflow_runs (the engine.Record as JSON), its events rows of
// workflow_events.
//
// It also writes the audit of a run's progress, from the records the
// engine saves (not from its events, so that it does not depend on their
// order): a workflow.step event each time a step reaches an end state
// (succeeded, failed, skipped, cancelled; again after a resume), and a
// workflow.run event each time the run does. What it compares a record
// with is the last one it saved, or, for the first save of a run since
// the daemon started, the one in the store: a restart audits nothing
// twice.
type wfJournal struct {
	s *Service

	// runs are the runs saved since the start that have not ended, with
	// what their last record said.
	runs journalRuns[journaledRun]
}

var _ engine.Journal = (*wfJournal)(nil)

// journaledRun is what the audit compares a run's next record with.
type journaledRun struct {
	mu    sync.Mutex // serializes the saves of the run
	known bool       // states holds the last saved record's
	state string
	steps map[string]string // step id → state
}

func newWFJournal(s *Service) *wfJournal {
	return &wfJournal{s: s}
}

// SaveRun writes r's row (insert or replace) with evs, in one write, and
// audits the ends it records.
func (j *wfJournal) SaveRun(ctx context.Context, r *engine.Record, evs []api.WorkflowEvent) error {
	if r == nil || r.Run.ID == "" {
		return errors.New("workflow journal: a record without a run id")
	}
	body, rows, err := encodeJournal("workflow journal", r.Run.ID, r, evs, func(ev *api.WorkflowEvent, b json.RawMessage) store.WorkflowEvent {
		return store.WorkflowEvent{Seq: ev.Seq, Body: b}
	})
	if err != nil {
		return err
	}
	created, updated := journalTimes(r.Run.Created, r.Run.Updated)
	jr := j.runs.get(r.Run.ID)
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if !jr.known {
		j.loadStates(ctx, r.Owner.Tenant, r.Run.ID, jr)
	}
	defer j.s.slow("store put workflow run", time.Now())
	if err := j.s.cfg.Store.PutWorkflowRun(ctx, &store.WorkflowRun{ID: r.Run.ID, Tenant: r.Owner.Tenant, Name: r.Run.Name,
		State: r.Run.State, Created: created, Updated: updated, Record: body}, rows...); err != nil {
		return err
	}
	j.auditEnds(r, jr)
	if api.RunEnded(r.Run.State) {
		j.runs.forget(r.Run.ID)
	}
	return nil
}

// loadStates fills jr from the run's record in the store, if any.
func (j *wfJournal) loadStates(ctx context.Context, tenant, id string, jr *journaledRun) {
	jr.known, jr.steps = true, map[string]string{}
	row, err := j.s.cfg.Store.GetWorkflowRun(ctx, tenant, id)
	if err != nil {
		return // a new run
	}
	var prev engine.Record
	if json.Unmarshal(row.Record, &prev) != nil {
		return
	}
	jr.state = prev.Run.State
	for _, st := range prev.Run.Steps {
		jr.steps[st.ID] = st.State
	}
}

// maxAuditArtifacts bounds the artifacts a workflow.step event lists.
const maxAuditArtifacts = 128

// auditEnds writes the audit events of the ends r records that jr had not
// seen, and updates jr.
func (j *wfJournal) auditEnds(r *engine.Record, jr *journaledRun) {
	run := &r.Run
	for i := range run.Steps {
		st := &run.Steps[i]
		if api.StepEnded(st.State) && jr.steps[st.ID] != st.State {
			j.s.record(stepEvent(r.Owner, run.ID, st))
		}
		jr.steps[st.ID] = st.State
	}
	if api.RunEnded(run.State) && jr.state != run.State {
		j.s.record(runEvent(r.Owner, run))
	}
	jr.state = run.State
}

// stepEvent is the workflow.step audit event of a step's end.
func stepEvent(o engine.Owner, run string, st *api.WorkflowStep) audit.Event {
	res := map[string]any{"state": st.State, "attempts": len(st.Attempts)}
	if st.Result != nil {
		res["exit_code"], res["exit_reason"] = st.Result.ExitCode, st.Result.ExitReason
	}
	if st.Snapshot != "" {
		res["snapshot"] = st.Snapshot
	}
	if len(st.Outputs) > 0 {
		arts := st.Outputs
		if len(arts) > maxAuditArtifacts {
			res["artifacts_truncated"] = len(arts)
			arts = arts[:maxAuditArtifacts]
		}
		list := make([]map[string]any, len(arts))
		for i, a := range arts {
			list[i] = map[string]any{"path": auditText(a.Path), "bytes": a.Bytes, "sha256": a.SHA256}
		}
		res["artifacts"] = list
	}
	if n := len(st.Attempts); n > 0 && st.Attempts[n-1].Build != "" {
		// A build step's build (audited itself as kind "build").
		res["build"] = st.Attempts[n-1].Build
	}
	if n := len(st.Attempts); n > 0 && st.Attempts[n-1].Agent != "" {
		// An agent step's agent run (its model and tool calls audited
		// themselves).
		res["agent"] = st.Attempts[n-1].Agent
	}
	ev := audit.Event{Kind: "workflow.step", Tenant: o.Tenant, Actor: o.Actor,
		Request: mustJSON(map[string]any{"run": run, "step": st.ID, "attempt": st.Attempt}), Result: mustJSON(res),
		Error: auditText(st.Error)}
	if n := len(st.Attempts); n > 0 {
		ev.Sandbox = st.Attempts[n-1].Sandbox
	}
	if st.Started != nil && st.Ended != nil {
		ev.DurationMs = st.Ended.Sub(*st.Started).Milliseconds()
	}
	return ev
}

// runEvent is the workflow.run audit event of a run's end.
func runEvent(o engine.Owner, run *api.WorkflowRun) audit.Event {
	counts := map[string]int{}
	for _, st := range run.Steps {
		counts[st.State]++
	}
	ev := audit.Event{Kind: "workflow.run", Tenant: o.Tenant, Actor: o.Actor,
		Request: mustJSON(map[string]any{"run": run.ID, "name": run.Name}),
		Result:  mustJSON(map[string]any{"state": run.State, "steps": counts, "resumes": run.Resumes}),
		Error:   auditText(run.Error)}
	if run.Ended != nil {
		ev.DurationMs = run.Ended.Sub(run.Created).Milliseconds()
	}
	return ev
}

// Events returns a run's events after seq, up to limit.
func (j *wfJournal) Events(ctx context.Context, run string, after uint64, limit int) ([]api.WorkflowEvent, error) {
	rows, err := j.s.cfg.Store.WorkflowEvents(ctx, run, after, limit)
	if err != nil {
		return nil, err
	}
	return decodeJournalEvents[api.WorkflowEvent]("workflow journal", run, rows, func(r *store.WorkflowEvent) (uint64, json.RawMessage) {
		return r.Seq, r.Body
	})
}

// LoadRun returns tenant's run; a missing run, or another tenant's, wraps
// engine.ErrNotFound.
func (j *wfJournal) LoadRun(ctx context.Context, tenant, run string) (*engine.Record, error) {
	row, err := j.s.cfg.Store.GetWorkflowRun(ctx, tenant, run)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("no run %q: %w", run, engine.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return decodeRecord(row)
}

// ListRuns lists a tenant's runs, newest first.
func (j *wfJournal) ListRuns(ctx context.Context, tenant, state string, limit int) ([]*engine.Record, error) {
	rows, err := j.s.cfg.Store.ListWorkflowRuns(ctx, tenant, state, limit)
	if err != nil {
		return nil, err
	}
	return j.decodeRecords(rows), nil
}

// Unfinished returns every tenant's runs in state pending or running.
func (j *wfJournal) Unfinished(ctx context.Context) ([]*engine.Record, error) {
	rows, err := j.s.cfg.Store.UnfinishedWorkflowRuns(ctx)
	if err != nil {
		return nil, err
	}
	return j.decodeRecords(rows), nil
}

// decodeRecord is the engine's record of a row; the row's tenant is the
// owner's, whatever the record says.
func decodeRecord(row *store.WorkflowRun) (*engine.Record, error) {
	var r engine.Record
	if err := json.Unmarshal(row.Record, &r); err != nil {
		return nil, fmt.Errorf("workflow journal: the record of run %s: %w", row.ID, err)
	}
	r.Owner.Tenant = row.Tenant
	return &r, nil
}

// decodeRecords decodes rows; a row that does not decode is logged and
// left out (one bad row must not hide the others, nor stop a restart).
func (j *wfJournal) decodeRecords(rows []store.WorkflowRun) []*engine.Record {
	return decodeJournalRecords(j.s.log, "a workflow run's record does not decode: left out", rows, decodeRecord,
		func(r *store.WorkflowRun) string { return r.ID })
}
