package sqlite

import (
	"context"
	"fmt"

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
		return fmt.Errorf("sqlite: put build step %q of %q: tenant and key must not be empty", step.Key, step.Tenant)
	}
	created := step.CreatedAt
	if created.IsZero() {
		created = step.UsedAt
	}
	cts, err := formatTime(created)
	if err == nil {
		var uts string
		if uts, err = formatTime(step.UsedAt); err == nil {
			_, err = v.db.w.ExecContext(ctx,
				`INSERT INTO build_steps (`+stepColumns+`) VALUES (?, ?, ?, ?, ?)
				 ON CONFLICT (tenant, key) DO UPDATE SET size_bytes = excluded.size_bytes, used_at = excluded.used_at`,
				step.Tenant, step.Key, step.Size, cts, uts)
			err = writeErr(err)
		}
	}
	if err != nil {
		return fmt.Errorf("sqlite: put build step %q of %q: %w", step.Key, step.Tenant, err)
	}
	return nil
}

// List returns tenant's entries, least recently used first.
func (v buildSteps) List(ctx context.Context, tenant string) ([]store.BuildStep, error) {
	return queryAll(ctx, v.db, fmt.Sprintf("list build steps of %q", tenant), scanStep,
		`SELECT `+stepColumns+` FROM build_steps WHERE tenant = ? ORDER BY used_at, key`, tenant)
}

// All returns every entry, by tenant, least recently used first.
func (v buildSteps) All(ctx context.Context) ([]store.BuildStep, error) {
	return queryAll(ctx, v.db, "list build steps", scanStep,
		`SELECT `+stepColumns+` FROM build_steps ORDER BY tenant, used_at, key`)
}

// Delete removes tenant's entry key, or returns store.ErrNotFound.
func (v buildSteps) Delete(ctx context.Context, tenant, key string) error {
	res, err := v.db.w.ExecContext(ctx, `DELETE FROM build_steps WHERE tenant = ? AND key = ?`, tenant, key)
	if err != nil {
		return fmt.Errorf("sqlite: delete build step %q of %q: %w", key, tenant, writeErr(err))
	}
	return affectedOne(res, "delete build step", tenant+"/"+key)
}

// scanStep reads one row of stepColumns.
func scanStep(s scanner) (store.BuildStep, error) {
	var st store.BuildStep
	var created, used string
	if err := s.Scan(&st.Tenant, &st.Key, &st.Size, &created, &used); err != nil {
		return store.BuildStep{}, err
	}
	var err error
	if st.CreatedAt, err = parseTime(created); err == nil {
		st.UsedAt, err = parseTime(used)
	}
	if err != nil {
		return store.BuildStep{}, err
	}
	return st, nil
}
