package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// WorkflowRun is one workflow run's row. The store keeps the engine's
// record of the run whole (Record) and, beside it, the columns it lists
// and filters by.
type WorkflowRun struct {
	// ID identifies the run across all tenants; it must not be empty.
	ID string
	// Tenant owns the run; it is matched exactly, as for sandboxes.
	Tenant string
	// Name is the run's name in listings.
	Name string
	// State is the run's state (api.RunPending … api.RunCancelled); it
	// must not be empty. Runs in state "pending" or "running" are the
	// unfinished ones (UnfinishedWorkflowRuns).
	State string
	// Created and Updated must be set.
	Created, Updated time.Time
	// Record is the engine's record of the run; it must be valid JSON.
	Record json.RawMessage
}

// WorkflowEvent is one event of a run.
type WorkflowEvent struct {
	// Seq numbers the run's events from 1.
	Seq uint64
	// Body is the event; it must be valid JSON.
	Body json.RawMessage
}

// Unfinished workflow run states (the api package's, which the store does
// not import).
const (
	workflowPending = "pending"
	workflowRunning = "running"
)

const workflowCols = `id, tenant, name, state, created, updated, record`

// PutWorkflowRun inserts r, or replaces every field of the run with its
// ID, and adds evs to its events, in one transaction (one fsync for a
// transition of a run: its state and what happened); the run's earlier
// events are kept. It refuses to move an existing run to another tenant.
// The write is group-committed with other writes and on disk when it
// returns nil.
func (s *Store) PutWorkflowRun(ctx context.Context, r *WorkflowRun, evs ...WorkflowEvent) error {
	if r == nil {
		return errors.New("store: put workflow run: nil run")
	}
	if err := s.putWorkflowRun(ctx, r, evs); err != nil {
		return fmt.Errorf("store: put workflow run %q: %w", r.ID, writeErr(s.Dir(), err))
	}
	return nil
}

