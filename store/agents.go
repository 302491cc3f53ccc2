package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// AgentRun is one agent run's row. The store keeps the runner's record of
// the run whole (Record: the run, its owner, its document and every
// agent's conversation) and, beside it, the columns it lists, counts and
// recovers by.
type AgentRun struct {
	// ID identifies the run across all tenants; it must not be empty.
	ID string
	// Tenant owns the run; it is matched exactly, as for sandboxes.
	Tenant string
	// State is the run's state (api.AgentPending … api.AgentCancelled);
	// it must not be empty. Runs in state "pending" or "running" are the
	// unfinished ones (UnfinishedAgentRuns, CountUnfinishedAgentRuns).
	State string
	// Created and Updated must be set.
	Created, Updated time.Time
	// Record is the runner's record of the run; it must be valid JSON.
	Record json.RawMessage
}

// AgentEvent is one event of an agent run.
type AgentEvent struct {
	// Seq numbers the run's events from 1.
	Seq uint64
	// Event is the event; it must be valid JSON.
	Event json.RawMessage
}

// Unfinished agent run states (the api package's, which the store does
// not import).
const (
	agentPending = "pending"
	agentRunning = "running"
)

const agentCols = `id, tenant, state, created, updated, record`

// PutAgentRun inserts r, or replaces every field of the run with its ID,
// and adds evs to its events, in one transaction (one durable write for a
// transition of a run: its record and what happened); the run's earlier
// events are kept, and an event whose Seq the run has already replaces
// it. It refuses to move an existing run to another tenant. The write is
// group-committed with other writes and on disk when it returns nil.
func (s *Store) PutAgentRun(ctx context.Context, r *AgentRun, evs ...AgentEvent) error {
	if r == nil {
		return errors.New("store: put agent run: nil run")
	}
	if err := s.putAgentRun(ctx, r, evs); err != nil {
		return fmt.Errorf("store: put agent run %q: %w", r.ID, writeErr(s.Dir(), err))
	}
	return nil
}

func (s *Store) putAgentRun(ctx context.Context, r *AgentRun, evs []AgentEvent) error {
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
	for _, ev := range evs {
		if ev.Seq == 0 || ev.Seq > 1<<63-1 {
			return fmt.Errorf("event sequence number %d is out of range", ev.Seq)
		}
		if !json.Valid(ev.Event) {
			return fmt.Errorf("event %d is not valid JSON", ev.Seq)
		}
	}
	return s.inBatch(ctx, func(tx *sql.Tx) error {
		return unit(tx, "put_agent_run", func() error {
			res, err := tx.Exec(`INSERT INTO agent_runs (`+agentCols+`) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET state = excluded.state, created = excluded.created,
					updated = excluded.updated, record = excluded.record
				WHERE agent_runs.tenant = excluded.tenant`,
				r.ID, r.Tenant, r.State, created, updated, string(r.Record))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				return errors.New("the id belongs to another tenant")
			}
			for _, ev := range evs {
				_, err := tx.Exec(`INSERT INTO agent_events (run, seq, event) VALUES (?, ?, ?)
					ON CONFLICT (run, seq) DO UPDATE SET event = excluded.event`, r.ID, int64(ev.Seq), string(ev.Event))
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
}

func scanAgentRun(r scanner, a *AgentRun) error {
	var created, updated int64
	var record string
	if err := r.Scan(&a.ID, &a.Tenant, &a.State, &created, &updated, &record); err != nil {
		return err
	}
	a.Created, a.Updated, a.Record = fromNanos(created), fromNanos(updated), json.RawMessage(record)
	return nil
}

// GetAgentRun returns the run id of tenant, or an error wrapping
// ErrNotFound if there is none (or it belongs to another tenant).
func (s *Store) GetAgentRun(ctx context.Context, tenant, id string) (*AgentRun, error) {
	if id == "" {
		return nil, errors.New("store: get agent run: empty id")
	}
	return getRow(s.r.QueryRowContext(ctx, `SELECT `+agentCols+` FROM agent_runs WHERE id = ? AND tenant = ?`, id, tenant),
		scanAgentRun, "agent run", id)
}

// ListAgentRuns returns the tenant's runs in state ("" for any), newest
// (by Created) first, at most limit of them (see DefaultLimit and
// MaxLimit).
func (s *Store) ListAgentRuns(ctx context.Context, tenant, state string, limit int) ([]AgentRun, error) {
	return listTenant(ctx, s, "agent_runs", agentCols, "state", tenant, state, limit, scanAgentRun, "agent runs")
}

// UnfinishedAgentRuns returns every run, of any tenant, in state
// "pending" or "running", oldest first: what a daemon that stopped left
// in flight, which its successor takes up again.
func (s *Store) UnfinishedAgentRuns(ctx context.Context) ([]AgentRun, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+agentCols+` FROM agent_runs
		WHERE state IN (?, ?) ORDER BY created, rowid`, agentPending, agentRunning)
	out, err := scanRows(rows, err, scanAgentRun)
	if err != nil {
		return nil, fmt.Errorf("store: list unfinished agent runs: %w", err)
	}
	return out, nil
}

// CountUnfinishedAgentRuns counts tenant's runs in state "pending" or
// "running".
func (s *Store) CountUnfinishedAgentRuns(ctx context.Context, tenant string) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM agent_runs WHERE tenant = ? AND state IN (?, ?)`,
		tenant, agentPending, agentRunning).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: count agent runs of %q: %w", tenant, err)
	}
	return n, nil
}

// AgentEvents returns the events of run after the sequence number after,
// in order, at most limit of them (see DefaultLimit and MaxLimit). The
// caller has checked that the run is its tenant's (GetAgentRun).
func (s *Store) AgentEvents(ctx context.Context, run string, after uint64, limit int) ([]AgentEvent, error) {
	if after > 1<<63-1 {
		return []AgentEvent{}, nil
	}
	rows, err := s.r.QueryContext(ctx, `SELECT seq, event FROM agent_events WHERE run = ? AND seq > ?
		ORDER BY seq LIMIT ?`, run, int64(after), clampLimit(limit))
	out, err := scanRows(rows, err, func(r scanner, ev *AgentEvent) error {
		var seq int64
		var body string
		if err := r.Scan(&seq, &body); err != nil {
			return err
		}
		ev.Seq, ev.Event = uint64(seq), json.RawMessage(body)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: agent events of %q: %w", run, err)
	}
	return out, nil
}
