package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Build is one build's row. The store keeps the daemon's record of the
// build whole (Record) and, beside it, the columns it lists, recovers
// and prunes by.
type Build struct {
	// ID identifies the build across all tenants; it must not be empty.
	ID string
	// Tenant owns the build; it is matched exactly, as for sandboxes.
	Tenant string
	// Status is the build's status (api.BuildRunning …); it must not be
	// empty. Builds in status "running" are the unfinished ones
	// (RunningBuilds).
	Status string
	// Created must be set; Ended is nil while the build runs.
	Created time.Time
	Ended   *time.Time
	// Record is the daemon's record of the build; it must be valid JSON.
	Record json.RawMessage
}

// buildRunning is the status of a build in flight (api.BuildRunning,
// which the store does not import).
const buildRunning = "running"

const buildCols = `id, tenant, status, created, ended, record`

// SaveBuild inserts b, or replaces every field of the build with its ID,
// as one durable write (group-committed with other writes, on disk when
// it returns nil). It refuses to move an existing build to another
// tenant.
func (s *Store) SaveBuild(ctx context.Context, b *Build) error {
	if b == nil {
		return errors.New("store: save build: nil build")
	}
	if err := s.saveBuild(ctx, b); err != nil {
		return fmt.Errorf("store: save build %q: %w", b.ID, writeErr(s.Dir(), err))
	}
	return nil
}

func (s *Store) saveBuild(ctx context.Context, b *Build) error {
	if b.ID == "" {
		return errors.New("empty id")
	}
	if b.Status == "" {
		return errors.New("empty status")
	}
	created, err := nanos(b.Created, "created")
	if err != nil {
		return err
	}
	ended, err := nullNanos(b.Ended, "ended")
	if err != nil {
		return err
	}
	if b.Record == nil || !json.Valid(b.Record) {
		return errors.New("record is not valid JSON")
	}
	return s.inBatch(ctx, func(tx *sql.Tx) error {
		return unit(tx, "save_build", func() error {
			res, err := tx.Exec(`INSERT INTO builds (`+buildCols+`) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET status = excluded.status, created = excluded.created,
					ended = excluded.ended, record = excluded.record
				WHERE builds.tenant = excluded.tenant`,
				b.ID, b.Tenant, b.Status, created, ended, string(b.Record))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				return errors.New("the id belongs to another tenant")
			}
			return nil
		})
	})
}

func scanBuild(r scanner, b *Build) error {
	var created int64
	var ended sql.NullInt64
	var record string
	if err := r.Scan(&b.ID, &b.Tenant, &b.Status, &created, &ended, &record); err != nil {
		return err
	}
	b.Created, b.Ended, b.Record = fromNanos(created), fromNullNanos(ended), json.RawMessage(record)
	return nil
}

// GetBuild returns the build id of tenant, or an error wrapping
// ErrNotFound if there is none (or it belongs to another tenant).
func (s *Store) GetBuild(ctx context.Context, tenant, id string) (*Build, error) {
	if id == "" {
		return nil, errors.New("store: get build: empty id")
	}
	return getRow(s.r.QueryRowContext(ctx, `SELECT `+buildCols+` FROM builds WHERE id = ? AND tenant = ?`, id, tenant),
		scanBuild, "build", id)
}

// ListBuilds returns the tenant's builds in status ("" for any), newest
// (by Created) first, at most limit of them (see DefaultLimit and
// MaxLimit).
func (s *Store) ListBuilds(ctx context.Context, tenant, status string, limit int) ([]Build, error) {
	return listTenant(ctx, s, "builds", buildCols, "status", tenant, status, limit, scanBuild, "builds")
}

// DeleteBuild removes the build id of tenant; a build that is not there
// (or another tenant's) is an error wrapping ErrNotFound.
func (s *Store) DeleteBuild(ctx context.Context, tenant, id string) error {
	var n int64
	err := s.inBatch(ctx, func(tx *sql.Tx) error {
		return unit(tx, "delete_build", func() error {
			res, err := tx.Exec(`DELETE FROM builds WHERE id = ? AND tenant = ?`, id, tenant)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("store: delete build %q: %w", id, writeErr(s.Dir(), err))
	}
	if n == 0 {
		return fmt.Errorf("store: delete build %q: %w", id, ErrNotFound)
	}
	return nil
}

// RunningBuilds returns every build, of any tenant, in status "running",
// oldest first: what a daemon that stopped left in flight.
func (s *Store) RunningBuilds(ctx context.Context) ([]Build, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+buildCols+` FROM builds WHERE status = ?
		ORDER BY created, rowid`, buildRunning)
	out, err := scanRows(rows, err, scanBuild)
	if err != nil {
		return nil, fmt.Errorf("store: list running builds: %w", err)
	}
	return out, nil
}

// ExpiredBuilds returns at most limit finished builds, of any tenant,
// that ended before endedBefore, oldest end first (see DefaultLimit and
// MaxLimit): what the daemon's retention removes.
func (s *Store) ExpiredBuilds(ctx context.Context, endedBefore time.Time, limit int) ([]Build, error) {
	before, err := nanos(endedBefore, "ended-before time")
	if err != nil {
		return nil, fmt.Errorf("store: list expired builds: %w", err)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+buildCols+` FROM builds
		WHERE ended IS NOT NULL AND ended < ? ORDER BY ended, rowid LIMIT ?`, before, clampLimit(limit))
	out, err := scanRows(rows, err, scanBuild)
	if err != nil {
		return nil, fmt.Errorf("store: list expired builds: %w", err)
	}
	return out, nil
}
