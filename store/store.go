// Package store keeps the control plane's state: sandboxes and tokens. Store
// is the contract; store/sqlite is the embedded default, and a Postgres
// implementation can be added for replicated control planes. storetest is
// the conformance suite every implementation passes.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Sentinel errors, tested with errors.Is.
var (
	// ErrNotFound: no row matches.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: a sandbox with that name, or a token with that hash,
	// already exists.
	ErrExists = errors.New("store: already exists")
)

// Token is a stored bearer token. Only its hash is kept.
type Token struct {
	// ID is a short public handle for revocation and listing.
	ID string
	// Hash is the SHA-256 of the secret, hex encoded.
	Hash      string
	Principal sandbox.Principal
	CreatedAt time.Time
	// ExpiresAt zero means never.
	ExpiresAt time.Time
	// RevokedAt zero means live.
	RevokedAt time.Time
}

// Filter narrows List. Empty fields match everything.
type Filter struct {
	Tenant string
	Owner  string
}

// Store is the control plane's state. Implementations are safe for
// concurrent use, and every method is atomic.
type Store interface {
	// CreateSandbox inserts sb; ErrExists if its name (or id) is taken.
	CreateSandbox(ctx context.Context, sb sandbox.Sandbox) error
	// UpdateSandbox replaces the sandbox with sb.ID; ErrNotFound if missing.
	UpdateSandbox(ctx context.Context, sb sandbox.Sandbox) error
	// GetSandbox finds a sandbox by name; ErrNotFound if missing.
	GetSandbox(ctx context.Context, name string) (sandbox.Sandbox, error)
	// ListSandboxes returns the sandboxes matching f, oldest first.
	ListSandboxes(ctx context.Context, f Filter) ([]sandbox.Sandbox, error)
	// DeleteSandbox removes the sandbox with that id; ErrNotFound if missing.
	DeleteSandbox(ctx context.Context, id string) error

	// CreateToken inserts t; ErrExists if its id or hash is taken.
	CreateToken(ctx context.Context, t Token) error
	// TokenByHash finds a token by its hash, revoked or expired ones
	// included (the caller decides); ErrNotFound if missing.
	TokenByHash(ctx context.Context, hash string) (Token, error)
	// ListTokens returns every token, oldest first.
	ListTokens(ctx context.Context) ([]Token, error)
	// RevokeToken sets RevokedAt; ErrNotFound if no token has that id.
	RevokeToken(ctx context.Context, id string, at time.Time) error

	// Close releases the store.
	Close() error
}
