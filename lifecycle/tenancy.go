package lifecycle

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Tenants, agent identities and tokens. Operators manage every one; a
// tenant admin its own tenant's agents and tokens; an agent sees its own
// tenant, itself and its own tokens. What a caller may not see is
// not_found; what its role may never do is permission_denied.

// Tenancy keeps tenants, agent identities and tokens, authenticates
// callers, and reports the limits they are under. It is safe for
// concurrent use.
type Tenancy struct {
	*core
	adm    *admission
	egress *egress
}

// systemTenant owns operator tokens, the operators' sandboxes and the warm
// pool; no tenant can take its name.
const systemTenant = sandbox.SystemTenant

func operatorOnly(what string) error {
	return sandbox.Errorf(sandbox.CodePermissionDenied, "only an operator may %s", what).WithHint("use an operator token")
}

func tenantNotFound(name string) error {
	return sandbox.Errorf(sandbox.CodeNotFound, "tenant %q not found", name).WithHint("`hearth tenant list` shows the tenants you can see")
}

// validateTenant checks what create and update store: the allocation,
// the pool when one is set, and the policy.
func validateTenant(t sandbox.Tenant) error {
	a := t.Allocation
	if a.MilliCPU <= 0 || a.MemoryBytes <= 0 || a.DiskBytes <= 0 {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "tenant %q needs an allocation of CPU, memory and disk, got %d millicpu, %d bytes of memory, %d bytes of disk",
			t.Name, a.MilliCPU, a.MemoryBytes, a.DiskBytes).
			WithHint("give all three, e.g. --cpu 16 --memory 64GiB --disk 500GiB")
	}
	if t.Pool != "" {
		if err := sandbox.ValidatePool(t.Pool); err != nil {
			return err
		}
	}
	_, err := policy.Defaults().With(t.Policy)
	return err
}

// CreateTenant creates a tenant (operators only): t's name, allocation,
// policy and pool ("" for any node). A bad pool is invalid_argument.
func (s *Tenancy) CreateTenant(ctx context.Context, p sandbox.Principal, t sandbox.Tenant) (sandbox.Tenant, error) {
	if p.Role != sandbox.RoleOperator {
		return sandbox.Tenant{}, operatorOnly("create tenants")
	}
	if err := sandbox.ValidateIdentity("tenant", t.Name); err != nil {
		return sandbox.Tenant{}, err
	}
	if t.Name == systemTenant {
		return sandbox.Tenant{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "tenant name %q is reserved", t.Name).WithHint("choose another name")
	}
	t.Allocation.Pids = 0
	if err := validateTenant(t); err != nil {
		return sandbox.Tenant{}, err
	}
	t.CreatedAt = s.now().UTC()
	t.UpdatedAt = t.CreatedAt
	if err := s.opts.Store.Tenants().Create(ctx, t); errors.Is(err, store.ErrExists) {
		return sandbox.Tenant{}, sandbox.Errorf(sandbox.CodeAlreadyExists, "tenant %q exists", t.Name).WithHint("update it, or choose another name")
	} else if err != nil {
		return sandbox.Tenant{}, s.internal("create tenant", err)
	}
	s.log.Info("tenant created", "tenant", t.Name, "by", p.Agent)
	return t, nil
}

// GetTenant returns a tenant p may see: any for an operator, its own for
// anyone else.
func (s *Tenancy) GetTenant(ctx context.Context, p sandbox.Principal, name string) (sandbox.Tenant, error) {
	if p.Role != sandbox.RoleOperator && p.Tenant != name {
		return sandbox.Tenant{}, tenantNotFound(name)
	}
	t, err := s.opts.Store.Tenants().Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return sandbox.Tenant{}, tenantNotFound(name)
	}
	if err != nil {
		return sandbox.Tenant{}, s.internal("get tenant", err)
	}
	return t, nil
}

// Budget is what all of tenant's sandboxes may take together (see
// policy.Budget), for a fleet that enforces it too (package kube's
// ResourceQuota). The system tenant's sandboxes have none: limited false.
// A tenant that does not exist is permission_denied, as its creates are.
func (s *Tenancy) Budget(ctx context.Context, tenant string) (budget sandbox.Resources, limited bool, err error) {
	if tenant == sandbox.SystemTenant {
		return sandbox.Resources{}, false, nil
	}
	t, lim, err := s.adm.tenantLimits(ctx, tenant)
	if err != nil {
		return sandbox.Resources{}, false, err
	}
	return policy.Budget(t.Allocation, lim), true, nil
}