func (s *Store) putWorkflowRun(ctx context.Context, r *WorkflowRun, evs []WorkflowEvent) error {
	if r.ID == "" {
		return errors.New("empty id")
	}
	if r.State == "" {
		return errors.New("empty state")
	}
	created, err := nanos(r.Created, "created")
	if err != nil {
		return err
	}
	updated, err := nanos(r.Updated, "updated")
	if err != nil {
		return err
	}
	if r.Record == nil || !json.Valid(r.Record) {
		return errors.New("record is not valid JSON")
	}
	if err := checkWorkflowEvents(evs); err != nil {
		return err
	}
	return s.inBatch(ctx, func(tx *sql.Tx) error {
		return unit(tx, "put_run", func() error {
			res, err := tx.Exec(`INSERT INTO workflow_runs (`+workflowCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET name = excluded.name, state = excluded.state,
					created = excluded.created, updated = excluded.updated, record = excluded.record
				WHERE workflow_runs.tenant = excluded.tenant`,
				r.ID, r.Tenant, r.Name, r.State, created, updated, string(r.Record))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				return errors.New("the id belongs to another tenant")
			}
			return insertWorkflowEvents(tx, r.ID, evs)
		})
	})
}

// unit runs fn inside a SAVEPOINT of tx: one write of a group commit that
// fails part-way leaves nothing of itself, and the other writes of the
// batch commit.
func unit(tx *sql.Tx, name string, fn func() error) error {
	if _, err := tx.Exec(`SAVEPOINT ` + name); err != nil {
		return err
	}
	if err := fn(); err != nil {
		_, _ = tx.Exec(`ROLLBACK TO ` + name)
		_, _ = tx.Exec(`RELEASE ` + name)
		return err
	}
	_, err := tx.Exec(`RELEASE ` + name)
	return err
}

// AppendWorkflowEvents adds events to the run run, in one transaction,
// without its record (the workflow journal writes both together with
// PutWorkflowRun). The run's row need not exist, so the caller checks the
// run is its tenant's before it reads them (GetWorkflowRun). An event
// whose Seq the run already has replaces it: the last write of a number
// wins.
func (s *Store) AppendWorkflowEvents(ctx context.Context, run string, evs []WorkflowEvent) error {
	if err := s.appendWorkflowEvents(ctx, run, evs); err != nil {
		return fmt.Errorf("store: append events of workflow run %q: %w", run, writeErr(s.Dir(), err))
	}
	return nil
}

func (s *Store) appendWorkflowEvents(ctx context.Context, run string, evs []WorkflowEvent) error {
	if run == "" {
		return errors.New("empty run id")
	}
	if len(evs) == 0 {
		return nil
	}
	if err := checkWorkflowEvents(evs); err != nil {
		return err
	}
	return s.inBatch(ctx, func(tx *sql.Tx) error { return insertWorkflowEvents(tx, run, evs) })
}

// checkWorkflowEvents refuses events a run cannot keep.
func checkWorkflowEvents(evs []WorkflowEvent) error {
	for _, ev := range evs {
		if ev.Seq == 0 || ev.Seq > 1<<63-1 {
			return fmt.Errorf("event sequence number %d is out of range", ev.Seq)
		}
		if !json.Valid(ev.Body) {
			return fmt.Errorf("event %d is not valid JSON", ev.Seq)
		}
	}
	return nil
}

// insertWorkflowEvents writes evs of run in tx, as one unit.
func insertWorkflowEvents(tx *sql.Tx, run string, evs []WorkflowEvent) error {
	if len(evs) == 0 {
		return nil
	}
	return unit(tx, "events", func() error {
		for _, ev := range evs {
			_, err := tx.Exec(`INSERT INTO workflow_events (run, seq, body) VALUES (?, ?, ?)
				ON CONFLICT (run, seq) DO UPDATE SET body = excluded.body`, run, int64(ev.Seq), string(ev.Body))
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func scanWorkflowRun(r scanner, w *WorkflowRun) error {
	var created, updated int64
	var record string
	if err := r.Scan(&w.ID, &w.Tenant, &w.Name, &w.State, &created, &updated, &record); err != nil {
		return err
	}
	w.Created, w.Updated, w.Record = fromNanos(created), fromNanos(updated), json.RawMessage(record)
	return nil
}

// GetWorkflowRun returns the run id of tenant, or an error wrapping
// ErrNotFound if there is none (or it belongs to another tenant).
func (s *Store) GetWorkflowRun(ctx context.Context, tenant, id string) (*WorkflowRun, error) {
	if id == "" {
		return nil, errors.New("store: get workflow run: empty id")
	}
	return getRow(s.r.QueryRowContext(ctx, `SELECT `+workflowCols+` FROM workflow_runs WHERE id = ? AND tenant = ?`, id, tenant),
		scanWorkflowRun, "workflow run", id)
}

// ListWorkflowRuns returns the tenant's runs in state ("" for any), newest
// (by Created) first, at most limit of them (see DefaultLimit and
// MaxLimit).
func (s *Store) ListWorkflowRuns(ctx context.Context, tenant, state string, limit int) ([]WorkflowRun, error) {
	return listTenant(ctx, s, "workflow_runs", workflowCols, "state", tenant, state, limit, scanWorkflowRun, "workflow runs")
}

// UnfinishedWorkflowRuns returns every run, of any tenant, in state
// "pending" or "running", and every run whose record (JSON) has a
// non-empty "garbage" list (an ended run with snapshots still to delete),
// oldest first: what a daemon that stopped left in flight, which its
// successor takes up again.
func (s *Store) UnfinishedWorkflowRuns(ctx context.Context) ([]WorkflowRun, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+workflowCols+` FROM workflow_runs
		WHERE state IN (?, ?) OR json_array_length(record, '$.garbage') > 0
		ORDER BY created, rowid`, workflowPending, workflowRunning)
	out, err := scanRows(rows, err, scanWorkflowRun)
	if err != nil {
		return nil, fmt.Errorf("store: list unfinished workflow runs: %w", err)
	}
	return out, nil
}

// WorkflowEvents returns the events of run after the sequence number
// after, in order, at most limit of them (see DefaultLimit and MaxLimit).
// The caller has checked that the run is its tenant's (GetWorkflowRun).
func (s *Store) WorkflowEvents(ctx context.Context, run string, after uint64, limit int) ([]WorkflowEvent, error) {
	if after > 1<<63-1 {
		return []WorkflowEvent{}, nil
	}
	rows, err := s.r.QueryContext(ctx, `SELECT seq, body FROM workflow_events WHERE run = ? AND seq > ?
		ORDER BY seq LIMIT ?`, run, int64(after), clampLimit(limit))
	out, err := scanRows(rows, err, func(r scanner, ev *WorkflowEvent) error {
		var seq int64
		var body string
		if err := r.Scan(&seq, &body); err != nil {
			return err
		}
		ev.Seq, ev.Body = uint64(seq), json.RawMessage(body)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: workflow events of %q: %w", run, err)
	}
	return out, nil
}
