package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// tenantColumns are selected in this order; scanTenant follows it.
const tenantColumns = `name, millicpu, memory_bytes, disk_bytes, policy, pool, created_at, updated_at`

// agentColumns are selected and bound in this order.
const agentColumns = `name, tenant, created_at`

// tenants is the store.Tenants view of db: the tenants table.
type tenants struct{ db *DB }

var _ store.Tenants = tenants{}

// Tenants returns the view of the tenants table.
func (db *DB) Tenants() store.Tenants { return tenants{db} }

// Create inserts t. It returns store.ErrExists if t.Name is taken, and an
// error if it is empty. Allocation.Pids is not stored.
func (v tenants) Create(ctx context.Context, t sandbox.Tenant) error {
	if t.Name == "" {
		return errors.New("postgres: create tenant: tenant name must not be empty")
	}
	policy, err := json.Marshal(t.Policy)
	if err == nil {
		err = checkTimes(t.CreatedAt, t.UpdatedAt)
	}
	if err != nil {
		return fmt.Errorf("postgres: create tenant %q: %w", t.Name, err)
	}
	a := t.Allocation
	if _, err := v.db.exec(ctx, `INSERT INTO tenants (`+tenantColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		t.Name, a.MilliCPU, a.MemoryBytes, a.DiskBytes, string(policy), t.Pool, t.CreatedAt, t.UpdatedAt); err != nil {
		return fmt.Errorf("postgres: create tenant %q: %w", t.Name, writeErr(err))
	}
	return nil
}

// Get returns the tenant called name, or store.ErrNotFound.
func (v tenants) Get(ctx context.Context, name string) (sandbox.Tenant, error) {
	return getOne(ctx, v.db, fmt.Sprintf("tenant %q", name), scanTenant,
		`SELECT `+tenantColumns+` FROM tenants WHERE name = $1`, name)
}

// List returns every tenant, by name (byte order). None is an empty slice
// and no error.
func (v tenants) List(ctx context.Context) ([]sandbox.Tenant, error) {
	return queryAll(ctx, v.db, "list tenants", scanTenant, `SELECT `+tenantColumns+` FROM tenants ORDER BY name`)
}

// Update replaces the allocation, policy, pool and updated_at of the
// tenant called t.Name, or returns store.ErrNotFound. created_at is kept.
func (v tenants) Update(ctx context.Context, t sandbox.Tenant) error {
	policy, err := json.Marshal(t.Policy)
	if err == nil {
		err = checkTimes(t.UpdatedAt)
	}
	if err != nil {
		return fmt.Errorf("postgres: update tenant %q: %w", t.Name, err)
	}
	a := t.Allocation
	return v.db.execOne(ctx, "update tenant", strconv.Quote(t.Name),
		`UPDATE tenants SET millicpu = $1, memory_bytes = $2, disk_bytes = $3, policy = $4, pool = $5, updated_at = $6
		WHERE name = $7`,
		a.MilliCPU, a.MemoryBytes, a.DiskBytes, string(policy), t.Pool, t.UpdatedAt, t.Name)
}

// scanTenant reads one row selected with tenantColumns.
func scanTenant(row pgx.Row) (sandbox.Tenant, error) {
	var (
		t      sandbox.Tenant
		policy []byte
	)
	if err := row.Scan(&t.Name, &t.Allocation.MilliCPU, &t.Allocation.MemoryBytes,
		&t.Allocation.DiskBytes, &policy, &t.Pool, &t.CreatedAt, &t.UpdatedAt); err != nil {
		return sandbox.Tenant{}, err
	}
	if err := json.Unmarshal(policy, &t.Policy); err != nil {
		return sandbox.Tenant{}, fmt.Errorf("tenant %q policy: %w", t.Name, err)
	}
	return t, nil
}

// agents is the store.Agents view of db: the agents table.
type agents struct{ db *DB }

var _ store.Agents = agents{}

// Agents returns the view of the agents table.
func (db *DB) Agents() store.Agents { return agents{db} }

// Create inserts a. It returns store.ErrExists if a.Tenant has an agent
// called a.Name, store.ErrNotFound if no tenant is called a.Tenant, and an
// error if either name is empty.
func (v agents) Create(ctx context.Context, a sandbox.Agent) error {
	if a.Name == "" || a.Tenant == "" {
		return errors.New("postgres: create agent: agent and tenant names must not be empty")
	}
	if err := checkTimes(a.CreatedAt); err != nil {
		return fmt.Errorf("postgres: create agent %q: created_at: %w", a.Name, err)
	}
	_, err := v.db.exec(ctx, `INSERT INTO agents (`+agentColumns+`) VALUES ($1, $2, $3)`, a.Name, a.Tenant, a.CreatedAt)
	if isForeignKey(err) {
		return fmt.Errorf("postgres: create agent %q: tenant %q: %w", a.Name, a.Tenant, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("postgres: create agent %q: %w", a.Name, writeErr(err))
	}
	return nil
}

// Get returns tenant's agent called name, or store.ErrNotFound.
func (v agents) Get(ctx context.Context, tenant, name string) (sandbox.Agent, error) {
	return getOne(ctx, v.db, fmt.Sprintf("agent %q of %q", name, tenant), scanAgent,
		`SELECT `+agentColumns+` FROM agents WHERE tenant = $1 AND name = $2`, tenant, name)
}

// List returns the agents of tenant, or of every tenant if it is "", by
// name and then tenant (byte order). None, or no such tenant, is an empty
// slice and no error.
func (v agents) List(ctx context.Context, tenant string) ([]sandbox.Agent, error) {
	q, args := `SELECT `+agentColumns+` FROM agents`, []any{}
	if tenant != "" {
		q, args = q+` WHERE tenant = $1`, append(args, tenant)
	}
	return queryAll(ctx, v.db, fmt.Sprintf("list agents of %q", tenant), scanAgent, q+` ORDER BY name, tenant`, args...)
}

// scanAgent reads one row selected with agentColumns.
func scanAgent(row pgx.Row) (sandbox.Agent, error) {
	var a sandbox.Agent
	err := row.Scan(&a.Name, &a.Tenant, &a.CreatedAt)
	return a, err
}
