package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Admission: every create of a new sandbox by a tenant's principal (an
// agent or a tenant admin; operators and the warm pool are not limited)
// passes the guardrails of package policy with its tenant's limits and
// usage: the create-rate breaker, the agent's quota, the tenant's budget
// and the TTL cap. Usage is read from the store under the tenant's lock,
// held until the new row exists, so that concurrent creates count each
// other: the store's admission lock (store.Admissions.Lock), which holds
// across every daemon of a shared store, taken behind a lock in this
// process so that a daemon queues its own creates of one tenant in memory
// and holds one of the store's locks per tenant at most. The create-rate
// state (policy.Rate) is the store's too, read and written under the same
// lock: every daemon counts against one rate and one breaker, and a
// restart forgets neither.

// admission applies the guardrails to creates and tells which limits are
// in force for a tenant.
type admission struct {
	*core
	// tenantLocks queues this process's holders of a tenant's lock (see
	// lockTenant).
	tenantLocks keyedMutex
}

// lockTenant takes tenant's admission lock, in this process and in the
// store, waiting until both are free or ctx is done. Creates of a new
// sandbox hold it from admission to the new row, and tenant updates while
// they change the tenant, so that neither decides on usage or limits the
// other is changing.
func (s *admission) lockTenant(ctx context.Context, tenant string) (func(), error) {
	local := s.tenantLocks.lock(tenant)
	shared, err := s.opts.Store.Admissions().Lock(ctx, tenant)
	if err != nil {
		local()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, s.internal("lock tenant "+tenant, err)
	}
	return sync.OnceFunc(func() { shared(); local() }), nil
}

// admit applies the guardrails to p's create of a new sandbox of size res
// asking for ttl (0: the default). It returns the ttl the sandbox gets and
// a release that the caller must call once the sandbox's row exists (or
// the create failed); the tenant stays locked until then.
func (s *admission) admit(ctx context.Context, p sandbox.Principal, size string, res sandbox.Resources, ttl time.Duration) (time.Duration, func(), error) {
	unlock, err := s.lockTenant(ctx, p.Tenant)
	if err != nil {
		return 0, nil, err
	}
	ttl, err = s.decide(ctx, p, size, res, ttl)
	if err != nil {
		unlock()
		return 0, nil, err
	}
	return ttl, unlock, nil
}

// decide is admit's decision, under the tenant's lock.
func (s *admission) decide(ctx context.Context, p sandbox.Principal, size string, res sandbox.Resources, ttl time.Duration) (time.Duration, error) {
	t, lim, err := s.tenantLimits(ctx, p.Tenant)
	if err != nil {
		return 0, err
	}
	if err := s.admitRate(ctx, p, lim); err != nil {
		return 0, err
	}
	u, err := s.usageOf(ctx, p, false)
	if err != nil {
		return 0, err
	}
	if ttl == 0 {
		ttl = min(s.opts.DefaultTTL, lim.MaxTTL)
	}
	ttl, err = policy.AdmitCreate(policy.CreateRequest{
		Agent: p.Agent, Tenant: p.Tenant, Size: size, Resources: res, TTL: ttl,
	}, u, t.Allocation, lim)
	if err != nil {
		return 0, withoutUsage(p, err)
	}
	return ttl, nil
}

// usageOf is what p's tenant holds now (the sum of its sandboxes' sizes,
// and, unscoped, the disk its image versions hold) and how many
// sandboxes p's identity holds. With scoped, it counts only
// the sandboxes inside p's name prefix (access.sees's rule): what a token
// restricted to a prefix may be told, which admission, counting all, never
// uses.
func (s *admission) usageOf(ctx context.Context, p sandbox.Principal, scoped bool) (policy.Usage, error) {
	rows, err := s.opts.Store.Sandboxes().List(ctx, store.Filter{Tenant: p.Tenant})
	if err != nil {
		return policy.Usage{}, s.internal("list the tenant's sandboxes", err)
	}
	var u policy.Usage
	for _, sb := range rows {
		if scoped && !p.InScope(sb.Name) {
			continue
		}
		u.Tenant = addResources(u.Tenant, sb.Resources)
		if sb.Owner == p.Agent {
			u.AgentSandboxes++
		}
	}
	if !scoped {
		images, err := s.opts.Store.Images().ImageBytes(ctx, p.Home())
		if err != nil {
			return policy.Usage{}, s.internal("count the tenant's images", err)
		}
		u.Tenant.DiskBytes += images
	}
	return u, nil
}

// diskBudget is p's tenant's disk budget and what its sandboxes and
// images hold of it; a limit of 0 is none.
func (s *admission) diskBudget(ctx context.Context, p sandbox.Principal) (limit, used int64, err error) {
	t, lim, err := s.tenantLimits(ctx, p.Tenant)
	if err != nil {
		return 0, 0, err
	}
	u, err := s.usageOf(ctx, p, false)
	if err != nil {
		return 0, 0, err
	}
	return policy.Budget(t.Allocation, lim).DiskBytes, u.Tenant.DiskBytes, nil
}

