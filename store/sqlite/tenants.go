package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

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

// Create inserts t. It returns store.ErrExists if t.Name is taken, and
// an error if it is empty. Allocation.Pids is not stored.
func (v tenants) Create(ctx context.Context, t sandbox.Tenant) error {
	if t.Name == "" {
		return errors.New("sqlite: create tenant: tenant name must not be empty")
	}
	policy, err := policyJSON(t.Policy)
	if err != nil {
		return fmt.Errorf("sqlite: create tenant %q: %w", t.Name, err)
	}
	created, err := formatTime(t.CreatedAt)
	if err != nil {
		return fmt.Errorf("sqlite: create tenant %q: created_at: %w", t.Name, err)
	}
	updated, err := formatTime(t.UpdatedAt)
	if err != nil {
		return fmt.Errorf("sqlite: create tenant %q: updated_at: %w", t.Name, err)
	}
	_, err = v.db.w.ExecContext(ctx,
		`INSERT INTO tenants (`+tenantColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		t.Name, t.Allocation.MilliCPU, t.Allocation.MemoryBytes, t.Allocation.DiskBytes,
		policy, t.Pool, created, updated)
	if err != nil {
		return fmt.Errorf("sqlite: create tenant %q: %w", t.Name, writeErr(err))
	}
	return nil
}

// Get returns the tenant called name, or store.ErrNotFound.
func (v tenants) Get(ctx context.Context, name string) (sandbox.Tenant, error) {
	row := v.db.r.QueryRowContext(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE name = ?`, name)
	t, err := scanTenant(row)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Tenant{}, fmt.Errorf("sqlite: tenant %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return sandbox.Tenant{}, fmt.Errorf("sqlite: get tenant %q: %w", name, err)
	}
	return t, nil
}

// List returns every tenant, by name (byte order). None is an empty
// slice and no error.
func (v tenants) List(ctx context.Context) ([]sandbox.Tenant, error) {
	return queryAll(ctx, v.db, "list tenants", scanTenant, `SELECT `+tenantColumns+` FROM tenants ORDER BY name`)
}

// Update replaces the allocation, policy, pool and updated_at of the
// tenant called t.Name, or returns store.ErrNotFound. created_at is kept.
func (v tenants) Update(ctx context.Context, t sandbox.Tenant) error {
	policy, err := policyJSON(t.Policy)
	if err != nil {
		return fmt.Errorf("sqlite: update tenant %q: %w", t.Name, err)
	}
	updated, err := formatTime(t.UpdatedAt)
	if err != nil {
		return fmt.Errorf("sqlite: update tenant %q: updated_at: %w", t.Name, err)
	}
	res, err := v.db.w.ExecContext(ctx,
		`UPDATE tenants SET millicpu = ?, memory_bytes = ?, disk_bytes = ?, policy = ?, pool = ?, updated_at = ?
		WHERE name = ?`,
		t.Allocation.MilliCPU, t.Allocation.MemoryBytes, t.Allocation.DiskBytes, policy, t.Pool, updated, t.Name)
	if err != nil {
		return fmt.Errorf("sqlite: update tenant %q: %w", t.Name, err)
	}
	return affectedOne(res, "update tenant", t.Name)
}

// agents is the store.Agents view of db: the agents table.
type agents struct{ db *DB }

var _ store.Agents = agents{}

// Agents returns the view of the agents table.
func (db *DB) Agents() store.Agents { return agents{db} }

// Create inserts a. It returns store.ErrExists if a.Tenant has an
// agent called a.Name, store.ErrNotFound if no tenant is called a.Tenant,
// and an error if either name is empty.
func (v agents) Create(ctx context.Context, a sandbox.Agent) error {
	if a.Name == "" || a.Tenant == "" {
		return errors.New("sqlite: create agent: agent and tenant names must not be empty")
	}
	created, err := formatTime(a.CreatedAt)
	if err != nil {
		return fmt.Errorf("sqlite: create agent %q: created_at: %w", a.Name, err)
	}
	_, err = v.db.w.ExecContext(ctx,
		`INSERT INTO agents (`+agentColumns+`) VALUES (?, ?, ?)`, a.Name, a.Tenant, created)
	if isForeignKey(err) {
		return fmt.Errorf("sqlite: create agent %q: tenant %q: %w", a.Name, a.Tenant, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlite: create agent %q: %w", a.Name, writeErr(err))
	}
	return nil
}

// Get returns tenant's agent called name, or store.ErrNotFound.
func (v agents) Get(ctx context.Context, tenant, name string) (sandbox.Agent, error) {
	row := v.db.r.QueryRowContext(ctx, `SELECT `+agentColumns+` FROM agents WHERE tenant = ? AND name = ?`, tenant, name)
	a, err := scanAgent(row)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Agent{}, fmt.Errorf("sqlite: agent %q of %q: %w", name, tenant, store.ErrNotFound)
	}
	if err != nil {
		return sandbox.Agent{}, fmt.Errorf("sqlite: get agent %q of %q: %w", name, tenant, err)
	}
	return a, nil
}

// List returns the agents of tenant, or of every tenant if it is "",
// by name and then tenant (byte order). None, or no such tenant, is an
// empty slice and no error.
func (v agents) List(ctx context.Context, tenant string) ([]sandbox.Agent, error) {
	q := `SELECT ` + agentColumns + ` FROM agents`
	var args []any
	if tenant != "" {
		q += ` WHERE tenant = ?`
		args = append(args, tenant)
	}
	q += ` ORDER BY name, tenant`
	return queryAll(ctx, v.db, fmt.Sprintf("list agents of %q", tenant), scanAgent, q, args...)
}

// policyJSON encodes p for the policy column: nil fields are left out, set
// ones kept, even at zero (the fields are pointers with omitempty).
func policyJSON(p sandbox.PolicyOverrides) (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("policy: %w", err)
	}
	return string(b), nil
}

// scanTenant reads one row selected with tenantColumns.
func scanTenant(s scanner) (sandbox.Tenant, error) {
	var (
		t                sandbox.Tenant
		policy           string
		created, updated string
	)
	if err := s.Scan(&t.Name, &t.Allocation.MilliCPU, &t.Allocation.MemoryBytes,
		&t.Allocation.DiskBytes, &policy, &t.Pool, &created, &updated); err != nil {
		return sandbox.Tenant{}, err
	}
	if err := json.Unmarshal([]byte(policy), &t.Policy); err != nil {
		return sandbox.Tenant{}, fmt.Errorf("tenant %q policy: %w", t.Name, err)
	}
	var err error
	if t.CreatedAt, err = parseTime(created); err != nil {
		return sandbox.Tenant{}, fmt.Errorf("tenant %q created_at: %w", t.Name, err)
	}
	if t.UpdatedAt, err = parseTime(updated); err != nil {
		return sandbox.Tenant{}, fmt.Errorf("tenant %q updated_at: %w", t.Name, err)
	}
	return t, nil
}

// scanAgent reads one row selected with agentColumns.
func scanAgent(s scanner) (sandbox.Agent, error) {
	var (
		a       sandbox.Agent
		created string
	)
	if err := s.Scan(&a.Name, &a.Tenant, &created); err != nil {
		return sandbox.Agent{}, err
	}
	var err error
	if a.CreatedAt, err = parseTime(created); err != nil {
		return sandbox.Agent{}, fmt.Errorf("agent %q created_at: %w", a.Name, err)
	}
	return a, nil
}
