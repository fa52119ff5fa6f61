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

// secrets is the store.Secrets view of db: the secrets table.
type secrets struct{ db *DB }

var _ store.Secrets = secrets{}

// Secrets returns the view of the secrets table.
func (db *DB) Secrets() store.Secrets { return secrets{db} }

// Put stores tenant's secret name, sealed, created or replaced at at
// (a replacement keeps its created_at).
func (v secrets) Put(ctx context.Context, tenant, name string, sealed []byte, at time.Time) error {
	if tenant == "" || name == "" || len(sealed) == 0 {
		return fmt.Errorf("sqlite: put secret %q of %q: tenant, name and value must not be empty", name, tenant)
	}
	ts, err := formatTime(at)
	if err != nil {
		return fmt.Errorf("sqlite: put secret %q of %q: %w", name, tenant, err)
	}
	_, err = v.db.w.ExecContext(ctx,
		`INSERT INTO secrets (tenant, name, sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?)
		 ON CONFLICT (tenant, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at`,
		tenant, name, sealed, ts, ts)
	if err != nil {
		return fmt.Errorf("sqlite: put secret %q of %q: %w", name, tenant, writeErr(err))
	}
	return nil
}

// Get returns the sealed value of tenant's secret name, or
// store.ErrNotFound.
func (v secrets) Get(ctx context.Context, tenant, name string) ([]byte, error) {
	var sealed []byte
	err := v.db.r.QueryRowContext(ctx, `SELECT sealed FROM secrets WHERE tenant = ? AND name = ?`, tenant, name).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: secret %q of %q: %w", name, tenant, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get secret %q of %q: %w", name, tenant, err)
	}
	return sealed, nil
}

// List describes tenant's secrets, by name.
func (v secrets) List(ctx context.Context, tenant string) ([]sandbox.SecretInfo, error) {
	scan := func(row scanner) (sandbox.SecretInfo, error) {
		s := sandbox.SecretInfo{Tenant: tenant}
		var created, updated string
		if err := row.Scan(&s.Name, &created, &updated); err != nil {
			return s, err
		}
		var err error
		if s.CreatedAt, err = parseTime(created); err == nil {
			s.UpdatedAt, err = parseTime(updated)
		}
		return s, err
	}
	return queryAll(ctx, v.db, fmt.Sprintf("list secrets of %q", tenant), scan, `SELECT name, created_at, updated_at FROM secrets WHERE tenant = ? ORDER BY name`, tenant)
}

// Delete removes tenant's secret name, or returns store.ErrNotFound.
func (v secrets) Delete(ctx context.Context, tenant, name string) error {
	res, err := v.db.w.ExecContext(ctx, `DELETE FROM secrets WHERE tenant = ? AND name = ?`, tenant, name)
	if err != nil {
		return fmt.Errorf("sqlite: delete secret %q of %q: %w", name, tenant, writeErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: delete secret %q of %q: %w", name, tenant, err)
	} else if n == 0 {
		return fmt.Errorf("sqlite: secret %q of %q: %w", name, tenant, store.ErrNotFound)
	}
	return nil
}