// withoutUsage restates a quota or budget refusal of p's create without
// the usage it counted when p's token is restricted to a name prefix: that
// usage counts sandboxes outside the prefix, which the token may not be
// told of (see Tenancy.Limits). The limit and what was asked stay.
func withoutUsage(p sandbox.Principal, err error) error {
	var se *sandbox.Error
	if p.NamePrefix == "" || !errors.As(err, &se) {
		return err
	}
	switch se.Code {
	case sandbox.CodeQuotaExceeded:
		return sandbox.Errorf(se.Code, "quota exceeded: agent-%s's quota of %v sandboxes is in use", p.Agent, se.Details["limit"]).
			WithHint("%s", se.Hint).With("limit", se.Details["limit"])
	case sandbox.CodeBudgetExceeded:
		return sandbox.Errorf(se.Code, "budget exceeded: tenant %s's sandboxes would go over its %v budget", p.Tenant, se.Details["resource"]).
			WithHint("%s", se.Hint).With("resource", se.Details["resource"]).With("limit", se.Details["limit"]).With("requested", se.Details["requested"])
	}
	return err
}

// tenantLimits returns tenant and the guardrails in force for it: the
// daemon's defaults (its MaxTTL and IdleTimeout included) under the
// tenant's overrides.
func (s *admission) tenantLimits(ctx context.Context, tenant string) (sandbox.Tenant, policy.Limits, error) {
	t, err := s.opts.Store.Tenants().Get(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return sandbox.Tenant{}, policy.Limits{}, sandbox.Errorf(sandbox.CodePermissionDenied, "tenant %q does not exist, so it has no capacity for sandboxes", tenant).
			WithHint("ask an operator to create the tenant")
	}
	if err != nil {
		return sandbox.Tenant{}, policy.Limits{}, s.internal("get tenant", err)
	}
	lim, err := s.defaultLimits().With(t.Policy)
	if err != nil {
		return sandbox.Tenant{}, policy.Limits{}, s.internal("tenant "+tenant+" policy", err)
	}
	return t, lim, nil
}

// defaultLimits are policy's defaults with the daemon's own TTL cap and
// idle timeout.
func (s *admission) defaultLimits() policy.Limits {
	l := policy.Defaults()
	l.MaxTTL, l.IdleTimeout = s.opts.MaxTTL, s.opts.IdleTimeout
	return l
}

// admitRate counts p's create against its identity's rate and breaker,
// kept in the store, raising the alarm or refusing as policy.Rate
// decides. The caller holds p's tenant's lock.
func (s *admission) admitRate(ctx context.Context, p sandbox.Principal, lim policy.Limits) error {
	now := s.now()
	r, err := s.opts.Store.Admissions().Rate(ctx, p.Tenant, p.Agent)
	if err != nil {
		return s.internal("read the create rate", err)
	}
	r, d := r.Admit(p.Agent, now, lim)
	if err := s.opts.Store.Admissions().SetRate(ctx, p.Tenant, p.Agent, r); err != nil {
		return s.internal("keep the create rate", err)
	}
	_, recent, _ := r.Status(now, lim)
	switch {
	case d.Tripped:
		var se *sandbox.Error
		limit := lim.BreakerFactor * lim.AlarmCreatesPerMinute
		if errors.As(d.Err, &se) {
			limit, _ = se.Details["limit"].(int) // the half-open limit when a half-open breaker re-opened
		}
		s.raise(sandbox.Alarm{Kind: "circuit_open", Tenant: p.Tenant, Agent: p.Agent, Message: d.Err.Error(),
			Recent: recent, Limit: limit, At: now.UTC()})
	case d.Alarm:
		s.raise(sandbox.Alarm{Kind: "create_rate", Tenant: p.Tenant, Agent: p.Agent,
			Message: fmt.Sprintf("create-rate alarm: agent-%s made %d creates in the last minute (the alarm is at %d)", p.Agent, recent, lim.AlarmCreatesPerMinute),
			Recent:  recent, Limit: lim.AlarmCreatesPerMinute, At: now.UTC()})
	}
	return d.Err
}

// rateStatus reports p's identity's create rate and breaker at now.
func (s *admission) rateStatus(ctx context.Context, p sandbox.Principal, now time.Time, lim policy.Limits) (sandbox.RateReport, error) {
	r, err := s.opts.Store.Admissions().Rate(ctx, p.Tenant, p.Agent)
	if err != nil {
		return sandbox.RateReport{}, s.internal("read the create rate", err)
	}
	state, recent, until := r.Status(now, lim)
	rep := sandbox.RateReport{
		Recent: recent, AlarmPerMinute: lim.AlarmCreatesPerMinute, BreakerLimit: lim.BreakerFactor * lim.AlarmCreatesPerMinute,
		Breaker: string(state),
	}
	if !until.IsZero() {
		rep.Until = until.UTC()
	}
	for _, at := range r.Recent {
		if now.Sub(at) < time.Minute {
			rep.ResetsAt = at.Add(time.Minute).UTC()
			break
		}
	}
	return rep, nil
}

