// Package store keeps the control plane's state: sandboxes and their
// checkpoints, tokens, tenants and agent identities, images and the
// registry logins they are pulled with, and the audit log of every call
// through a door. Store is the contract, a small view per noun
// (Sandboxes, Checkpoints, Tenants, …) over one state; store/sqlite is the
// embedded default, store/postgres the store of replicated control planes,
// and schema reads the migrations both embed. storetest is the
// conformance suite every implementation passes.
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

// Filter narrows Sandboxes.List. Empty fields match everything.
type Filter struct {
	Tenant string
	Owner  string
	// Name matches sandboxes of that name, in any tenant Tenant allows.
	Name string
}

// Store is the control plane's state, one view per noun. Implementations
// are safe for concurrent use, every method of every view is atomic, and
// a method that returned nil has made its change durable: it survives the
// daemon being killed right after. Methods honour ctx; one cancelled
// before it commits changes nothing.
//
// Times come back in UTC, equal (time.Equal) to what was stored to at least
// the microsecond; implementations document finer precision. A zero
// ExpiresAt or RevokedAt is stored as "never" and comes back zero.
//
// The views share one state: a view is cheap to get, holds nothing of its
// own, and sees every change made through another. Where the nouns meet
// (a checkpoint belongs to a sandbox, an agent to a tenant), the view's
// methods say so.
//
// storetest.Run is the conformance suite for these promises.
type Store interface {
	// Sandboxes is the view of the sandboxes.
	Sandboxes() Sandboxes
	// Checkpoints is the view of the sandboxes' checkpoints.
	Checkpoints() Checkpoints
	// Tenants is the view of the tenants.
	Tenants() Tenants
	// Agents is the view of the tenants' agent identities.
	Agents() Agents
	// Tokens is the view of the bearer tokens.
	Tokens() Tokens
	// Audit is the view of the audit log.
	Audit() AuditLog
	// Secrets is the view of the tenants' sealed secrets.
	Secrets() Secrets
	// Bindings is the view of the tenants' credential bindings.
	Bindings() Bindings
	// Gone is the view of the records of why sandboxes went.
	Gone() GoneRecords
	// Images is the view of the tenants' images and their versions.
	Images() Images
	// RegistryLogins is the view of the tenants' registry credentials.
	RegistryLogins() RegistryLogins
	// BuildSteps is the view of the tenants' build caches.
	BuildSteps() BuildSteps
	// Admissions is the view of the tenants' admission locks and the
	// agents' create rates.
	Admissions() Admissions
	// Nodes is the view of the store's daemons.
	Nodes() Nodes
	// Leases is the view of the leases that elect one daemon for a job.
	Leases() Leases
	// Changes is the view that pushes notices of changes to every daemon.
	Changes() Changes

	// Schema returns the schema version the store records and the latest
	// this binary knows; applied above known means a newer hearth has
	// migrated the store under this one.
	Schema(ctx context.Context) (applied, known int, err error)

	// Close releases the store, and the admission locks this process
	// holds. Closing a closed store does nothing and returns nil; other
	// methods, of every view, fail after Close, and the channels of
	// Changes.Listen are closed.
	Close() error
}

// Sandboxes keeps the sandboxes, unique by id and by name within a tenant.
// A sandbox's ImageKey is kept though no door shows it, and its
// ImageConfig comes back with an empty list or map in it as nil.
type Sandboxes interface {
	// Create inserts sb; ErrExists if its tenant already has a sandbox of
	// its name, or its id is taken. Names are unique within a tenant only:
	// another tenant's sandbox of the same name is no conflict. An empty ID
	// or Name is an error.
	Create(ctx context.Context, sb sandbox.Sandbox) error
	// Update replaces every field of the sandbox with sb.ID by sb's (its
	// tenant and name too: a warm-pool claim moves a sandbox); ErrNotFound
	// if missing, ErrExists if sb.Tenant has another sandbox called
	// sb.Name.
	Update(ctx context.Context, sb sandbox.Sandbox) error
	// Swap is Update made only while the row of sb.ID is as was was read:
	// the same tenant, name, status and node (was.ID must be sb.ID). It
	// reports false and changes nothing when the row differs in those or
	// is gone, so that of daemons that read one row and swap it at once,
	// one wins: a warm-pool member two control planes claim goes to one.
	// ErrExists as Update's.
	Swap(ctx context.Context, was, sb sandbox.Sandbox) (bool, error)
	// Get finds tenant's sandbox called name; ErrNotFound if missing
	// (another tenant's of that name is not found). Its Capabilities are
	// never nil (an empty list renders as [], not null).
	Get(ctx context.Context, tenant, name string) (sandbox.Sandbox, error)
	// ByID finds a sandbox by id, as Get does by name; ErrNotFound if
	// missing.
	ByID(ctx context.Context, id string) (sandbox.Sandbox, error)
	// List returns the sandboxes matching f, oldest CreatedAt first
	// (insertion order among equals). No match is an empty slice, not an
	// error.
	List(ctx context.Context, f Filter) ([]sandbox.Sandbox, error)
	// Delete removes the sandbox with that id; ErrNotFound if missing.
	// Its checkpoints' rows go with it (see Checkpoints.Delete).
	Delete(ctx context.Context, id string) error
	// DeleteIf is Delete made only while the row of was.ID is as was was
	// read: the same tenant, name, status and node, as Swap's condition.
	// It reports false and removes nothing when the row differs in those
	// or is gone, so that a control plane undoing a create cannot remove
	// the row a node has just taken over (see Swap).
	DeleteIf(ctx context.Context, was sandbox.Sandbox) (bool, error)
	// UsingImage returns the sandboxes, of every tenant, whose ImageKey is
	// one of keys, oldest CreatedAt first, at most limit of them (every
	// one when limit is not positive): an image version whose layers a
	// sandbox's root was prepared from must not be removed, and one user
	// is enough to say so. Empty keys match nothing. None is an empty
	// slice, not an error.
	UsingImage(ctx context.Context, keys []string, limit int) ([]sandbox.Sandbox, error)
}