// Pool is the node pool tenant's sandboxes are pinned to (Tenant.Pool),
// for a fleet that places sandboxes on nodes (package kube's Node
// selector): "" for none, and for the system tenant, whose sandboxes run
// on any node. A tenant that does not exist is permission_denied, as its
// creates are.
func (s *Tenancy) Pool(ctx context.Context, tenant string) (string, error) {
	if tenant == sandbox.SystemTenant {
		return "", nil
	}
	t, _, err := s.adm.tenantLimits(ctx, tenant)
	if err != nil {
		return "", err
	}
	return t.Pool, nil
}

// ListTenants returns the tenants p may see, by name.
func (s *Tenancy) ListTenants(ctx context.Context, p sandbox.Principal) ([]sandbox.Tenant, error) {
	if p.Role != sandbox.RoleOperator {
		t, err := s.GetTenant(ctx, p, p.Tenant)
		if sandbox.IsCode(err, sandbox.CodeNotFound) {
			return []sandbox.Tenant{}, nil
		}
		if err != nil {
			return nil, err
		}
		return []sandbox.Tenant{t}, nil
	}
	ts, err := s.opts.Store.Tenants().List(ctx)
	if err != nil {
		return nil, s.internal("list tenants", err)
	}
	return ts, nil
}

// UpdateTenant changes a tenant's allocation, policy or pool (operators
// only; see sandbox.TenantUpdate). A bad pool is invalid_argument.
func (s *Tenancy) UpdateTenant(ctx context.Context, p sandbox.Principal, name string, u sandbox.TenantUpdate) (sandbox.Tenant, error) {
	if p.Role != sandbox.RoleOperator {
		return sandbox.Tenant{}, operatorOnly("change tenants")
	}
	unlock, err := s.adm.lockTenant(ctx, name)
	if err != nil {
		return sandbox.Tenant{}, err
	}
	defer unlock()
	t, err := s.GetTenant(ctx, p, name)
	if err != nil {
		return sandbox.Tenant{}, err
	}
	if u.Allocation != nil {
		t.Allocation = *u.Allocation
		t.Allocation.Pids = 0
	}
	if u.Pool != nil {
		t.Pool = *u.Pool
	}
	if u.ResetPolicy {
		t.Policy = sandbox.PolicyOverrides{}
	}
	t.Policy = mergeOverrides(t.Policy, u.Policy)
	if err := validateTenant(t); err != nil {
		return sandbox.Tenant{}, err
	}
	t.UpdatedAt = s.now().UTC()
	if err := s.opts.Store.Tenants().Update(ctx, t); err != nil {
		return sandbox.Tenant{}, s.internal("update tenant", err)
	}
	s.log.Info("tenant updated", "tenant", t.Name, "by", p.Agent)
	if u.Policy.Egress != nil || u.ResetPolicy {
		s.egress.changed(ctx, t.Name)
	}
	return t, nil
}

// mergeOverrides returns base with every field set in over replacing it.
// Every field of PolicyOverrides is a pointer, nil meaning unset, so the
// merge needs no list of them that a new field could be missing from.
func mergeOverrides(base, over sandbox.PolicyOverrides) sandbox.PolicyOverrides {
	b, o := reflect.ValueOf(&base).Elem(), reflect.ValueOf(over)
	for i := range o.NumField() {
		if f := o.Field(i); !f.IsNil() {
			b.Field(i).Set(f)
		}
	}
	return base
}

