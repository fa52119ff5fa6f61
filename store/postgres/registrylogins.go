package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// loginColumns are selected in this order; scanLogin follows it (without
// the sealed password, which only Get reads).
const loginColumns = `tenant, host, username, insecure, ca, created_at, updated_at`

// registryLogins is the store.RegistryLogins view of db: the
// registry_logins table.
type registryLogins struct{ db *DB }

var _ store.RegistryLogins = registryLogins{}

// RegistryLogins returns the view of the registry_logins table.
func (db *DB) RegistryLogins() store.RegistryLogins { return registryLogins{db} }

// Put stores login with its sealed password, created at login.CreatedAt
// (login.UpdatedAt when zero) or replaced (a replacement keeps its
// created_at), updated at login.UpdatedAt.
func (v registryLogins) Put(ctx context.Context, login sandbox.RegistryLogin, sealedPassword []byte) error {
	if login.Tenant == "" || login.Host == "" {
		return fmt.Errorf("postgres: put registry login %q of %q: tenant and host must not be empty", login.Host, login.Tenant)
	}
	created := login.CreatedAt
	if created.IsZero() {
		created = login.UpdatedAt
	}
	if err := checkTimes(created, login.UpdatedAt); err != nil {
		return fmt.Errorf("postgres: put registry login %q of %q: %w", login.Host, login.Tenant, err)
	}
	if _, err := v.db.exec(ctx,
		`INSERT INTO registry_logins (`+loginColumns+`, sealed_password) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		 ON CONFLICT (tenant, host) DO UPDATE SET username = excluded.username, insecure = excluded.insecure,
			ca = excluded.ca, updated_at = excluded.updated_at, sealed_password = excluded.sealed_password`,
		login.Tenant, login.Host, login.Username, login.Insecure, login.CA, created, login.UpdatedAt,
		nonNil(sealedPassword)); err != nil { // NOT NULL: no password is an empty one
		return fmt.Errorf("postgres: put registry login %q of %q: %w", login.Host, login.Tenant, writeErr(err))
	}
	return nil
}

// Get returns tenant's login for host and its sealed password, or
// store.ErrNotFound.
func (v registryLogins) Get(ctx context.Context, tenant, host string) (sandbox.RegistryLogin, []byte, error) {
	var sealed []byte
	scan := func(row pgx.Row) (sandbox.RegistryLogin, error) { return scanLogin(row, &sealed) }
	login, err := getOne(ctx, v.db, fmt.Sprintf("registry login %q of %q", host, tenant), scan,
		`SELECT `+loginColumns+`, sealed_password FROM registry_logins WHERE tenant = $1 AND host = $2`, tenant, host)
	if err != nil {
		return sandbox.RegistryLogin{}, nil, err
	}
	return login, sealed, nil
}

// List returns tenant's logins, by host, without their passwords.
func (v registryLogins) List(ctx context.Context, tenant string) ([]sandbox.RegistryLogin, error) {
	scan := func(row pgx.Row) (sandbox.RegistryLogin, error) { return scanLogin(row) }
	return queryAll(ctx, v.db, fmt.Sprintf("list registry logins of %q", tenant), scan,
		`SELECT `+loginColumns+` FROM registry_logins WHERE tenant = $1 ORDER BY host`, tenant)
}

// Delete removes tenant's login for host, or returns store.ErrNotFound.
func (v registryLogins) Delete(ctx context.Context, tenant, host string) error {
	return v.db.execOne(ctx, "delete registry login", fmt.Sprintf("%q of %q", host, tenant),
		`DELETE FROM registry_logins WHERE tenant = $1 AND host = $2`, tenant, host)
}

// scanLogin reads one row of loginColumns followed by extra.
func scanLogin(row pgx.Row, extra ...any) (sandbox.RegistryLogin, error) {
	var l sandbox.RegistryLogin
	dest := append([]any{&l.Tenant, &l.Host, &l.Username, &l.Insecure, &l.CA, &l.CreatedAt, &l.UpdatedAt}, extra...)
	err := row.Scan(dest...)
	return l, err
}