// Checkpoints keeps the sandboxes' checkpoints. Every checkpoint belongs
// to a sandbox that exists.
type Checkpoints interface {
	// Create inserts c; ErrExists if its id is taken, ErrNotFound if its
	// sandbox (c.SandboxID) does not exist; an empty id is an error.
	Create(ctx context.Context, c sandbox.Checkpoint) error
	// Get finds checkpoint id of the sandbox sandboxID; ErrNotFound if that
	// sandbox has no such checkpoint. Sandbox (the name) is the sandbox's
	// current name.
	Get(ctx context.Context, sandboxID, id string) (sandbox.Checkpoint, error)
	// List returns the sandbox's checkpoints, oldest first.
	List(ctx context.Context, sandboxID string) ([]sandbox.Checkpoint, error)
	// SetMemory records whether checkpoint id includes the processes'
	// memory (sandbox.Checkpoint.Memory); ErrNotFound if missing.
	SetMemory(ctx context.Context, id string, memory bool) error
	// Delete removes checkpoint id; ErrNotFound if missing. Deleting a
	// sandbox deletes its checkpoints' rows too.
	Delete(ctx context.Context, id string) error
}

// Tenants keeps the tenants, unique by name.
type Tenants interface {
	// Create inserts t; ErrExists if its name is taken. An empty name is an
	// error. Allocation.Pids is not kept: it comes back 0.
	Create(ctx context.Context, t sandbox.Tenant) error
	// Get finds a tenant by name; ErrNotFound if missing. Every Policy
	// field comes back as stored: nil stays nil, and a field set to zero
	// comes back set to zero.
	Get(ctx context.Context, name string) (sandbox.Tenant, error)
	// List returns every tenant, by name. None is an empty slice, not an
	// error.
	List(ctx context.Context) ([]sandbox.Tenant, error)
	// Update replaces the Allocation, Policy, Pool and UpdatedAt of the
	// tenant t.Name; ErrNotFound if missing. CreatedAt is kept: t's is
	// ignored.
	Update(ctx context.Context, t sandbox.Tenant) error
}

// Agents keeps the tenants' agent identities, unique by name within a
// tenant. Every agent belongs to a tenant that exists.
type Agents interface {
	// Create inserts a; ErrExists if a.Tenant has an agent of that name
	// (another tenant's of the same name is no conflict), ErrNotFound if
	// a.Tenant does not exist. An empty Name or Tenant is an error.
	Create(ctx context.Context, a sandbox.Agent) error
	// Get finds tenant's agent called name; ErrNotFound if missing.
	Get(ctx context.Context, tenant, name string) (sandbox.Agent, error)
	// List returns the agents of tenant ("" for every tenant), by name and
	// then tenant. None, or no such tenant, is an empty slice, not an
	// error.
	List(ctx context.Context, tenant string) ([]sandbox.Agent, error)
}

// Tokens keeps the bearer tokens, unique by id and by hash.
type Tokens interface {
	// Create inserts t; ErrExists if its id or hash is taken. An empty ID
	// or Hash is an error.
	Create(ctx context.Context, t Token) error
	// ByHash finds a token by its hash, revoked or expired ones included
	// (the caller decides); ErrNotFound if missing.
	ByHash(ctx context.Context, hash string) (Token, error)
	// List returns every token, oldest CreatedAt first (insertion order
	// among equals).
	List(ctx context.Context) ([]Token, error)
	// Revoke sets RevokedAt to at; ErrNotFound if no token has that id.
	// Revoking a revoked token succeeds and keeps the first RevokedAt, so
	// the audit trail says when access really ended. A zero at is an
	// error.
	Revoke(ctx context.Context, id string, at time.Time) error
}

