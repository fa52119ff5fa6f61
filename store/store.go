// Package store keeps the control plane's state: sandboxes and their
// checkpoints, tokens, tenants and agent identities, and the audit log of
// every call through a door. Store is the contract; store/sqlite is the
// embedded default, and a Postgres implementation can be added for
// replicated control planes. storetest is the conformance suite every
// implementation passes.
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
	// ErrExists: a sandbox or agent with that name in that tenant, a tenant
	// with that name, or a token with that hash, already exists.
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
	// Name matches sandboxes of that name, in any tenant Tenant allows.
	Name string
}

// Store is the control plane's state. Implementations are safe for
// concurrent use, every method is atomic, and a method that returned nil
// has made its change durable: it survives the daemon being killed right
// after. Methods honour ctx; one cancelled before it commits changes
// nothing.
//
// Times come back in UTC, equal (time.Equal) to what was stored to at least
// the microsecond; implementations document finer precision. A zero
// ExpiresAt or RevokedAt is stored as "never" and comes back zero.
//
// storetest.Run is the conformance suite for these promises.
type Store interface {
	// CreateSandbox inserts sb; ErrExists if its tenant already has a
	// sandbox of its name, or its id is taken. Names are unique within a
	// tenant only: another tenant's sandbox of the same name is no
	// conflict. An empty ID or Name is an error.
	CreateSandbox(ctx context.Context, sb sandbox.Sandbox) error
	// UpdateSandbox replaces every field of the sandbox with sb.ID by sb's
	// (its tenant and name too: a warm-pool claim moves a sandbox);
	// ErrNotFound if missing, ErrExists if sb.Tenant has another sandbox
	// called sb.Name.
	UpdateSandbox(ctx context.Context, sb sandbox.Sandbox) error
	// GetSandbox finds tenant's sandbox called name; ErrNotFound if
	// missing (another tenant's of that name is not found). Its
	// Capabilities are never nil (an empty list renders as [], not null).
	GetSandbox(ctx context.Context, tenant, name string) (sandbox.Sandbox, error)
	// SandboxByID finds a sandbox by id, as GetSandbox does by name;
	// ErrNotFound if missing.
	SandboxByID(ctx context.Context, id string) (sandbox.Sandbox, error)
	// ListSandboxes returns the sandboxes matching f, oldest CreatedAt first
	// (insertion order among equals). No match is an empty slice, not an
	// error.
	ListSandboxes(ctx context.Context, f Filter) ([]sandbox.Sandbox, error)
	// DeleteSandbox removes the sandbox with that id; ErrNotFound if missing.
	DeleteSandbox(ctx context.Context, id string) error

	// CreateToken inserts t; ErrExists if its id or hash is taken. An empty
	// ID or Hash is an error.
	CreateToken(ctx context.Context, t Token) error
	// TokenByHash finds a token by its hash, revoked or expired ones
	// included (the caller decides); ErrNotFound if missing.
	TokenByHash(ctx context.Context, hash string) (Token, error)
	// ListTokens returns every token, oldest CreatedAt first (insertion
	// order among equals).
	ListTokens(ctx context.Context) ([]Token, error)
	// RevokeToken sets RevokedAt to at; ErrNotFound if no token has that id.
	// Revoking a revoked token succeeds and keeps the first RevokedAt, so
	// the audit trail says when access really ended. A zero at is an error.
	RevokeToken(ctx context.Context, id string, at time.Time) error

	// CreateCheckpoint inserts c; ErrExists if its id is taken, ErrNotFound
	// if its sandbox (c.SandboxID) does not exist; an empty id is an error.
	CreateCheckpoint(ctx context.Context, c sandbox.Checkpoint) error
	// GetCheckpoint finds checkpoint id of the sandbox sandboxID;
	// ErrNotFound if that sandbox has no such checkpoint. Sandbox (the
	// name) is the sandbox's current name.
	GetCheckpoint(ctx context.Context, sandboxID, id string) (sandbox.Checkpoint, error)
	// ListCheckpoints returns the sandbox's checkpoints, oldest first.
	ListCheckpoints(ctx context.Context, sandboxID string) ([]sandbox.Checkpoint, error)
	// SetCheckpointMemory records whether checkpoint id includes the
	// processes' memory (sandbox.Checkpoint.Memory); ErrNotFound if
	// missing.
	SetCheckpointMemory(ctx context.Context, id string, memory bool) error
	// DeleteCheckpoint removes checkpoint id; ErrNotFound if missing.
	// Deleting a sandbox deletes its checkpoints' rows too.
	DeleteCheckpoint(ctx context.Context, id string) error

	// CreateTenant inserts t; ErrExists if its name is taken. An empty name
	// is an error. Allocation.Pids is not kept: it comes back 0.
	CreateTenant(ctx context.Context, t sandbox.Tenant) error
	// GetTenant finds a tenant by name; ErrNotFound if missing. Every
	// Policy field comes back as stored: nil stays nil, and a field set to
	// zero comes back set to zero.
	GetTenant(ctx context.Context, name string) (sandbox.Tenant, error)
	// ListTenants returns every tenant, by name. None is an empty slice, not
	// an error.
	ListTenants(ctx context.Context) ([]sandbox.Tenant, error)
	// UpdateTenant replaces the Allocation, Policy and UpdatedAt of the
	// tenant t.Name; ErrNotFound if missing. CreatedAt is kept: t's is
	// ignored.
	UpdateTenant(ctx context.Context, t sandbox.Tenant) error

	// CreateAgent inserts a; ErrExists if a.Tenant has an agent of that
	// name (another tenant's of the same name is no conflict), ErrNotFound
	// if a.Tenant does not exist. An empty Name or Tenant is an error.
	CreateAgent(ctx context.Context, a sandbox.Agent) error
	// GetAgent finds tenant's agent called name; ErrNotFound if missing.
	GetAgent(ctx context.Context, tenant, name string) (sandbox.Agent, error)
	// ListAgents returns the agents of tenant ("" for every tenant), by
	// name and then tenant. None, or no such tenant, is an empty slice,
	// not an error.
	ListAgents(ctx context.Context, tenant string) ([]sandbox.Agent, error)

	// AppendAudit appends events to the audit log, all or none. The store
	// gives each its ID, increasing in the order of events and never
	// reused, not even after DeleteAuditBefore; the IDs events carry are
	// ignored. An event with a zero At is an error. No events is a no-op.
	AppendAudit(ctx context.Context, events []sandbox.AuditEvent) error
	// ListAudit returns the events matching f, oldest At first (ID order
	// among equals): those at or after f.Since, of f.Tenant and f.Agent
	// when set, on a sandbox inside f.SandboxPrefix when set (see
	// sandbox.AuditFilter), and, when f.Limit is positive, only the newest
	// f.Limit of them. None is an empty slice, not an error.
	ListAudit(ctx context.Context, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error)
	// DeleteAuditBefore deletes the events whose At is before t and
	// returns how many it deleted.
	DeleteAuditBefore(ctx context.Context, t time.Time) (int64, error)

	// PutSecret stores the sealed value of tenant's secret name (see package
	// secrets; the store never sees the plain value), created or replaced
	// at at: a replacement keeps CreatedAt. Empty arguments are an error.
	PutSecret(ctx context.Context, tenant, name string, sealed []byte, at time.Time) error
	// GetSecret returns the sealed value of tenant's secret name;
	// ErrNotFound if missing.
	GetSecret(ctx context.Context, tenant, name string) ([]byte, error)
	// ListSecrets describes tenant's secrets, by name (no values).
	ListSecrets(ctx context.Context, tenant string) ([]sandbox.SecretInfo, error)
	// DeleteSecret removes tenant's secret name; ErrNotFound if missing.
	DeleteSecret(ctx context.Context, tenant, name string) error

	// PutBinding stores tenant b.Tenant's credential binding b.Name (see
	// sandbox.Binding), created or replaced. A new one is created at
	// b.CreatedAt (b.UpdatedAt when that is zero); a replacement keeps the
	// stored CreatedAt. Either way UpdatedAt is b.UpdatedAt. An empty Tenant, Name, Secret, Upstream, Header or
	// Format is an error; the store checks nothing else.
	PutBinding(ctx context.Context, b sandbox.Binding) error
	// GetBinding returns tenant's binding name; ErrNotFound if missing.
	GetBinding(ctx context.Context, tenant, name string) (sandbox.Binding, error)
	// ListBindings returns tenant's bindings, by name. None, or no such
	// tenant, is an empty slice, not an error.
	ListBindings(ctx context.Context, tenant string) ([]sandbox.Binding, error)
	// DeleteBinding removes tenant's binding name; ErrNotFound if missing.
	// Deleting the secret a binding names leaves the binding.
	DeleteBinding(ctx context.Context, tenant, name string) error

	// RecordGone keeps why a sandbox went, by tenant and name, replacing
	// the record of an earlier sandbox of that name in that tenant. An
	// empty name is an error.
	RecordGone(ctx context.Context, g sandbox.Gone) error
	// GetGone returns the record of tenant's name; ErrNotFound if none.
	GetGone(ctx context.Context, tenant, name string) (sandbox.Gone, error)
	// ForgetGone deletes the record of tenant's name (none is not an
	// error) when name is not empty, and every record whose At is before
	// before when before is not zero.
	ForgetGone(ctx context.Context, tenant, name string, before time.Time) error

	// Close releases the store. Closing a closed store does nothing and
	// returns nil; other methods fail after Close.
	Close() error
}
