package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/store"
)

// stepColumns are selected in this order; scanStep follows it.
const stepColumns = `tenant, key, size_bytes, created_at, used_at`

// buildSteps is the store.BuildSteps view of db: the build_steps table.
type buildSteps struct{ db *DB }

var _ store.BuildSteps = buildSteps{}

// BuildSteps returns the view of the build_steps table.
func (db *DB) BuildSteps() store.BuildSteps { return buildSteps{db} }

// Put inserts step, or moves a stored entry's used_at and size.
func (v buildSteps) Put(ctx context.Context, step store.BuildStep) error {
	if step.Tenant == "" || step.Key == "" {
		return fmt.Errorf("postgres: put build step %q of %q: tenant and key must not be empty", step.Key, step.Tenant)
	}
	created := step.CreatedAt
	if created.IsZero() {
		created = step.UsedAt
	}
	err := checkTimes(created, step.UsedAt)
	if err == nil {
		_, err = v.db.exec(ctx,
			`INSERT INTO build_steps (`+stepColumns+`) VALUES ($1, $2, $3, $4, $5)
			 ON CONFLICT (tenant, key) DO UPDATE SET size_bytes = excluded.size_bytes, used_at = excluded.used_at`,
			step.Tenant, step.Key, step.Size, created, step.UsedAt)
	}
	if err != nil {
		return fmt.Errorf("postgres: put build step %q of %q: %w", step.Key, step.Tenant, writeErr(err))
	}
	return nil
}

// List returns tenant's entries, least recently used first.
func (v buildSteps) List(ctx context.Context, tenant string) ([]store.BuildStep, error) {
	return queryAll(ctx, v.db, fmt.Sprintf("list build steps of %q", tenant), scanStep,
		`SELECT `+stepColumns+` FROM build_steps WHERE tenant = $1 ORDER BY used_at, key`, tenant)
}

// All returns every entry, by tenant, least recently used first.
func (v buildSteps) All(ctx context.Context) ([]store.BuildStep, error) {
	return queryAll(ctx, v.db, "list build steps", scanStep,
		`SELECT `+stepColumns+` FROM build_steps ORDER BY tenant, used_at, key`)
}

// Delete removes tenant's entry key, or returns store.ErrNotFound.
func (v buildSteps) Delete(ctx context.Context, tenant, key string) error {
	return v.db.execOne(ctx, "delete build step", fmt.Sprintf("%q of %q", key, tenant),
		`DELETE FROM build_steps WHERE tenant = $1 AND key = $2`, tenant, key)
}

// scanStep reads one row of stepColumns.
func scanStep(row pgx.Row) (store.BuildStep, error) {
	var st store.BuildStep
	err := row.Scan(&st.Tenant, &st.Key, &st.Size, &st.CreatedAt, &st.UsedAt)
	return st, err
}
