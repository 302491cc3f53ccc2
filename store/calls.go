package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sqlite3 "modernc.org/sqlite/lib"
)

// Call is one call's row.
type Call struct {
	// ID identifies the call across all sandboxes, e.g. "sb-0123/7"; it must not be empty.
	ID string
	// Sandbox is the id of the sandbox the call ran in; it must exist and
	// belong to Tenant.
	Sandbox string
	// Tenant owns the call (and its sandbox).
	Tenant string
	// Kind is "exec" or "start"; it must not be empty.
	Kind string
	// Args is the command line, stored as a JSON array.
	Args []string
	// StartedAt is when the call started; it must be set.
	StartedAt time.Time
	// EndedAt is when the call ended; nil while it runs.
	EndedAt *time.Time
	// ExitCode is the call's exit code; nil while it runs or if it never got one.
	ExitCode *int
	// ExitReason says why the call ended ("lost" after a daemon crash).
	ExitReason string
	// Result is the full result JSON; it may be nil, else it must be valid JSON.
	// It should not hold the captured output: that goes in Output.
	Result json.RawMessage
	// Output is what the row keeps of the call's captured output.
	Output CallOutput
}

// CallOutput is what the store keeps of a call's captured output: byte
// counts, a short preview of each stream, stored as bytes (a NUL costs one
// byte), and a reference to files that hold more, kept by the daemon for
// a retention period.
type CallOutput struct {
	StdoutBytes, StderrBytes     int64
	StdoutPreview, StderrPreview []byte
	// Ref names the call's output files, relative to the daemon's output
	// directory ("" for none).
	Ref string
}

// PutCall inserts c, or replaces every field of the call with its ID. The
// sandbox c.Sandbox must exist and belong to c.Tenant, else the error wraps
// ErrNotFound; a call cannot be moved to another sandbox or tenant.
func (s *Store) PutCall(ctx context.Context, c *Call) error {
	if c == nil {
		return errors.New("store: put call: nil call")
	}
	if err := s.putCall(ctx, c); err != nil {
		return fmt.Errorf("store: put call %q: %w", c.ID, writeErr(s.Dir(), err))
	}
	return nil
}

func (s *Store) putCall(ctx context.Context, c *Call) error {
	if c.ID == "" {
		return errors.New("empty id")
	}
	if c.Sandbox == "" {
		return errors.New("empty sandbox id")
	}
	if c.Kind == "" {
		return errors.New("empty kind")
	}
	started, err := nanos(c.StartedAt, "started_at")
	if err != nil {
		return err
	}
	ended, err := nullNanos(c.EndedAt, "ended_at")
	if err != nil {
		return err
	}
	args, err := json.Marshal(c.Args)
	if err != nil {
		return err
	}
	var code sql.NullInt64
	if c.ExitCode != nil {
		code = sql.NullInt64{Int64: int64(*c.ExitCode), Valid: true}
	}
	result, err := jsonText(c.Result, "result")
	if err != nil {
		return err
	}
	// The common case is a new call: a plain INSERT, the cheapest statement
	// (this driver parses every statement on every run). The foreign key
	// (sandbox, tenant) refuses a sandbox that is not the tenant's.
	return s.inBatch(ctx, func(tx *sql.Tx) error {
		o := &c.Output
		_, err := tx.Stmt(s.st.insertCall).Exec(c.ID, c.Sandbox, c.Tenant, c.Kind, string(args),
			started, ended, code, c.ExitReason, result,
			o.StdoutBytes, o.StderrBytes, o.StdoutPreview, o.StderrPreview, o.Ref)
		switch sqliteCode(err) {
		case 0:
			return nil
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("sandbox %q: %w", c.Sandbox, ErrNotFound)
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			// Replace the call, if it is this sandbox's.
		default:
			return err
		}
		res, err := tx.Stmt(s.st.replaceCall).Exec(c.Kind, string(args), started, ended, code,
			c.ExitReason, result, o.StdoutBytes, o.StderrBytes, o.StdoutPreview, o.StderrPreview, o.Ref,
			c.ID, c.Sandbox, c.Tenant)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("the id belongs to a call of another sandbox")
		}
		return nil
	})
}

// FinishCall records the end of call id: its end time, exit code, reason and
// result (nil or valid JSON), replacing any earlier end. It returns an error
// wrapping ErrNotFound if there is no such call.
func (s *Store) FinishCall(ctx context.Context, id string, at time.Time, exitCode int, reason string, result json.RawMessage) error {
	return s.FinishCallOutput(ctx, id, at, exitCode, reason, result, nil)
}

