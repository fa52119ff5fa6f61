package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// bindingColumns are selected in this order; scanBinding follows it.
const bindingColumns = `tenant, name, secret, upstream, header, format, created_at, updated_at`

// bindings is the store.Bindings view of db: the bindings table.
type bindings struct{ db *DB }

var _ store.Bindings = bindings{}

// Bindings returns the view of the bindings table.
func (db *DB) Bindings() store.Bindings { return bindings{db} }

// Put stores b, created at b.CreatedAt (b.UpdatedAt when zero) or
// replaced (a replacement keeps its created_at), updated at b.UpdatedAt.
func (v bindings) Put(ctx context.Context, b sandbox.Binding) error {
	if b.Tenant == "" || b.Name == "" || b.Secret == "" || b.Upstream == "" || b.Header == "" || b.Format == "" {
		return fmt.Errorf("postgres: put binding %q of %q: tenant, name, secret, upstream, header and format must not be empty", b.Name, b.Tenant)
	}
	created := b.CreatedAt
	if created.IsZero() {
		created = b.UpdatedAt
	}
	if err := checkTimes(created, b.UpdatedAt); err != nil {
		return fmt.Errorf("postgres: put binding %q of %q: %w", b.Name, b.Tenant, err)
	}
	if _, err := v.db.exec(ctx,
		`INSERT INTO bindings (`+bindingColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		 ON CONFLICT (tenant, name) DO UPDATE SET secret = excluded.secret, upstream = excluded.upstream,
			header = excluded.header, format = excluded.format, updated_at = excluded.updated_at`,
		b.Tenant, b.Name, b.Secret, b.Upstream, b.Header, b.Format, created, b.UpdatedAt); err != nil {
		return fmt.Errorf("postgres: put binding %q of %q: %w", b.Name, b.Tenant, writeErr(err))
	}
	return nil
}

// Get returns tenant's binding name, or store.ErrNotFound.
func (v bindings) Get(ctx context.Context, tenant, name string) (sandbox.Binding, error) {
	return getOne(ctx, v.db, fmt.Sprintf("binding %q of %q", name, tenant), scanBinding,
		`SELECT `+bindingColumns+` FROM bindings WHERE tenant = $1 AND name = $2`, tenant, name)
}

// List returns tenant's bindings, by name; none is an empty slice.
func (v bindings) List(ctx context.Context, tenant string) ([]sandbox.Binding, error) {
	return queryAll(ctx, v.db, fmt.Sprintf("list bindings of %q", tenant), scanBinding,
		`SELECT `+bindingColumns+` FROM bindings WHERE tenant = $1 ORDER BY name`, tenant)
}

// Delete removes tenant's binding name, or returns store.ErrNotFound.
func (v bindings) Delete(ctx context.Context, tenant, name string) error {
	return v.db.execOne(ctx, "delete binding", fmt.Sprintf("%q of %q", name, tenant),
		`DELETE FROM bindings WHERE tenant = $1 AND name = $2`, tenant, name)
}

// scanBinding reads one row of bindingColumns.
func scanBinding(row pgx.Row) (sandbox.Binding, error) {
	var b sandbox.Binding
	err := row.Scan(&b.Tenant, &b.Name, &b.Secret, &b.Upstream, &b.Header, &b.Format, &b.CreatedAt, &b.UpdatedAt)
	return b, err
}
