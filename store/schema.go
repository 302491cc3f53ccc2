package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations[i] brings the schema from version i to version i+1. Append to
// it; never edit a migration that has shipped.
var migrations = [...]string{
	// 1: sandboxes and their calls.
	`CREATE TABLE sandboxes (
		id              TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
		tenant          TEXT    NOT NULL,
		state           TEXT    NOT NULL CHECK (state IN ('running', 'stopped')),
		end_reason      TEXT    NOT NULL DEFAULT '',
		created_at      INTEGER NOT NULL, -- Unix nanoseconds, UTC
		last_active_at  INTEGER NOT NULL,
		ended_at        INTEGER,          -- NULL while running
		timeout_ms      INTEGER NOT NULL DEFAULT 0,
		idle_timeout_ms INTEGER NOT NULL DEFAULT 0,
		spec            TEXT,             -- JSON
		enforcement     TEXT,             -- JSON
		UNIQUE (id, tenant)               -- the parent key of calls
	) STRICT;
	CREATE INDEX sandboxes_tenant_state_created ON sandboxes (tenant, state, created_at);
	CREATE INDEX sandboxes_tenant_created ON sandboxes (tenant, created_at);
	CREATE INDEX sandboxes_stopped_ended ON sandboxes (ended_at) WHERE state = 'stopped';

	CREATE TABLE calls (
		id          TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
		sandbox     TEXT    NOT NULL,
		tenant      TEXT    NOT NULL, -- the sandbox's tenant, enforced by the foreign key
		kind        TEXT    NOT NULL,
		args        TEXT    NOT NULL, -- JSON array of strings
		started_at  INTEGER NOT NULL,
		ended_at    INTEGER,          -- NULL while running
		exit_code   INTEGER,          -- NULL until known
		exit_reason TEXT    NOT NULL DEFAULT '',
		result      TEXT,             -- JSON
		FOREIGN KEY (sandbox, tenant) REFERENCES sandboxes (id, tenant) ON DELETE CASCADE
	) STRICT;
	CREATE INDEX calls_sandbox ON calls (sandbox, started_at);`,

	// 2: captured output leaves the result: the row keeps byte counts, a
	// short preview of each stream (bytes, not JSON text) and a reference
	// to the daemon's output files. Rows written before move their output
	// out of result the same way (a preview of its first 4096 bytes).
	`ALTER TABLE calls ADD COLUMN stdout_bytes INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE calls ADD COLUMN stderr_bytes INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE calls ADD COLUMN stdout_preview BLOB;
	ALTER TABLE calls ADD COLUMN stderr_preview BLOB;
	ALTER TABLE calls ADD COLUMN output_ref TEXT NOT NULL DEFAULT '';
	UPDATE calls SET
		stdout_bytes = CAST(coalesce(json_extract(result, '$.stdout_bytes'), 0) AS INTEGER),
		stderr_bytes = CAST(coalesce(json_extract(result, '$.stderr_bytes'), 0) AS INTEGER),
		stdout_preview = substr(CAST(coalesce(json_extract(result, '$.stdout'), '') AS BLOB), 1, 4096),
		stderr_preview = substr(CAST(coalesce(json_extract(result, '$.stderr'), '') AS BLOB), 1, 4096),
		result = json_remove(result, '$.stdout', '$.stderr')
	WHERE result IS NOT NULL AND json_valid(result) AND json_type(result) = 'object';`,

	// 3: workflow runs (the engine's whole record of each, as JSON) and
	// their events, numbered per run (workflows.go). An event may be
	// written before its run's first record: no foreign key.
	`CREATE TABLE workflow_runs (
		id      TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
		tenant  TEXT    NOT NULL,
		name    TEXT    NOT NULL DEFAULT '',
		state   TEXT    NOT NULL CHECK (state <> ''),
		created INTEGER NOT NULL, -- Unix nanoseconds, UTC
		updated INTEGER NOT NULL,
		record  TEXT    NOT NULL  -- JSON
	) STRICT;
	CREATE INDEX workflow_runs_tenant_created ON workflow_runs (tenant, created);
	CREATE INDEX workflow_runs_tenant_state_created ON workflow_runs (tenant, state, created);
	CREATE INDEX workflow_runs_unfinished ON workflow_runs (state) WHERE state IN ('pending', 'running');

	CREATE TABLE workflow_events (
		run  TEXT    NOT NULL CHECK (run <> ''),
		seq  INTEGER NOT NULL CHECK (seq > 0),
		body TEXT    NOT NULL, -- JSON
		PRIMARY KEY (run, seq)
	) STRICT, WITHOUT ROWID;`,

	// 4: builds (builds.go): the daemon's record of each build, as JSON,
	// with the columns it is listed, recovered and pruned by.
	`CREATE TABLE builds (
		id      TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
		tenant  TEXT    NOT NULL,
		status  TEXT    NOT NULL CHECK (status <> ''),
		created INTEGER NOT NULL, -- Unix nanoseconds, UTC
		ended   INTEGER,          -- NULL while running
		record  TEXT    NOT NULL  -- JSON
	) STRICT;
	CREATE INDEX builds_tenant_created ON builds (tenant, created);
	CREATE INDEX builds_tenant_status_created ON builds (tenant, status, created);
	CREATE INDEX builds_running ON builds (status) WHERE status = 'running';
	CREATE INDEX builds_ended ON builds (ended) WHERE ended IS NOT NULL;`,

	// 5: agent runs (agents.go): the runner's whole record of each (the
	// run, its document, every agent's conversation), as JSON, and their
	// events, numbered per run.
	`CREATE TABLE agent_runs (
		id      TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
		tenant  TEXT    NOT NULL,
		state   TEXT    NOT NULL CHECK (state <> ''),
		created INTEGER NOT NULL, -- Unix nanoseconds, UTC
		updated INTEGER NOT NULL,
		record  TEXT    NOT NULL  -- JSON
	) STRICT;
	CREATE INDEX agent_runs_tenant_created ON agent_runs (tenant, created);
	CREATE INDEX agent_runs_tenant_state_created ON agent_runs (tenant, state, created);
	CREATE INDEX agent_runs_unfinished ON agent_runs (state) WHERE state IN ('pending', 'running');

	CREATE TABLE agent_events (
		run   TEXT    NOT NULL CHECK (run <> ''),
		seq   INTEGER NOT NULL CHECK (seq > 0),
		event TEXT    NOT NULL, -- JSON
		PRIMARY KEY (run, seq)
	) STRICT, WITHOUT ROWID;`,
}

// SchemaVersion is the schema version this code writes, stored in the
// database's PRAGMA user_version.
const SchemaVersion = len(migrations)

// migrate brings the database to SchemaVersion in one transaction, or
// refuses a newer one.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("migrate: read user_version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("schema version %d, this moat knows up to %d (use a newer moat): %w",
			v, len(migrations), ErrSchemaTooNew)
	}
	if v < 0 {
		return fmt.Errorf("migrate: bad schema version %d", v)
	}
	if v == len(migrations) {
		return nil
	}
	for i := v; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("migrate to version %d: %w", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", i+1)); err != nil {
			return fmt.Errorf("migrate to version %d: %w", i+1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
