// Package store is the control-plane daemon's durable record of sandboxes and
// the calls run in them, kept in one SQLite database file through the pure-Go
// driver modernc.org/sqlite (no cgo).
//
// # What it holds
//
// Two tables: sandboxes (one row per sandbox, running or stopped, with the
// create request as the daemon received it) and calls (one row per exec or
// start call, with its arguments and, once it ended, its exit code, reason and
// full result). Every row carries its tenant, and every read takes the caller's
// tenant and matches it exactly: a row of another tenant is reported as
// [ErrNotFound], never returned. Calls belong to their sandbox and are deleted
// with it.
//
// Times are stored as INTEGER nanoseconds since the Unix epoch and returned in
// UTC, so only times between the years 1678 and 2262 can be stored; JSON
// documents (specs, enforcement, results, arguments) are stored as TEXT.
//
// # Durability
//
// The database runs in WAL mode with synchronous=FULL: every method that
// writes commits before it returns, and a write that returned nil survives the
// process being killed (kill -9) and, as far as the file system honours fsync,
// a crash of the machine. After a crash the daemon calls
// [Store.ReconcileRunning] and [Store.ReconcileCalls] to mark what was running
// as lost.
//
// SQLite lets one connection write at a time. A Store writes through a single
// connection (so writers from many goroutines queue in Go instead of failing
// with SQLITE_BUSY) and reads through a small pool of read-only connections,
// which WAL lets run while a write is in progress. busy_timeout=5000 covers
// another process holding the database. Call writes, the hot path of a busy
// daemon, are group-committed: those that queue while a commit runs share
// the next transaction and its fsync (batch.go).
//
// # Schema versioning
//
// The schema version is kept in PRAGMA user_version. [Open] applies, in one
// transaction, every migration the file has not seen yet, so a fresh file is
// brought to [SchemaVersion] and an old one upgraded. A file whose version is
// newer than [SchemaVersion] (written by a newer moat) is refused with an
// error wrapping [ErrSchemaTooNew], and left untouched.
package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// Sandbox states, as stored in [Sandbox.State].
const (
	StateRunning = "running"
	StateStopped = "stopped"
)

// ReasonLost is the end reason [Store.ReconcileRunning] gives to sandboxes and
// [Store.ReconcileCalls] gives to calls that were running when the daemon
// went away.
const ReasonLost = "lost"

// Limits of the list methods: a limit of zero or less means DefaultLimit, and
// a limit above MaxLimit is lowered to it.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// ErrNotFound is returned (wrapped) when a sandbox or call does not exist or
// belongs to another tenant. Test for it with errors.Is.
var ErrNotFound = errors.New("not found")

// ErrSchemaTooNew is returned (wrapped) by [Open] when the database was
// written by a newer version of moat whose schema this code does not know.
var ErrSchemaTooNew = errors.New("database schema is newer than this moat supports")

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

// Store is an open database. Its methods are safe for concurrent use by many
// goroutines.
type Store struct {
	path      string  // absolute path of the database file
	w, r      *sql.DB // writer (one connection) and readers
	st        stmts
	closeOnce sync.Once
	closeErr  error

	batch     chan *batchOp // group-committed writes (batch.go)
	stopBatch chan struct{}
	batchDone chan struct{}
}

// Open opens the database at path, creating it with mode 0600 if it does not
// exist (its directory must exist; an existing file keeps its mode), applies
// the pending migrations, and sets journal_mode=WAL, synchronous=FULL,
// busy_timeout=5000 and foreign_keys=ON on every connection. It refuses a
// database whose schema is newer than [SchemaVersion] with an error wrapping
// [ErrSchemaTooNew].
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("store: open: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	dir := filepath.Dir(abs)
	if err := create(abs); err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, writeErr(dir, err))
	}

	s := &Store{path: abs}
	// The writer: one connection, kept open for the Store's life, whose
	// transactions take the write lock up front (BEGIN IMMEDIATE) so that
	// they never fail half-way for want of it.
	s.w, err = sql.Open("sqlite", dsn(abs,
		"busy_timeout(5000)", "journal_mode(WAL)", "synchronous(FULL)",
		"foreign_keys(1)", "journal_size_limit(67108864)")+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)

	if err := s.setup(ctx); err != nil {
		s.w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, writeErr(dir, err))
	}

	// The readers: WAL lets them read the last commit while the writer
	// writes; query_only keeps them from writing by mistake.
	s.r, err = sql.Open("sqlite", dsn(abs,
		"busy_timeout(5000)", "synchronous(FULL)", "foreign_keys(1)", "query_only(1)"))
	if err != nil {
		s.w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	const readers = 4
	s.r.SetMaxOpenConns(readers)
	s.r.SetMaxIdleConns(readers)
	s.r.SetConnMaxLifetime(0)
	s.r.SetConnMaxIdleTime(0)

	if err := s.st.prepare(ctx, s.w, s.r); err != nil {
		s.st.close()
		s.r.Close()
		s.w.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, writeErr(dir, err))
	}
	s.startBatcher()
	return s, nil
}

