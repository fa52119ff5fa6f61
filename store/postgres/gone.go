package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// goneRecords is the store.GoneRecords view of db: the gone table.
type goneRecords struct{ db *DB }

var _ store.GoneRecords = goneRecords{}

// Gone returns the view of the gone table.
func (db *DB) Gone() store.GoneRecords { return goneRecords{db} }

// Record stores g, replacing what an earlier sandbox of the same name in
// the same tenant left.
func (v goneRecords) Record(ctx context.Context, g sandbox.Gone) error {
	if g.Name == "" {
		return errors.New("postgres: record gone: empty name")
	}
	if err := checkTimes(g.At); err != nil {
		return fmt.Errorf("postgres: record gone %q: %w", g.Name, err)
	}
	if _, err := v.db.exec(ctx,
		`INSERT INTO gone (name, id, tenant, owner, reason, last_status, at) VALUES ($1, $2, $3, $4, $5, $6, $7)
		 ON CONFLICT (tenant, name) DO UPDATE SET id = excluded.id, owner = excluded.owner,
		   reason = excluded.reason, last_status = excluded.last_status, at = excluded.at`,
		g.Name, g.ID, g.Tenant, g.Owner, g.Reason, g.Last, g.At); err != nil {
		return fmt.Errorf("postgres: record gone %q: %w", g.Name, writeErr(err))
	}
	return nil
}

// Get returns what Record stored for tenant's name, or store.ErrNotFound.
func (v goneRecords) Get(ctx context.Context, tenant, name string) (sandbox.Gone, error) {
	scan := func(row pgx.Row) (sandbox.Gone, error) {
		g := sandbox.Gone{Name: name, Tenant: tenant}
		err := row.Scan(&g.ID, &g.Owner, &g.Reason, &g.Last, &g.At)
		return g, err
	}
	return getOne(ctx, v.db, fmt.Sprintf("gone %q of %q", name, tenant), scan,
		`SELECT id, owner, reason, last_status, at FROM gone WHERE tenant = $1 AND name = $2`, tenant, name)
}

// List returns tenant's records ("" for every tenant's), the newest
// first.
func (v goneRecords) List(ctx context.Context, tenant string) ([]sandbox.Gone, error) {
	return queryAll(ctx, v.db, "list gone", func(row pgx.Row) (sandbox.Gone, error) {
		var g sandbox.Gone
		err := row.Scan(&g.Name, &g.ID, &g.Tenant, &g.Owner, &g.Reason, &g.Last, &g.At)
		return g, err
	}, `SELECT name, id, tenant, owner, reason, last_status, at FROM gone WHERE $1 = '' OR tenant = $1 ORDER BY at DESC, tenant, name`, tenant)
}

// Forget deletes the record of tenant's name, if any, and every record
// older than before when before is not zero, in one statement.
func (v goneRecords) Forget(ctx context.Context, tenant, name string, before time.Time) error {
	if name == "" && before.IsZero() {
		return nil
	}
	if err := checkTimes(before); err != nil {
		return fmt.Errorf("postgres: forget gone: %w", err)
	}
	if _, err := v.db.exec(ctx,
		`DELETE FROM gone WHERE ($2 <> '' AND tenant = $1 AND name = $2) OR at < $3`,
		tenant, name, nullTime(before)); err != nil {
		return fmt.Errorf("postgres: forget gone %q: %w", name, err)
	}
	return nil
}
