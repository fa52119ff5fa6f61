package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// goneRecords is the store.GoneRecords view of db: the gone table.
type goneRecords struct{ db *DB }

var _ store.GoneRecords = goneRecords{}

// Gone returns the view of the gone table.
func (db *DB) Gone() store.GoneRecords { return goneRecords{db} }

// Record stores g, replacing what an earlier sandbox of the same name
// in the same tenant left.
func (v goneRecords) Record(ctx context.Context, g sandbox.Gone) error {
	if g.Name == "" {
		return errors.New("sqlite: record gone: empty name")
	}
	at, err := formatTime(g.At)
	if err != nil {
		return fmt.Errorf("sqlite: record gone %q: %w", g.Name, err)
	}
	_, err = v.db.w.ExecContext(ctx,
		`INSERT INTO gone (name, id, tenant, owner, reason, last_status, at) VALUES (?, ?, ?, ?, ?, ?, ?)
		 ON CONFLICT (tenant, name) DO UPDATE SET id = excluded.id, owner = excluded.owner,
		   reason = excluded.reason, last_status = excluded.last_status, at = excluded.at`,
		g.Name, g.ID, g.Tenant, g.Owner, g.Reason, g.Last, at)
	if err != nil {
		return fmt.Errorf("sqlite: record gone %q: %w", g.Name, writeErr(err))
	}
	return nil
}

// Get returns what Record stored for tenant's name, or
// store.ErrNotFound.
func (v goneRecords) Get(ctx context.Context, tenant, name string) (sandbox.Gone, error) {
	g := sandbox.Gone{Name: name, Tenant: tenant}
	var at string
	err := v.db.r.QueryRowContext(ctx, `SELECT id, owner, reason, last_status, at FROM gone WHERE tenant = ? AND name = ?`, tenant, name).
		Scan(&g.ID, &g.Owner, &g.Reason, &g.Last, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Gone{}, fmt.Errorf("sqlite: gone %q of %q: %w", name, tenant, store.ErrNotFound)
	}
	if err == nil {
		g.At, err = parseTime(at)
	}
	if err != nil {
		return sandbox.Gone{}, fmt.Errorf("sqlite: get gone %q: %w", name, err)
	}
	return g, nil
}

// List returns tenant's records ("" for every tenant's), the newest
// first.
func (v goneRecords) List(ctx context.Context, tenant string) ([]sandbox.Gone, error) {
	rows, err := v.db.r.QueryContext(ctx,
		`SELECT name, id, tenant, owner, reason, last_status, at FROM gone WHERE ? = '' OR tenant = ? ORDER BY at DESC, tenant, name`, tenant, tenant)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list gone: %w", err)
	}
	defer rows.Close()
	out := []sandbox.Gone{}
	for rows.Next() {
		var g sandbox.Gone
		var at string
		if err := rows.Scan(&g.Name, &g.ID, &g.Tenant, &g.Owner, &g.Reason, &g.Last, &at); err != nil {
			return nil, fmt.Errorf("sqlite: list gone: %w", err)
		}
		if g.At, err = parseTime(at); err != nil {
			return nil, fmt.Errorf("sqlite: list gone: %w", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list gone: %w", err)
	}
	return out, nil
}

// Forget deletes the record of tenant's name, if any, and every record
// older than before when before is not zero.
func (v goneRecords) Forget(ctx context.Context, tenant, name string, before time.Time) error {
	if name != "" {
		if _, err := v.db.w.ExecContext(ctx, `DELETE FROM gone WHERE tenant = ? AND name = ?`, tenant, name); err != nil {
			return fmt.Errorf("sqlite: forget gone %q: %w", name, writeErr(err))
		}
	}
	if !before.IsZero() {
		b, err := formatTime(before)
		if err != nil {
			return fmt.Errorf("sqlite: forget gone: %w", err)
		}
		if _, err := v.db.w.ExecContext(ctx, `DELETE FROM gone WHERE at < ?`, b); err != nil {
			return fmt.Errorf("sqlite: forget gone before %s: %w", b, writeErr(err))
		}
	}
	return nil
}