// AuditLog keeps the audit log of every call through a door.
type AuditLog interface {
	// Append appends events to the audit log, all or none. The store gives
	// each its ID, increasing in the order of events and never reused, not
	// even after DeleteBefore; the IDs events carry are ignored. An event
	// with a zero At is an error. No events is a no-op.
	Append(ctx context.Context, events []sandbox.AuditEvent) error
	// List returns the events matching f, oldest At first (ID order among
	// equals): those at or after f.Since, of f.Tenant and f.Agent when set,
	// on a sandbox inside f.SandboxPrefix when set (see
	// sandbox.AuditFilter), and, when f.Limit is positive, only the newest
	// f.Limit of them. None is an empty slice, not an error.
	List(ctx context.Context, f sandbox.AuditFilter) ([]sandbox.AuditEvent, error)
	// DeleteBefore deletes the events whose At is before t and returns how
	// many it deleted.
	DeleteBefore(ctx context.Context, t time.Time) (int64, error)
}

// Secrets keeps the sealed values of tenants' secrets (see package
// secrets; the store never sees the plain value).
type Secrets interface {
	// Put stores the sealed value of tenant's secret name, created or
	// replaced at at: a replacement keeps CreatedAt. Empty arguments are an
	// error.
	Put(ctx context.Context, tenant, name string, sealed []byte, at time.Time) error
	// Get returns the sealed value of tenant's secret name; ErrNotFound if
	// missing.
	Get(ctx context.Context, tenant, name string) ([]byte, error)
	// List describes tenant's secrets, by name (no values).
	List(ctx context.Context, tenant string) ([]sandbox.SecretInfo, error)
	// Delete removes tenant's secret name; ErrNotFound if missing.
	Delete(ctx context.Context, tenant, name string) error
}

// Bindings keeps the tenants' credential bindings (see sandbox.Binding).
type Bindings interface {
	// Put stores tenant b.Tenant's credential binding b.Name, created or
	// replaced. A new one is created at b.CreatedAt (b.UpdatedAt when that
	// is zero); a replacement keeps the stored CreatedAt. Either way
	// UpdatedAt is b.UpdatedAt. An empty Tenant, Name, Secret, Upstream,
	// Header or Format is an error; the store checks nothing else.
	Put(ctx context.Context, b sandbox.Binding) error
	// Get returns tenant's binding name; ErrNotFound if missing.
	Get(ctx context.Context, tenant, name string) (sandbox.Binding, error)
	// List returns tenant's bindings, by name. None, or no such tenant, is
	// an empty slice, not an error.
	List(ctx context.Context, tenant string) ([]sandbox.Binding, error)
	// Delete removes tenant's binding name; ErrNotFound if missing.
	// Deleting the secret a binding names leaves the binding.
	Delete(ctx context.Context, tenant, name string) error
}

// GoneRecords keeps why sandboxes went, by tenant and name.
type GoneRecords interface {
	// Record keeps why a sandbox went, by tenant and name, replacing the
	// record of an earlier sandbox of that name in that tenant. An empty
	// name is an error.
	Record(ctx context.Context, g sandbox.Gone) error
	// Get returns the record of tenant's name; ErrNotFound if none.
	Get(ctx context.Context, tenant, name string) (sandbox.Gone, error)
	// List returns tenant's records ("" for every tenant's), the newest
	// first.
	List(ctx context.Context, tenant string) ([]sandbox.Gone, error)
	// Forget deletes the record of tenant's name (none is not an error)
	// when name is not empty, and every record whose At is before before
	// when before is not zero.
	Forget(ctx context.Context, tenant, name string, before time.Time) error
}

