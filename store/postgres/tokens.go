package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

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
		return errors.New("postgres: create token: id and hash must not be empty")
	}
	if err := checkTimes(t.CreatedAt, t.ExpiresAt, t.RevokedAt); err != nil {
		return fmt.Errorf("postgres: create token %q: %w", t.ID, err)
	}
	_, err := v.db.exec(ctx,
		`INSERT INTO tokens (`+tokenColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		t.ID, t.Hash, t.Principal.Tenant, t.Principal.Agent, string(t.Principal.Role),
		t.CreatedAt, nullTime(t.ExpiresAt), nullTime(t.RevokedAt), t.Principal.NamePrefix)
	if err != nil {
		// The hash stays out of the message (writeErr keeps the server's
		// message, never its detail with the key's value): it is as good
		// as the secret for looking the token up.
		return fmt.Errorf("postgres: create token %q: %w", t.ID, writeErr(err))
	}
	return nil
}

// ByHash returns the token with that hash, revoked and expired ones
// included, or store.ErrNotFound.
func (v tokens) ByHash(ctx context.Context, hash string) (store.Token, error) {
	return getOne(ctx, v.db, "token by hash", scanToken, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1`, hash)
}

// List returns every token, oldest CreatedAt first and insertion order
// among equals.
func (v tokens) List(ctx context.Context) ([]store.Token, error) {
	return queryAll(ctx, v.db, "list tokens", scanToken, `SELECT `+tokenColumns+` FROM tokens ORDER BY created_at, seq`)
}

// Revoke sets the RevokedAt of the token with that id to at, or returns
// store.ErrNotFound. A token already revoked keeps its first RevokedAt and
// the call succeeds. at must not be zero, which would read as "live".
func (v tokens) Revoke(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return fmt.Errorf("postgres: revoke token %q: zero revocation time", id)
	}
	if err := checkTimes(at); err != nil {
		return fmt.Errorf("postgres: revoke token %q: %w", id, err)
	}
	return v.db.execOne(ctx, "revoke token", strconv.Quote(id),
		`UPDATE tokens SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2`, at, id)
}

// scanToken reads one row selected with tokenColumns.
func scanToken(row pgx.Row) (store.Token, error) {
	var (
		t                store.Token
		role             string
		expires, revoked *time.Time
	)
	if err := row.Scan(&t.ID, &t.Hash, &t.Principal.Tenant, &t.Principal.Agent, &role,
		&t.CreatedAt, &expires, &revoked, &t.Principal.NamePrefix); err != nil {
		return store.Token{}, err
	}
	t.Principal.Role = sandbox.Role(role)
	t.ExpiresAt, t.RevokedAt = fromNull(expires), fromNull(revoked)
	return t, nil
}
