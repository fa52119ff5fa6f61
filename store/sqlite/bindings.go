package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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
		return fmt.Errorf("sqlite: put binding %q of %q: tenant, name, secret, upstream, header and format must not be empty", b.Name, b.Tenant)
	}
	created := b.CreatedAt
	if created.IsZero() {
		created = b.UpdatedAt
	}
	cts, err := formatTime(created)
	if err != nil {
		return fmt.Errorf("sqlite: put binding %q of %q: %w", b.Name, b.Tenant, err)
	}
	uts, err := formatTime(b.UpdatedAt)
	if err != nil {
		return fmt.Errorf("sqlite: put binding %q of %q: %w", b.Name, b.Tenant, err)
	}
	_, err = v.db.w.ExecContext(ctx,
		`INSERT INTO bindings (`+bindingColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		 ON CONFLICT (tenant, name) DO UPDATE SET secret = excluded.secret, upstream = excluded.upstream,
			header = excluded.header, format = excluded.format, updated_at = excluded.updated_at`,
		b.Tenant, b.Name, b.Secret, b.Upstream, b.Header, b.Format, cts, uts)
	if err != nil {
		return fmt.Errorf("sqlite: put binding %q of %q: %w", b.Name, b.Tenant, writeErr(err))
	}
	return nil
}

// Get returns tenant's binding name, or store.ErrNotFound.
func (v bindings) Get(ctx context.Context, tenant, name string) (sandbox.Binding, error) {
	row := v.db.r.QueryRowContext(ctx, `SELECT `+bindingColumns+` FROM bindings WHERE tenant = ? AND name = ?`, tenant, name)
	b, err := scanBinding(row)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Binding{}, fmt.Errorf("sqlite: binding %q of %q: %w", name, tenant, store.ErrNotFound)
	}
	if err != nil {
		return sandbox.Binding{}, fmt.Errorf("sqlite: get binding %q of %q: %w", name, tenant, err)
	}
	return b, nil
}

// List returns tenant's bindings, by name; none is an empty slice.
func (v bindings) List(ctx context.Context, tenant string) ([]sandbox.Binding, error) {
	return queryAll(ctx, v.db, fmt.Sprintf("list bindings of %q", tenant), scanBinding, `SELECT `+bindingColumns+` FROM bindings WHERE tenant = ? ORDER BY name`, tenant)
}

// Delete removes tenant's binding name, or returns store.ErrNotFound.
func (v bindings) Delete(ctx context.Context, tenant, name string) error {
	res, err := v.db.w.ExecContext(ctx, `DELETE FROM bindings WHERE tenant = ? AND name = ?`, tenant, name)
	if err != nil {
		return fmt.Errorf("sqlite: delete binding %q of %q: %w", name, tenant, writeErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: delete binding %q of %q: %w", name, tenant, err)
	} else if n == 0 {
		return fmt.Errorf("sqlite: binding %q of %q: %w", name, tenant, store.ErrNotFound)
	}
	return nil
}

// scanBinding reads one row of bindingColumns.
func scanBinding(s scanner) (sandbox.Binding, error) {
	var b sandbox.Binding
	var created, updated string
	if err := s.Scan(&b.Tenant, &b.Name, &b.Secret, &b.Upstream, &b.Header, &b.Format, &created, &updated); err != nil {
		return sandbox.Binding{}, err
	}
	var err error
	if b.CreatedAt, err = parseTime(created); err == nil {
		b.UpdatedAt, err = parseTime(updated)
	}
	if err != nil {
		return sandbox.Binding{}, err
	}
	return b, nil
}