// create creates the database file if it does not exist, so that it gets
// mode 0600 (SQLite would use 0644; it gives its -wal and -shm files the mode
// of the database), and syncs its directory so that the new name survives a
// crash. An existing file must be writable.
func create(abs string) error {
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(abs, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(abs))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// dsn is the modernc.org/sqlite data source name of the file at abs with
// the given pragmas run on every new connection.
func dsn(abs string, pragmas ...string) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	u := url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}
	return u.String()
}

// setup checks the writer's pragmas and migrates the schema.
func (s *Store) setup(ctx context.Context) error {
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal_mode: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("journal_mode is %q, not wal (does the file system support WAL?)", mode)
	}
	var syncMode int
	if err := s.w.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncMode); err != nil {
		return fmt.Errorf("read synchronous: %w", err)
	}
	if syncMode != 2 { // FULL
		return fmt.Errorf("synchronous is %d, not FULL (2)", syncMode)
	}
	return migrate(ctx, s.w)
}

// Close closes the database: calls in progress finish, later ones fail.
// Calling Close again returns the first result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stopBatch)
		<-s.batchDone
		s.st.close()
		errR := s.r.Close()
		// Let SQLite refresh its planner statistics (cheap, and a no-op
		// when nothing changed); the last connection to close checkpoints
		// the WAL into the database.
		_, _ = s.w.Exec("PRAGMA optimize")
		errW := s.w.Close()
		if err := errors.Join(errR, errW); err != nil {
			s.closeErr = fmt.Errorf("store: close: %w", err)
		}
	})
	return s.closeErr
}

// Bounds of the times that fit in int64 nanoseconds.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// nanos converts t for storage; what names the field in errors.
func nanos(t time.Time, what string) (int64, error) {
	if t.IsZero() {
		return 0, fmt.Errorf("%s is not set", what)
	}
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("%s %v is out of range (years 1678 to 2262)", what, t)
	}
	return t.UnixNano(), nil
}

// nullNanos converts an optional time for storage.
func nullNanos(t *time.Time, what string) (sql.NullInt64, error) {
	if t == nil {
		return sql.NullInt64{}, nil
	}
	n, err := nanos(*t, what)
	if err != nil {
		return sql.NullInt64{}, err
	}
	return sql.NullInt64{Int64: n, Valid: true}, nil
}

// fromNanos converts a stored time back, in UTC.
func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// fromNullNanos converts a stored optional time back.
func fromNullNanos(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromNanos(n.Int64)
	return &t
}

// jsonText converts an optional JSON document for storage as TEXT (NULL for nil).
func jsonText(j json.RawMessage, what string) (sql.NullString, error) {
	if j == nil {
		return sql.NullString{}, nil
	}
	if !json.Valid(j) {
		return sql.NullString{}, fmt.Errorf("%s is not valid JSON", what)
	}
	return sql.NullString{String: string(j), Valid: true}, nil
}

// clampLimit applies DefaultLimit and MaxLimit.
func clampLimit(limit int) int {
	if limit <= 0 {
		return DefaultLimit
	}
	return min(limit, MaxLimit)
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

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

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

// getRow scans the one row a query returned; no row is ErrNotFound.
func getRow[T any](row *sql.Row, scan func(scanner, *T) error, what, id string) (*T, error) {
	v := new(T)
	err := scan(row, v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: get %s %q: %w", what, id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get %s %q: %w", what, id, err)
	}
	return v, nil
}

