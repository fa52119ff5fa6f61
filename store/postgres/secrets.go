package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// secrets is the store.Secrets view of db: the secrets table.
type secrets struct{ db *DB }

var _ store.Secrets = secrets{}

// Secrets returns the view of the secrets table.
func (db *DB) Secrets() store.Secrets { return secrets{db} }

// Put stores tenant's secret name, sealed, created or replaced at at (a
// replacement keeps its created_at).
func (v secrets) Put(ctx context.Context, tenant, name string, sealed []byte, at time.Time) error {
	if tenant == "" || name == "" || len(sealed) == 0 {
		return fmt.Errorf("postgres: put secret %q of %q: tenant, name and value must not be empty", name, tenant)
	}
	if err := checkTimes(at); err != nil {
		return fmt.Errorf("postgres: put secret %q of %q: %w", name, tenant, err)
	}
	if _, err := v.db.exec(ctx,
		`INSERT INTO secrets (tenant, name, sealed, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
		 ON CONFLICT (tenant, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at`,
		tenant, name, sealed, at); err != nil {
		return fmt.Errorf("postgres: put secret %q of %q: %w", name, tenant, writeErr(err))
	}
	return nil
}

// Get returns the sealed value of tenant's secret name, or
// store.ErrNotFound.
func (v secrets) Get(ctx context.Context, tenant, name string) ([]byte, error) {
	scan := func(row pgx.Row) (sealed []byte, err error) {
		err = row.Scan(&sealed)
		return sealed, err
	}
	return getOne(ctx, v.db, fmt.Sprintf("secret %q of %q", name, tenant), scan,
		`SELECT sealed FROM secrets WHERE tenant = $1 AND name = $2`, tenant, name)
}

// List describes tenant's secrets, by name.
func (v secrets) List(ctx context.Context, tenant string) ([]sandbox.SecretInfo, error) {
	scan := func(row pgx.Row) (sandbox.SecretInfo, error) {
		s := sandbox.SecretInfo{Tenant: tenant}
		err := row.Scan(&s.Name, &s.CreatedAt, &s.UpdatedAt)
		return s, err
	}
	return queryAll(ctx, v.db, fmt.Sprintf("list secrets of %q", tenant), scan,
		`SELECT name, created_at, updated_at FROM secrets WHERE tenant = $1 ORDER BY name`, tenant)
}

// Delete removes tenant's secret name, or returns store.ErrNotFound.
func (v secrets) Delete(ctx context.Context, tenant, name string) error {
	return v.db.execOne(ctx, "delete secret", fmt.Sprintf("%q of %q", name, tenant),
		`DELETE FROM secrets WHERE tenant = $1 AND name = $2`, tenant, name)
}
