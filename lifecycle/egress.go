package lifecycle

import (
	"context"
	"errors"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// egress decides the egress rules of sandboxes from their own policy and
// their tenant's, and gives them to the runtime.
type egress struct{ *core }

// tenant returns the egress policy of tenant ("system", with no
// row, has none).
func (s *egress) tenant(ctx context.Context, tenant string) (sandbox.EgressPolicy, error) {
	t, err := s.opts.Store.Tenants().Get(ctx, tenant)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return sandbox.EgressPolicy{}, nil
	case err != nil:
		return sandbox.EgressPolicy{}, s.internal("get tenant", err)
	case t.Policy.Egress == nil:
		return sandbox.EgressPolicy{}, nil
	}
	return *t.Policy.Egress, nil
}

// rules are the rules the runtime enforces for sb, its own policy
// within its tenant's (see sandbox.EgressPolicy.Effective). An own Allow
// that the tenant has since narrowed past is dropped for the tenant's,
// which bounds it anyway.
func (s *egress) rules(ctx context.Context, sb sandbox.Sandbox) (node.EgressRules, error) {
	tenant, err := s.tenant(ctx, sb.Tenant)
	if err != nil {
		return node.EgressRules{}, err
	}
	allow, deny, err := sb.Egress.Effective(tenant)
	if err != nil {
		s.log.Warn("the sandbox's egress allow list is outside its tenant's; the tenant's applies", "sandbox", sb.Name, "err", err)
		own := sandbox.EgressPolicy{Deny: sb.Egress.Deny}
		if allow, deny, err = own.Effective(tenant); err != nil {
			return node.EgressRules{}, s.internal("egress policy of "+sb.Name, err)
		}
	}
	return node.EgressRules{Allow: allow.Networks, AllowDomains: allow.Domains, Deny: deny.Networks, DenyDomains: deny.Domains}, nil
}

// apply gives the running egress sandbox sb its egress rules now, a
// live change: the runtime enforces them from the next packet on. Other
// sandboxes get theirs at their next start.
func (s *egress) apply(ctx context.Context, sb sandbox.Sandbox) error {
	if sb.Network != sandbox.NetworkEgress || sb.Status != sandbox.StatusRunning {
		return nil
	}
	rules, err := s.rules(ctx, sb)
	if err != nil {
		return err
	}
	if err := s.opts.Node.SetEgress(ctx, sb.ID, rules); err != nil {
		return s.internal("set the egress rules of "+sb.Name, err)
	}
	return nil
}

// policyTopic is the store's notice (store.Changes) that a tenant's
// policy changed; its payload is the tenant.
const policyTopic = "tenant.policy"

// changed applies tenant's changed policy to this node's sandboxes and
// tells the store's other nodes, which apply it to theirs (watch).
func (s *egress) changed(ctx context.Context, tenant string) {
	s.applyTenant(ctx, tenant)
	if err := s.opts.Store.Changes().Notify(ctx, policyTopic, tenant); err != nil {
		s.log.Error("tell the other nodes of a tenant's policy change: theirs get it at their next start", "tenant", tenant, "err", err)
	}
}

// watch applies the policy changes the store's nodes announce to this
// node's sandboxes until ctx ends; "" (notices may have been missed)
// applies every tenant's.
func (s *egress) watch(ctx context.Context) {
	changes, err := s.opts.Store.Changes().Listen(ctx, policyTopic)
	if err != nil {
		s.log.Error("policy changes made through other nodes apply here only at a sandbox's next start", "err", err)
		return
	}
	for tenant := range changes {
		s.applyTenant(ctx, tenant)
	}
}

// applyTenant gives every running egress sandbox of tenant ("": of every
// tenant) on this node its rules again, after a change of the tenant's
// policy; a failure is logged (the sandbox gets its rules at its next
// start).
func (s *egress) applyTenant(ctx context.Context, tenant string) {
	list, err := s.opts.Store.Sandboxes().List(ctx, store.Filter{Tenant: tenant})
	if err != nil {
		s.log.Error("list the tenant's sandboxes to apply its egress policy", "tenant", tenant, "err", err)
		return
	}
	for _, sb := range list {
		if !s.mine(sb) {
			continue
		}
		if err := s.apply(ctx, sb); err != nil {
			s.log.Error("apply the tenant's egress policy", "sandbox", sb.Name, "err", err)
		}
	}
}