// FinishCallOutput is FinishCall that also records what is kept of the
// call's output (nil: nothing).
func (s *Store) FinishCallOutput(ctx context.Context, id string, at time.Time, exitCode int, reason string, result json.RawMessage, out *CallOutput) error {
	if err := s.finishCall(ctx, id, at, exitCode, reason, result, out); err != nil {
		return fmt.Errorf("store: finish call %q: %w", id, writeErr(s.Dir(), err))
	}
	return nil
}

func (s *Store) finishCall(ctx context.Context, id string, at time.Time, exitCode int, reason string, result json.RawMessage, out *CallOutput) error {
	if id == "" {
		return errors.New("empty id")
	}
	end, err := nanos(at, "end time")
	if err != nil {
		return err
	}
	res, err := jsonText(result, "result")
	if err != nil {
		return err
	}
	return s.inBatch(ctx, func(tx *sql.Tx) error {
		if out == nil {
			out = &CallOutput{}
		}
		r, err := tx.Stmt(s.st.finishCall).Exec(end, exitCode, reason, res,
			out.StdoutBytes, out.StderrBytes, out.StdoutPreview, out.StderrPreview, out.Ref, id)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		return nil
	})
}

const callCols = `id, sandbox, tenant, kind, args, started_at, ended_at, exit_code, exit_reason, result,
	stdout_bytes, stderr_bytes, stdout_preview, stderr_preview, output_ref`

func scanCall(r scanner, c *Call) error {
	var args []byte
	var started int64
	var ended, code sql.NullInt64
	var result []byte
	if err := r.Scan(&c.ID, &c.Sandbox, &c.Tenant, &c.Kind, &args, &started, &ended, &code,
		&c.ExitReason, &result, &c.Output.StdoutBytes, &c.Output.StderrBytes, &c.Output.StdoutPreview,
		&c.Output.StderrPreview, &c.Output.Ref); err != nil {
		return err
	}
	if err := json.Unmarshal(args, &c.Args); err != nil {
		return fmt.Errorf("call %q: args: %w", c.ID, err)
	}
	c.StartedAt = fromNanos(started)
	c.EndedAt = fromNullNanos(ended)
	if code.Valid {
		v := int(code.Int64)
		c.ExitCode = &v
	}
	c.Result = result
	return nil
}

// GetCall returns the call id of tenant, or an error wrapping ErrNotFound if
// there is none (or it belongs to another tenant).
func (s *Store) GetCall(ctx context.Context, tenant, id string) (*Call, error) {
	if id == "" {
		return nil, errors.New("store: get call: empty id")
	}
	return getRow(s.st.getCall.QueryRowContext(ctx, id, tenant), scanCall, "call", id)
}

// ListCalls returns the calls of the tenant's sandbox, oldest (by StartedAt)
// first, at most limit of them (see DefaultLimit and MaxLimit). A sandbox
// that does not exist or is another tenant's has no calls: the result is
// empty, not an error.
func (s *Store) ListCalls(ctx context.Context, tenant, sandbox string, limit int) ([]Call, error) {
	if sandbox == "" {
		return nil, errors.New("store: list calls: empty sandbox id")
	}
	rows, err := s.st.listCalls.QueryContext(ctx, sandbox, tenant, clampLimit(limit))
	out, err := scanRows(rows, err, scanCall)
	if err != nil {
		return nil, fmt.Errorf("store: list calls of %q: %w", sandbox, err)
	}
	return out, nil
}

// ReconcileCalls ends every call that has no EndedAt: EndedAt becomes at,
// ExitReason ReasonLost, and ExitCode stays nil. It returns how many calls
// it ended. The daemon calls it at start, with ReconcileRunning.
func (s *Store) ReconcileCalls(ctx context.Context, at time.Time) (int, error) {
	end, err := nanos(at, "end time")
	if err != nil {
		return 0, fmt.Errorf("store: reconcile calls: %w", writeErr(s.Dir(), err))
	}
	res, err := s.w.ExecContext(ctx, `UPDATE calls SET ended_at = ?, exit_reason = ? WHERE ended_at IS NULL`,
		end, ReasonLost)
	if err != nil {
		return 0, fmt.Errorf("store: reconcile calls: %w", writeErr(s.Dir(), err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("store: reconcile calls: %w", writeErr(s.Dir(), err))
	}
	return int(n), nil
}
