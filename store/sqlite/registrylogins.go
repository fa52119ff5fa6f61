package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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
		return fmt.Errorf("sqlite: put registry login %q of %q: tenant and host must not be empty", login.Host, login.Tenant)
	}
	created := login.CreatedAt
	if created.IsZero() {
		created = login.UpdatedAt
	}
	cts, err := formatTime(created)
	if err != nil {
		return fmt.Errorf("sqlite: put registry login %q of %q: %w", login.Host, login.Tenant, err)
	}
	uts, err := formatTime(login.UpdatedAt)
	if err != nil {
		return fmt.Errorf("sqlite: put registry login %q of %q: %w", login.Host, login.Tenant, err)
	}
	if sealedPassword == nil {
		sealedPassword = []byte{} // NOT NULL: no password is an empty one
	}
	_, err = v.db.w.ExecContext(ctx,
		`INSERT INTO registry_logins (`+loginColumns+`, sealed_password) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		 ON CONFLICT (tenant, host) DO UPDATE SET username = excluded.username, insecure = excluded.insecure,
			ca = excluded.ca, updated_at = excluded.updated_at, sealed_password = excluded.sealed_password`,
		login.Tenant, login.Host, login.Username, login.Insecure, login.CA, cts, uts, sealedPassword)
	if err != nil {
		return fmt.Errorf("sqlite: put registry login %q of %q: %w", login.Host, login.Tenant, writeErr(err))
	}
	return nil
}

// Get returns tenant's login for host and its sealed password, or
// store.ErrNotFound.
func (v registryLogins) Get(ctx context.Context, tenant, host string) (sandbox.RegistryLogin, []byte, error) {
	var sealed []byte
	row := v.db.r.QueryRowContext(ctx,
		`SELECT `+loginColumns+`, sealed_password FROM registry_logins WHERE tenant = ? AND host = ?`, tenant, host)
	login, err := scanLogin(row, &sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.RegistryLogin{}, nil, fmt.Errorf("sqlite: registry login %q of %q: %w", host, tenant, store.ErrNotFound)
	}
	if err != nil {
		return sandbox.RegistryLogin{}, nil, fmt.Errorf("sqlite: get registry login %q of %q: %w", host, tenant, err)
	}
	return login, sealed, nil
}

// List returns tenant's logins, by host, without their passwords.
func (v registryLogins) List(ctx context.Context, tenant string) ([]sandbox.RegistryLogin, error) {
	scan := func(s scanner) (sandbox.RegistryLogin, error) { return scanLogin(s) }
	return queryAll(ctx, v.db, fmt.Sprintf("list registry logins of %q", tenant), scan,
		`SELECT `+loginColumns+` FROM registry_logins WHERE tenant = ? ORDER BY host`, tenant)
}

// Delete removes tenant's login for host, or returns store.ErrNotFound.
func (v registryLogins) Delete(ctx context.Context, tenant, host string) error {
	res, err := v.db.w.ExecContext(ctx, `DELETE FROM registry_logins WHERE tenant = ? AND host = ?`, tenant, host)
	if err != nil {
		return fmt.Errorf("sqlite: delete registry login %q of %q: %w", host, tenant, writeErr(err))
	}
	return affectedOne(res, "delete registry login", tenant+"/"+host)
}

// scanLogin reads one row of loginColumns followed by extra.
func scanLogin(s scanner, extra ...any) (sandbox.RegistryLogin, error) {
	var l sandbox.RegistryLogin
	var created, updated string
	dest := append([]any{&l.Tenant, &l.Host, &l.Username, &l.Insecure, &l.CA, &created, &updated}, extra...)
	if err := s.Scan(dest...); err != nil {
		return sandbox.RegistryLogin{}, err
	}
	var err error
	if l.CreatedAt, err = parseTime(created); err == nil {
		l.UpdatedAt, err = parseTime(updated)
	}
	if err != nil {
		return sandbox.RegistryLogin{}, err
	}
	return l, nil
}
