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
// with it. Two more keep workflow runs (workflows.go): workflow_runs, one row
// per run with the workflow engine's record of it, and workflow_events, the
// run's numbered events. One more keeps builds (builds.go): one row per
// build with the daemon's record of it.
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

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

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

// listTenant lists tenant's rows of table (cols, scanned by scan) whose
// column stateCol is state ("" for any), newest (by created) first, at
// most limit of them (see DefaultLimit and MaxLimit); what names them in
// errors.
func listTenant[T any](ctx context.Context, s *Store, table, cols, stateCol, tenant, state string, limit int,
	scan func(scanner, *T) error, what string) ([]T, error) {
	q := `SELECT ` + cols + ` FROM ` + table + ` WHERE tenant = ?`
	args := []any{tenant}
	if state != "" {
		q += ` AND ` + stateCol + ` = ?`
		args = append(args, state)
	}
	q += ` ORDER BY created DESC, rowid DESC LIMIT ?`
	args = append(args, clampLimit(limit))
	rows, err := s.r.QueryContext(ctx, q, args...)
	out, err := scanRows(rows, err, scan)
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", what, err)
	}
	return out, nil
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