// scanRows scans every row of a query (its error included); the result
// is empty, not nil, when there are none.
func scanRows[T any](rows *sql.Rows, err error, scan func(scanner, *T) error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
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

// sqliteCode is the extended SQLite result code of err, 0 if err is nil,
// -1 if err is not from SQLite.
func sqliteCode(err error) int {
	if err == nil {
		return 0
	}
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return -1
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

// stmts are the prepared statements: database/sql prepares each once per
// connection and keeps it. (modernc.org/sqlite v1.40 still compiles the SQL
// on every run; later versions keep the compiled statement.)
type stmts struct {
	all []*sql.Stmt

	// on the writer
	putSandbox, endSandbox, sandboxExists, pruneStopped, insertCall, replaceCall, finishCall *sql.Stmt
	// on the readers
	getSandbox, listSandboxes, listSandboxesState, getCall, listCalls *sql.Stmt
}

func (st *stmts) prepare(ctx context.Context, w, r *sql.DB) error {
	for _, p := range []struct {
		db    *sql.DB
		dst   **sql.Stmt
		query string
	}{
		{w, &st.putSandbox, `INSERT INTO sandboxes (` + sandboxCols + `)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET
				state = excluded.state, end_reason = excluded.end_reason,
				created_at = excluded.created_at, last_active_at = excluded.last_active_at,
				ended_at = excluded.ended_at, timeout_ms = excluded.timeout_ms,
				idle_timeout_ms = excluded.idle_timeout_ms, spec = excluded.spec,
				enforcement = excluded.enforcement
			WHERE sandboxes.tenant = excluded.tenant`},
		{w, &st.endSandbox, `UPDATE sandboxes SET state = 'stopped', end_reason = ?,
			last_active_at = coalesce(?, last_active_at), ended_at = ?
			WHERE id = ? AND state = 'running'`},
		{w, &st.sandboxExists, `SELECT 1 FROM sandboxes WHERE id = ?`},
		{w, &st.pruneStopped, `DELETE FROM sandboxes WHERE rowid IN (
			SELECT rowid FROM sandboxes WHERE state = 'stopped' AND ended_at < ?
			ORDER BY ended_at LIMIT ?)`},
		{w, &st.insertCall, `INSERT INTO calls (` + callCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{w, &st.replaceCall, `UPDATE calls SET kind = ?, args = ?, started_at = ?, ended_at = ?,
			exit_code = ?, exit_reason = ?, result = ?, stdout_bytes = ?, stderr_bytes = ?,
			stdout_preview = ?, stderr_preview = ?, output_ref = ? WHERE id = ? AND sandbox = ? AND tenant = ?`},
		{w, &st.finishCall, `UPDATE calls SET ended_at = ?, exit_code = ?, exit_reason = ?, result = ?,
			stdout_bytes = ?, stderr_bytes = ?, stdout_preview = ?, stderr_preview = ?, output_ref = ?
			WHERE id = ?`},

		{r, &st.getSandbox, `SELECT ` + sandboxCols + ` FROM sandboxes WHERE id = ? AND tenant = ?`},
		{r, &st.listSandboxes, `SELECT ` + sandboxCols + ` FROM sandboxes WHERE tenant = ?
			ORDER BY created_at DESC, rowid DESC LIMIT ?`},
		{r, &st.listSandboxesState, `SELECT ` + sandboxCols + ` FROM sandboxes WHERE tenant = ? AND state = ?
			ORDER BY created_at DESC, rowid DESC LIMIT ?`},
		{r, &st.getCall, `SELECT ` + callCols + ` FROM calls WHERE id = ? AND tenant = ?`},
		{r, &st.listCalls, `SELECT ` + callCols + ` FROM calls WHERE sandbox = ? AND tenant = ?
			ORDER BY started_at, rowid LIMIT ?`},
	} {
		stmt, err := p.db.PrepareContext(ctx, p.query)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", p.query, err)
		}
		*p.dst = stmt
		st.all = append(st.all, stmt)
	}
	return nil
}

func (st *stmts) close() {
	for _, s := range st.all {
		s.Close()
	}
	st.all = nil
}