// raise logs an alarm and hands it to Options.Alarms.
func (s *admission) raise(a sandbox.Alarm) {
	s.log.Warn("alarm", "kind", a.Kind, "tenant", a.Tenant, "agent", a.Agent, "recent", a.Recent, "limit", a.Limit, "message", a.Message)
	if s.opts.Alarms != nil {
		s.opts.Alarms(a)
	}
}

func addResources(a, b sandbox.Resources) sandbox.Resources {
	return sandbox.Resources{
		MilliCPU: a.MilliCPU + b.MilliCPU, MemoryBytes: a.MemoryBytes + b.MemoryBytes,
		Pids: a.Pids + b.Pids, DiskBytes: a.DiskBytes + b.DiskBytes,
	}
}

// Limits reports the guardrails p is under and its usage of each (see
// sandbox.LimitsReport). A token restricted to a name prefix is told the
// usage of the sandboxes inside it only: the counts of the others are
// theirs.
func (s *Tenancy) Limits(ctx context.Context, p sandbox.Principal) (sandbox.LimitsReport, error) {
	return s.limits(ctx, p)
}

// LimitsOf is Limits of the tenant and agent p names (both "": p's own),
// as the access rule allows (access.limitsOf): an operator any tenant's
// or agent's, a tenant admin its tenant's and its agents', an agent its
// own. A tenant or agent that does not exist is not_found.
func (s *Tenancy) LimitsOf(ctx context.Context, p sandbox.Principal, tenant, agent string) (sandbox.LimitsReport, error) {
	of, err := s.access(p).limitsOf(tenant, agent)
	if err != nil {
		return sandbox.LimitsReport{}, err
	}
	if of != p {
		if err := s.exists(ctx, of); err != nil {
			return sandbox.LimitsReport{}, err
		}
	}
	return s.limits(ctx, of)
}

// exists is nil when of's tenant, and its agent if it names one, exist;
// else not_found.
func (s *Tenancy) exists(ctx context.Context, of sandbox.Principal) error {
	_, err := s.opts.Store.Tenants().Get(ctx, of.Tenant)
	if err == nil && of.Agent != "" {
		_, err = s.opts.Store.Agents().Get(ctx, of.Tenant, of.Agent)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return sandbox.Errorf(sandbox.CodeNotFound, "no tenant %q with an agent %q", of.Tenant, of.Agent).WithHint("hearth tenant list; hearth agent list")
	case err != nil:
		return s.internal("get tenant or agent", err)
	}
	return nil
}

// limits is Limits of principal p.
func (s *Tenancy) limits(ctx context.Context, p sandbox.Principal) (sandbox.LimitsReport, error) {
	rep := sandbox.LimitsReport{Tenant: p.Tenant, Agent: p.Agent, Role: p.Role, MaxTTL: sandbox.Duration(s.opts.MaxTTL)}
	if p.Role == sandbox.RoleOperator {
		return rep, nil
	}
	t, lim, err := s.adm.tenantLimits(ctx, p.Tenant)
	if err != nil {
		return sandbox.LimitsReport{}, err
	}
	u, err := s.adm.usageOf(ctx, p, true)
	if err != nil {
		return sandbox.LimitsReport{}, err
	}
	budget := policy.Budget(t.Allocation, lim)
	rate, err := s.adm.rateStatus(ctx, p, s.now(), lim)
	if err != nil {
		return sandbox.LimitsReport{}, err
	}
	rep.Sandboxes = &sandbox.Quota{Limit: policy.AgentQuota(lim, budget), Used: u.AgentSandboxes}
	rep.Budget = &sandbox.ResourceQuota{Limit: budget, Used: u.Tenant}
	rep.Allocation, rep.CreateRate = &t.Allocation, &rate
	rep.MaxTTL, rep.IdleTimeout = sandbox.Duration(lim.MaxTTL), sandbox.Duration(lim.IdleTimeout)
	rep.Network, rep.AllowEgress = lim.Network, lim.AllowEgress
	return rep, nil
}

// limitsOf returns the guardrails of tenant, or the daemon's defaults for
// a tenant with no row (the operators' "system").
func (s *admission) limitsOf(ctx context.Context, tenant string) policy.Limits {
	if _, lim, err := s.tenantLimits(ctx, tenant); err == nil {
		return lim
	}
	return s.defaultLimits()
}