// CreateAgent creates an agent identity: an operator in any tenant, a
// tenant admin in its own (a.Tenant empty means the caller's).
func (s *Tenancy) CreateAgent(ctx context.Context, p sandbox.Principal, a sandbox.Agent) (sandbox.Agent, error) {
	if a.Tenant == "" {
		a.Tenant = p.Tenant
	}
	switch {
	case p.Role == sandbox.RoleAgent:
		return sandbox.Agent{}, sandbox.Errorf(sandbox.CodePermissionDenied, "an agent may not create agent identities").WithHint("ask a tenant admin")
	case p.Role == sandbox.RoleTenantAdmin && a.Tenant != p.Tenant:
		return sandbox.Agent{}, tenantNotFound(a.Tenant)
	}
	if err := sandbox.ValidateIdentity("agent", a.Name); err != nil {
		return sandbox.Agent{}, err
	}
	if _, err := s.GetTenant(ctx, p, a.Tenant); err != nil {
		return sandbox.Agent{}, err
	}
	a.CreatedAt = s.now().UTC()
	if err := s.opts.Store.Agents().Create(ctx, a); errors.Is(err, store.ErrExists) {
		return sandbox.Agent{}, sandbox.Errorf(sandbox.CodeAlreadyExists, "agent %q exists in tenant %q", a.Name, a.Tenant).WithHint("agent names are unique within a tenant; choose another")
	} else if errors.Is(err, store.ErrNotFound) {
		return sandbox.Agent{}, tenantNotFound(a.Tenant)
	} else if err != nil {
		return sandbox.Agent{}, s.internal("create agent", err)
	}
	s.log.Info("agent created", "agent", a.Name, "tenant", a.Tenant, "by", p.Agent)
	return a, nil
}

// ListAgents returns the agent identities p may see, by name: an
// operator's of tenant (or all when empty), a tenant admin's of its
// tenant, an agent itself.
func (s *Tenancy) ListAgents(ctx context.Context, p sandbox.Principal, tenant string) ([]sandbox.Agent, error) {
	if p.Role != sandbox.RoleOperator {
		if tenant != "" && tenant != p.Tenant {
			return []sandbox.Agent{}, nil
		}
		tenant = p.Tenant
	}
	as, err := s.opts.Store.Agents().List(ctx, tenant)
	if err != nil {
		return nil, s.internal("list agents", err)
	}
	if p.Role == sandbox.RoleAgent {
		as = slices.DeleteFunc(as, func(a sandbox.Agent) bool { return a.Name != p.Agent })
	}
	return as, nil
}

// CreateToken creates a token and returns its secret, shown this once,
// and its description. An operator may create any; a tenant admin agent
// and tenant-admin tokens of its tenant; an agent none. A caller whose own
// token is restricted to a name prefix may only create tokens restricted
// at least as narrowly.
func (s *Tenancy) CreateToken(ctx context.Context, p sandbox.Principal, req sandbox.TokenRequest) (string, sandbox.TokenInfo, error) {
	if req.Role == "" {
		req.Role = sandbox.RoleAgent
	}
	ttl := time.Duration(req.TTL)
	if ttl < 0 {
		return "", sandbox.TokenInfo{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "token ttl %s is negative", ttl).WithHint("give a positive ttl, or none for a token that does not expire")
	}
	if req.NamePrefix != "" {
		if err := sandbox.ValidateNamePrefix(req.NamePrefix); err != nil {
			return "", sandbox.TokenInfo{}, err
		}
	}
	if !strings.HasPrefix(req.NamePrefix, p.NamePrefix) {
		return "", sandbox.TokenInfo{}, sandbox.Errorf(sandbox.CodePermissionDenied, "your token is restricted to names starting with %q; it may not create a token restricted less narrowly", p.NamePrefix).
			WithHint("give a name prefix that starts with %q", p.NamePrefix)
	}
	switch req.Role {
	case sandbox.RoleOperator:
		if p.Role != sandbox.RoleOperator {
			return "", sandbox.TokenInfo{}, operatorOnly("create operator tokens")
		}
		if req.Agent == "" {
			req.Agent = "operator"
		}
		if err := sandbox.ValidateIdentity("agent", req.Agent); err != nil {
			return "", sandbox.TokenInfo{}, err
		}
		req.Tenant = systemTenant
	case sandbox.RoleTenantAdmin, sandbox.RoleAgent:
		if p.Role == sandbox.RoleAgent {
			return "", sandbox.TokenInfo{}, sandbox.Errorf(sandbox.CodePermissionDenied, "an agent may not create tokens").WithHint("ask a tenant admin")
		}
		if req.Tenant == "" {
			req.Tenant = p.Tenant
		}
		if p.Role == sandbox.RoleTenantAdmin && req.Tenant != p.Tenant {
			return "", sandbox.TokenInfo{}, tenantNotFound(req.Tenant)
		}
		_, err := s.opts.Store.Agents().Get(ctx, req.Tenant, req.Agent)
		if errors.Is(err, store.ErrNotFound) {
			return "", sandbox.TokenInfo{}, sandbox.Errorf(sandbox.CodeNotFound, "agent %q not found in tenant %q", req.Agent, req.Tenant).
				WithHint("create it first: hearth agent create %s --tenant %s", req.Agent, req.Tenant)
		}
		if err != nil {
			return "", sandbox.TokenInfo{}, s.internal("get agent", err)
		}
	default:
		return "", sandbox.TokenInfo{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "unknown role %q", req.Role).
			WithHint("use one of: %s, %s, %s", sandbox.RoleAgent, sandbox.RoleTenantAdmin, sandbox.RoleOperator)
	}
	secret, t, err := s.createToken(ctx, sandbox.Principal{Tenant: req.Tenant, Agent: req.Agent, Role: req.Role, NamePrefix: req.NamePrefix}, ttl)
	if err != nil {
		return "", sandbox.TokenInfo{}, err
	}
	s.log.Info("token created", "token", t.ID, "tenant", req.Tenant, "agent", req.Agent, "role", req.Role, "by", p.Agent)
	return secret, tokenInfo(t), nil
}

