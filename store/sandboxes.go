package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Sandbox states, as stored in [Sandbox.State].
const (
	StateRunning = "running"
	StateStopped = "stopped"
)

// Sandbox is one sandbox's row.
type Sandbox struct {
	// ID identifies the sandbox across all tenants; it must not be empty.
	ID string
	// Tenant owns the sandbox; it is matched exactly ("" is a tenant like any other).
	Tenant string
	// State is StateRunning or StateStopped.
	State string
	// EndReason is "" while running; e.g. "deleted", "idle_timeout",
	// "timeout", "lost", "init_exited", "shutdown" once stopped.
	EndReason string
	// CreatedAt is when the sandbox was created; it must be set.
	CreatedAt time.Time
	// LastActiveAt is when the sandbox last ran a call; zero is stored as CreatedAt.
	LastActiveAt time.Time
	// EndedAt is when the sandbox stopped; nil while running.
	EndedAt *time.Time
	// TimeoutMs is the sandbox's maximum age in milliseconds.
	TimeoutMs int64
	// IdleTimeoutMs ends the sandbox after this long without a call.
	IdleTimeoutMs int64
	// Spec is the create request as the daemon received it (already free of
	// secrets); it may be nil, else it must be valid JSON.
	Spec json.RawMessage
	// Enforcement is what the sandbox's confinement achieved; it may be nil,
	// else it must be valid JSON.
	Enforcement json.RawMessage
}

// PutSandbox inserts sb, or replaces every field of the sandbox with its ID.
// The sandbox's calls are kept. It refuses to move an existing sandbox to
// another tenant, and checks that a running sandbox has no EndReason or
// EndedAt and a stopped one has both.
func (s *Store) PutSandbox(ctx context.Context, sb *Sandbox) error {
	if sb == nil {
		return errors.New("store: put sandbox: nil sandbox")
	}
	if err := s.putSandbox(ctx, sb); err != nil {
		return fmt.Errorf("store: put sandbox %q: %w", sb.ID, writeErr(s.Dir(), err))
	}
	return nil
}

func (s *Store) putSandbox(ctx context.Context, sb *Sandbox) error {
	if sb.ID == "" {
		return errors.New("empty id")
	}
	switch sb.State {
	case StateRunning:
		if sb.EndReason != "" || sb.EndedAt != nil {
			return errors.New("a running sandbox has no end reason or end time")
		}
	case StateStopped:
		if sb.EndReason == "" || sb.EndedAt == nil {
			return errors.New("a stopped sandbox needs an end reason and an end time")
		}
	default:
		return fmt.Errorf("state %q is neither %q nor %q", sb.State, StateRunning, StateStopped)
	}
	created, err := nanos(sb.CreatedAt, "created_at")
	if err != nil {
		return err
	}
	lastActive := created
	if !sb.LastActiveAt.IsZero() {
		if lastActive, err = nanos(sb.LastActiveAt, "last_active_at"); err != nil {
			return err
		}
	}
	ended, err := nullNanos(sb.EndedAt, "ended_at")
	if err != nil {
		return err
	}
	spec, err := jsonText(sb.Spec, "spec")
	if err != nil {
		return err
	}
	enf, err := jsonText(sb.Enforcement, "enforcement")
	if err != nil {
		return err
	}
	res, err := s.st.putSandbox.ExecContext(ctx, sb.ID, sb.Tenant, sb.State, sb.EndReason,
		created, lastActive, ended, sb.TimeoutMs, sb.IdleTimeoutMs, spec, enf)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return errors.New("the id belongs to another tenant")
	}
	return nil
}

// EndSandbox marks the sandbox stopped for reason (which must not be empty),
// with its last activity at lastActive (if not zero) and its end at at. It
// returns an error wrapping ErrNotFound if there is no such sandbox. Ending a
// sandbox that is already stopped changes nothing (the first reason and times
// stay) and returns nil.
func (s *Store) EndSandbox(ctx context.Context, id, reason string, lastActive, at time.Time) error {
	if err := s.endSandbox(ctx, id, reason, lastActive, at); err != nil {
		return fmt.Errorf("store: end sandbox %q: %w", id, writeErr(s.Dir(), err))
	}
	return nil
}

