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

// tokenColumns are selected and bound in this order.
const tokenColumns = `id, hash, tenant, agent, role, created_at, expires_at, revoked_at, name_prefix`

// tokens is the store.Tokens view of db: the tokens table.
type tokens struct{ db *DB }

var _ store.Tokens = tokens{}

// Tokens returns the view of the tokens table.
func (db *DB) Tokens() store.Tokens { return tokens{db} }

// Create inserts t. It returns store.ErrExists if t.ID or t.Hash is
// taken, and an error if either is empty.
func (v tokens) Create(ctx context.Context, t store.Token) error {
	if t.ID == "" || t.Hash == "" {
		return errors.New("sqlite: create token: id and hash must not be empty")
	}
	created, err := formatTime(t.CreatedAt)
	if err != nil {
		return fmt.Errorf("sqlite: create token %q: created_at: %w", t.ID, err)
	}
	expires, err := formatNullTime(t.ExpiresAt)
	if err != nil {
		return fmt.Errorf("sqlite: create token %q: expires_at: %w", t.ID, err)
	}
	revoked, err := formatNullTime(t.RevokedAt)
	if err != nil {
		return fmt.Errorf("sqlite: create token %q: revoked_at: %w", t.ID, err)
	}
	_, err = v.db.w.ExecContext(ctx,
		`INSERT INTO tokens (`+tokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.ID, t.Hash, t.Principal.Tenant, t.Principal.Agent, string(t.Principal.Role),
		created, expires, revoked, t.Principal.NamePrefix)
	if err != nil {
		// The hash stays out of the message: it is as good as the secret for
		// looking the token up.
		return fmt.Errorf("sqlite: create token %q: %w", t.ID, writeErr(err))
	}
	return nil
}

// ByHash returns the token with that hash, revoked and expired ones
// included, or store.ErrNotFound.
func (v tokens) ByHash(ctx context.Context, hash string) (store.Token, error) {
	row := v.db.r.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = ?`, hash)
	t, err := scanToken(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Token{}, fmt.Errorf("sqlite: token by hash: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.Token{}, fmt.Errorf("sqlite: token by hash: %w", err)
	}
	return t, nil
}

// List returns every token, oldest CreatedAt first and insertion order
// among equals.
func (v tokens) List(ctx context.Context) ([]store.Token, error) {
	return queryAll(ctx, v.db, "list tokens", scanToken, `SELECT `+tokenColumns+` FROM tokens ORDER BY created_at, rowid`)
}

// Revoke sets the RevokedAt of the token with that id to at, or returns
// store.ErrNotFound. A token already revoked keeps its first RevokedAt and
// the call succeeds. at must not be zero, which would read as "live".
func (v tokens) Revoke(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return fmt.Errorf("sqlite: revoke token %q: zero revocation time", id)
	}
	s, err := formatTime(at)
	if err != nil {
		return fmt.Errorf("sqlite: revoke token %q: %w", id, err)
	}
	res, err := v.db.w.ExecContext(ctx,
		`UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, s, id)
	if err != nil {
		return fmt.Errorf("sqlite: revoke token %q: %w", id, err)
	}
	return affectedOne(res, "revoke token", id)
}

// scanToken reads one row selected with tokenColumns.
func scanToken(s scanner) (store.Token, error) {
	var (
		t                store.Token
		role, created    string
		expires, revoked sql.NullString
	)
	if err := s.Scan(&t.ID, &t.Hash, &t.Principal.Tenant, &t.Principal.Agent, &role,
		&created, &expires, &revoked, &t.Principal.NamePrefix); err != nil {
		return store.Token{}, err
	}
	t.Principal.Role = sandbox.Role(role)
	var err error
	if t.CreatedAt, err = parseTime(created); err != nil {
		return store.Token{}, fmt.Errorf("token %q created_at: %w", t.ID, err)
	}
	if t.ExpiresAt, err = parseNullTime(expires); err != nil {
		return store.Token{}, fmt.Errorf("token %q expires_at: %w", t.ID, err)
	}
	if t.RevokedAt, err = parseNullTime(revoked); err != nil {
		return store.Token{}, fmt.Errorf("token %q revoked_at: %w", t.ID, err)
	}
	return t, nil
}