func tokenInfo(t store.Token) sandbox.TokenInfo {
	return sandbox.TokenInfo{
		ID: t.ID, Tenant: t.Principal.Tenant, Agent: t.Principal.Agent, Role: t.Principal.Role,
		NamePrefix: t.Principal.NamePrefix, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt,
	}
}

// visibleToken reports whether p may see and revoke t: an operator every
// token, a tenant admin its tenant's, an agent its own identity's.
func visibleToken(p sandbox.Principal, t store.Token) bool {
	switch p.Role {
	case sandbox.RoleOperator:
		return true
	case sandbox.RoleTenantAdmin:
		return t.Principal.Tenant == p.Tenant
	}
	return t.Principal.Tenant == p.Tenant && t.Principal.Agent == p.Agent
}

// ListTokens describes the tokens p may see, oldest first.
func (s *Tenancy) ListTokens(ctx context.Context, p sandbox.Principal) ([]sandbox.TokenInfo, error) {
	ts, err := s.opts.Store.Tokens().List(ctx)
	if err != nil {
		return nil, s.internal("list tokens", err)
	}
	out := []sandbox.TokenInfo{}
	for _, t := range ts {
		if visibleToken(p, t) {
			out = append(out, tokenInfo(t))
		}
	}
	return out, nil
}

// RevokeToken revokes the token with that id, at once and for good.
// Revoking a revoked token succeeds.
func (s *Tenancy) RevokeToken(ctx context.Context, p sandbox.Principal, id string) error {
	ts, err := s.opts.Store.Tokens().List(ctx)
	if err != nil {
		return s.internal("list tokens", err)
	}
	i := slices.IndexFunc(ts, func(t store.Token) bool { return t.ID == id && visibleToken(p, t) })
	if i < 0 {
		return sandbox.Errorf(sandbox.CodeNotFound, "token %q not found", id).WithHint("`hearth token list` shows the tokens you can see")
	}
	if err := s.opts.Store.Tokens().Revoke(ctx, id, s.now().UTC()); err != nil {
		return s.internal("revoke token", err)
	}
	s.log.Info("token revoked", "token", id, "by", p.Agent)
	return nil
}

// Fleetwide is nil when p may read what counts every tenant's sandboxes
// (what, e.g. "read the metrics"): an operator, unless its token is
// restricted to a name prefix, which may read the counts of its own
// sandboxes only. Else permission_denied.
func (s *Tenancy) Fleetwide(p sandbox.Principal, what string) error {
	return s.access(p).fleetwide(what)
}

// AuditScope narrows f to the audit events p may read (see
// sandbox.Principal.ScopeAudit): its tenant's or its own, and, for a
// token restricted to a name prefix, only those on sandboxes inside it.
// ok is false when f asks for events outside the scope.
func (s *Tenancy) AuditScope(p sandbox.Principal, f sandbox.AuditFilter) (_ sandbox.AuditFilter, ok bool) {
	return p.ScopeAudit(f)
}