func (s *Store) endSandbox(ctx context.Context, id, reason string, lastActive, at time.Time) error {
	if id == "" {
		return errors.New("empty id")
	}
	if reason == "" {
		return errors.New("empty reason")
	}
	end, err := nanos(at, "end time")
	if err != nil {
		return err
	}
	var last sql.NullInt64
	if !lastActive.IsZero() {
		if last, err = nullNanos(&lastActive, "last active time"); err != nil {
			return err
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.StmtContext(ctx, s.st.endSandbox).ExecContext(ctx, reason, last, end, id)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		var one int
		err := tx.StmtContext(ctx, s.st.sandboxExists).QueryRowContext(ctx, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		// Already stopped: keep the first end.
	}
	return tx.Commit()
}

const sandboxCols = `id, tenant, state, end_reason, created_at, last_active_at, ended_at,
	timeout_ms, idle_timeout_ms, spec, enforcement`

func scanSandbox(r scanner, sb *Sandbox) error {
	var created, last int64
	var ended sql.NullInt64
	var spec, enf []byte
	if err := r.Scan(&sb.ID, &sb.Tenant, &sb.State, &sb.EndReason, &created, &last, &ended,
		&sb.TimeoutMs, &sb.IdleTimeoutMs, &spec, &enf); err != nil {
		return err
	}
	sb.CreatedAt = fromNanos(created)
	sb.LastActiveAt = fromNanos(last)
	sb.EndedAt = fromNullNanos(ended)
	sb.Spec = spec
	sb.Enforcement = enf
	return nil
}

// GetSandbox returns the sandbox id of tenant, or an error wrapping
// ErrNotFound if there is none (or it belongs to another tenant).
func (s *Store) GetSandbox(ctx context.Context, tenant, id string) (*Sandbox, error) {
	if id == "" {
		return nil, errors.New("store: get sandbox: empty id")
	}
	return getRow(s.st.getSandbox.QueryRowContext(ctx, id, tenant), scanSandbox, "sandbox", id)
}

// ListSandboxes returns the tenant's sandboxes in state (StateRunning,
// StateStopped, or "" for any), newest (by CreatedAt) first, at most limit of
// them (see DefaultLimit and MaxLimit).
func (s *Store) ListSandboxes(ctx context.Context, tenant, state string, limit int) ([]Sandbox, error) {
	limit = clampLimit(limit)
	var rows *sql.Rows
	var err error
	switch state {
	case "":
		rows, err = s.st.listSandboxes.QueryContext(ctx, tenant, limit)
	case StateRunning, StateStopped:
		rows, err = s.st.listSandboxesState.QueryContext(ctx, tenant, state, limit)
	default:
		return nil, fmt.Errorf("store: list sandboxes: unknown state %q", state)
	}
	out, err := scanRows(rows, err, scanSandbox)
	if err != nil {
		return nil, fmt.Errorf("store: list sandboxes: %w", err)
	}
	return out, nil
}

// Lost names a sandbox that ReconcileRunning marked lost.
type Lost struct{ ID, Tenant string }

// ReconcileRunning marks every running sandbox stopped with reason
// ReasonLost and EndedAt at, and returns them (in no particular order).
// The daemon calls it at start, before it creates any sandbox, to account
// for those a crash left behind.
func (s *Store) ReconcileRunning(ctx context.Context, at time.Time) ([]Lost, error) {
	end, err := nanos(at, "end time")
	if err != nil {
		return nil, fmt.Errorf("store: reconcile sandboxes: %w", writeErr(s.Dir(), err))
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("store: reconcile sandboxes: %w", writeErr(s.Dir(), err))
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `UPDATE sandboxes SET state = 'stopped', end_reason = ?, ended_at = ?
		WHERE state = 'running' RETURNING id, tenant`, ReasonLost, end)
	if err != nil {
		return nil, fmt.Errorf("store: reconcile sandboxes: %w", writeErr(s.Dir(), err))
	}
	ids := []Lost{}
	for rows.Next() {
		var l Lost
		if err := rows.Scan(&l.ID, &l.Tenant); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: reconcile sandboxes: %w", writeErr(s.Dir(), err))
		}
		ids = append(ids, l)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("store: reconcile sandboxes: %w", writeErr(s.Dir(), err))
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("store: reconcile sandboxes: %w", writeErr(s.Dir(), err))
	}
	return ids, nil
}

// PruneStopped deletes at most max stopped sandboxes, oldest end first, that
// ended before endedBefore, together with their calls, and returns how many
// sandboxes it deleted. max <= 0 deletes nothing. Each call is one
// transaction, during which other writes wait: prune in batches (a few
// hundred) until it returns less than max.
func (s *Store) PruneStopped(ctx context.Context, endedBefore time.Time, max int) (int, error) {
	if max <= 0 {
		return 0, nil
	}
	before, err := nanos(endedBefore, "ended-before time")
	if err != nil {
		return 0, fmt.Errorf("store: prune sandboxes: %w", writeErr(s.Dir(), err))
	}
	res, err := s.st.pruneStopped.ExecContext(ctx, before, max)
	if err != nil {
		return 0, fmt.Errorf("store: prune sandboxes: %w", writeErr(s.Dir(), err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("store: prune sandboxes: %w", writeErr(s.Dir(), err))
	}
	return int(n), nil
}