// Images keeps the versions of the tenants' images (see sandbox.Image),
// unique by tenant, name and digest. A name has at most one current
// version, the one Get returns.
//
// Every image belongs to a tenant: an empty Tenant is an error. The
// daemon's own images (the default image) belong to sandbox.SystemTenant,
// the tenant of operators and of the platform's own sandboxes (what
// sandbox.Principal.Home is for a caller without a tenant), and are
// Public so that every tenant sees them.
type Images interface {
	// Put stores img as a version of img.Tenant's image img.Name and makes
	// it the current one: every other version of that name stops being
	// current, in the same transaction, so a reader sees the old current
	// version or the new one, never both or none. img.Current is ignored.
	// A new version keeps every field of img. Putting a version that
	// exists (same tenant, name and digest) makes it current again and
	// sets its Public; the rest of it (Layers, Config, Size, Source, Ref,
	// CreatedAt) is the digest's and stays as stored. An empty Tenant,
	// Name or Digest, no Layers or an empty layer key is an error; the
	// store checks nothing else.
	Put(ctx context.Context, img sandbox.Image) error
	// Get returns the current version of tenant's image name; ErrNotFound
	// if tenant has no image of that name, or none of its versions is
	// current (see Delete). Another tenant's image, public or not, is not
	// found: the caller decides where a name is looked for.
	Get(ctx context.Context, tenant, name string) (sandbox.Image, error)
	// Version returns the version digest of tenant's image name, current
	// or not; ErrNotFound if missing.
	Version(ctx context.Context, tenant, name, digest string) (sandbox.Image, error)
	// List returns every version of tenant's images, by name and then
	// oldest CreatedAt first (insertion order among equals). None, or no
	// such tenant, is an empty slice, not an error.
	List(ctx context.Context, tenant string) ([]sandbox.Image, error)
	// ListPublic returns the current version of every public image of
	// every tenant, by tenant and then name.
	ListPublic(ctx context.Context) ([]sandbox.Image, error)
	// All returns every version of every image of every tenant, by tenant,
	// name and CreatedAt: the layers they hold are the ones a garbage
	// collection of the layer store keeps.
	All(ctx context.Context) ([]sandbox.Image, error)
	// SetPublic sets Public on every version of tenant's image name;
	// ErrNotFound if tenant has no version of it.
	SetPublic(ctx context.Context, tenant, name string, public bool) error
	// Delete removes the version digest of tenant's image name;
	// ErrNotFound if missing. Deleting the current version leaves the name
	// with no current version (Get is then ErrNotFound) rather than
	// falling back to an older one: which version a create uses changes
	// only when a caller says so, by a Put. The store does not look for
	// sandboxes that use the version (the caller asks UsingImage first).
	Delete(ctx context.Context, tenant, name, digest string) error
	// ImageBytes returns the sum of Size over every version of every image
	// of tenant (0 for none): what its images take of its disk allocation.
	ImageBytes(ctx context.Context, tenant string) (int64, error)
}

// RegistryLogins keeps the tenants' credentials for registry hosts (see
// sandbox.RegistryLogin), unique by tenant and host. The password reaches
// the store sealed, never plain: the caller seals it with package secrets
// as Seal(tenant, "registry:"+host, password), bound to the tenant and the
// host under a name no secret can have (a secret's name has no ':'), so
// that a sealed password copied to another tenant or host, or into the
// secrets, does not open.
type RegistryLogins interface {
	// Put stores tenant login.Tenant's credentials for login.Host with the
	// sealed password, created or replaced. A new one is created at
	// login.CreatedAt (login.UpdatedAt when that is zero); a replacement
	// keeps the stored CreatedAt and takes every other field. Either way
	// UpdatedAt is login.UpdatedAt. An empty Tenant or Host is an error;
	// an empty sealedPassword (a host with no password, trusted by its CA
	// or Insecure only) is stored as such. The store checks nothing else
	// (the caller lower-cases Host).
	Put(ctx context.Context, login sandbox.RegistryLogin, sealedPassword []byte) error
	// Get returns tenant's login for host and its sealed password;
	// ErrNotFound if missing.
	Get(ctx context.Context, tenant, host string) (sandbox.RegistryLogin, []byte, error)
	// List returns tenant's logins, by host, without passwords. None, or
	// no such tenant, is an empty slice, not an error.
	List(ctx context.Context, tenant string) ([]sandbox.RegistryLogin, error)
	// Delete removes tenant's login for host; ErrNotFound if missing.
	Delete(ctx context.Context, tenant, host string) error
}

// BuildStep is one entry of a tenant's build cache: the root a Dockerfile
// step left, kept in the layer store under Key (a step key, whose digest
// is the hash of the step's inputs scoped to the tenant), so that a later
// build with the same inputs skips the step. Size is what the step wrote.
type BuildStep struct {
	Tenant    string
	Key       string
	Size      int64
	CreatedAt time.Time
	// UsedAt is when a build last made or reused the step.
	UsedAt time.Time
}

// BuildSteps keeps the build cache's entries, unique by tenant and key.
// Like images they outlive the daemon: a restart keeps the cache.
type BuildSteps interface {
	// Put records step: a new entry at step.CreatedAt (step.UsedAt when
	// that is zero), or, when tenant already has the key, the stored
	// entry with UsedAt moved to step.UsedAt and Size to step.Size (its
	// CreatedAt stays). An empty Tenant or Key is an error.
	Put(ctx context.Context, step BuildStep) error
	// List returns tenant's entries, least recently used first (then by
	// key). None, or no such tenant, is an empty slice, not an error.
	List(ctx context.Context, tenant string) ([]BuildStep, error)
	// All returns every tenant's entries, by tenant, least recently used
	// first within each.
	All(ctx context.Context) ([]BuildStep, error)
	// Delete removes tenant's entry key; ErrNotFound if missing.
	Delete(ctx context.Context, tenant, key string) error
}
