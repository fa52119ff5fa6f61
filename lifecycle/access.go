package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Authorization: one rule for every reference.
//
// Whatever a caller names (a sandbox, as NAME or TENANT/NAME; a checkpoint
// of it, to restore, fork or delete; an image to create from; the tenant
// whose secrets or bindings it reads or sets) becomes something lifecycle
// acts on only through access, the caller's scope: its tenant, its agent
// identity, its role and its token's name prefix (see sandbox.Principal).
// A reference outside the scope is not_found, with the same code and
// message as one to nothing at all, and is decided before anything is
// looked up where the reference alone shows it is outside (another
// tenant's, a name outside the prefix), so that neither the answer nor its
// timing tells another tenant's names apart. What a role may never do in
// its own scope (an agent setting a secret) is permission_denied.
//
// Sandbox ids are never references: a sandbox can read its own id, so an
// id proves nothing about who is calling. Images are only images: the
// daemon's default image; the layer keys of checkpoints (ck-…) and
// sandbox roots (sb-…), though the layer store holds them beside images,
// are not.

// access is what one principal may reach. Every door's call on a sandbox,
// checkpoint, image, secret or binding goes through it.
type access struct {
	s *core
	p sandbox.Principal
}

// access returns p's scope.
func (s *core) access(p sandbox.Principal) access { return access{s: s, p: p} }

// target is a sandbox reference resolved: the tenant and stored name it
// names, and ref, how its caller writes it (for messages).
type target struct{ tenant, name, ref string }

// key is the target's lock key: names are unique per tenant.
func (t target) key() string { return sandbox.Ref(t.tenant, t.name) }

// locate resolves ref, as the caller wrote it, to the sandbox it names,
// without deciding whether the caller may see it and without a store
// look-up. Errors: invalid_argument for a malformed reference.
func (a access) locate(ref string) (target, error) {
	tenant, name, err := a.p.Locate(ref)
	if err != nil {
		return target{}, err
	}
	return target{tenant: tenant, name: name, ref: a.p.RefOf(tenant, name)}, nil
}

// sees reports whether the caller may see and act on sb: the one
// predicate of look-ups, lists and counts. Unclaimed warm-pool members
// are no one's.
func (a access) sees(sb sandbox.Sandbox) bool {
	return !isPoolMember(sb) && a.p.Owns(sb.Tenant, sb.Owner) && a.p.InScope(sb.Name)
}

// reaches reports whether a sandbox of t could be the caller's at all, from
// the reference alone: one of its own tenant (any, for an operator) and
// inside its name prefix.
func (a access) reaches(t target) bool {
	return (a.p.Role == sandbox.RoleOperator || t.tenant == a.p.Tenant) && a.p.InScope(t.name)
}

// sandbox returns the sandbox t names if the caller sees it and this node
// runs it. Otherwise it is not_found, saying why the caller's own sandbox
// of that name went when it went within the retention period, or, for
// another node's sandbox, unavailable naming that node (see elsewhere).
func (a access) sandbox(ctx context.Context, t target) (sandbox.Sandbox, error) {
	sb, err := a.row(ctx, t)
	if err == nil && !a.s.mine(sb) {
		return sandbox.Sandbox{}, elsewhere(t.ref, sb)
	}
	return sb, err
}

// row is sandbox without the node's check: the stored row of the sandbox
// t names, on whichever node, if the caller sees it.
func (a access) row(ctx context.Context, t target) (sandbox.Sandbox, error) {
	if !a.reaches(t) {
		return sandbox.Sandbox{}, notFound(t.ref)
	}
	sb, err := a.s.opts.Store.Sandboxes().Get(ctx, t.tenant, t.name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return sandbox.Sandbox{}, a.gone(ctx, t)
	case err != nil:
		return sandbox.Sandbox{}, a.s.internal("get sandbox", err)
	case !a.sees(sb):
		return sandbox.Sandbox{}, notFound(t.ref)
	}
	return sb, nil
}

// get is locate and sandbox: the sandbox ref names, if the caller sees it.
func (a access) get(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	t, err := a.locate(ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return a.sandbox(ctx, t)
}

// gone is the not_found of t, which has no sandbox: when the caller's own
// sandbox of that name went within the retention period, it says why and
// when (details reason, last_status, gone_at); to an operator naming an
// operators' sandbox that is not there, it names the tenants that have a
// sandbox of that name.
func (a access) gone(ctx context.Context, t target) error {
	g, err := a.s.opts.Store.Gone().Get(ctx, t.tenant, t.name)
	if err != nil || !a.p.Owns(g.Tenant, g.Owner) || a.s.now().Sub(g.At) > a.s.opts.GoneRetention {
		return a.elsewhere(ctx, t, notFound(t.ref))
	}
	msg := fmt.Sprintf("sandbox %q is gone: %s at %s", t.ref, g.Reason, g.At.UTC().Format(time.RFC3339))
	if g.Last != "" {
		msg += "; its status before: " + g.Last
	}
	e := sandbox.Errorf(sandbox.CodeNotFound, "%s", msg).WithHint("create it again to start afresh").
		With("reason", g.Reason).With("gone_at", g.At.UTC().Format(time.RFC3339))
	if g.Last != "" {
		e = e.With("last_status", g.Last)
	}
	return e
}

// elsewhere adds to err, the not_found of an operator's bare name, the
// tenants that have a sandbox of that name: an operator's NAME is the
// system tenant's, never one of several tenants' picked silently.
func (a access) elsewhere(ctx context.Context, t target, err error) error {
	if a.p.Role != sandbox.RoleOperator || t.ref != t.name {
		return err
	}
	rows, lerr := a.s.opts.Store.Sandboxes().List(ctx, store.Filter{Name: t.name})
	if lerr != nil {
		return err
	}
	var tenants []string
	for _, sb := range rows {
		if a.sees(sb) && !slices.Contains(tenants, sb.Tenant) {
			tenants = append(tenants, sb.Tenant)
		}
	}
	if len(tenants) == 0 {
		return err
	}
	slices.Sort(tenants)
	who := "tenant " + tenants[0] + " has"
	if len(tenants) > 1 {
		who = "tenants " + strings.Join(tenants, ", ") + " have"
	}
	return sandbox.Errorf(sandbox.CodeNotFound, "sandbox %q not found in tenant %s; %s a sandbox of that name",
		t.name, sandbox.SystemTenant, who).
		WithHint("a name without a tenant is the %s tenant's: write TENANT/NAME, e.g. %q", sandbox.SystemTenant, sandbox.Ref(tenants[0], t.name)).
		With("tenants", tenants)
}

func notFound(ref string) error {
	return sandbox.Errorf(sandbox.CodeNotFound, "sandbox %q not found", ref).WithHint("`hearth list` shows your sandboxes")
}

// checkpoint returns checkpoint id of sb, a sandbox the caller sees (from
// sandbox), or not_found naming both: a checkpoint is reached only through
// its own sandbox, never by its id alone.
func (a access) checkpoint(ctx context.Context, sb sandbox.Sandbox, id string) (sandbox.Checkpoint, error) {
	c, err := a.s.opts.Store.Checkpoints().Get(ctx, sb.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		return sandbox.Checkpoint{}, sandbox.Errorf(sandbox.CodeNotFound, "sandbox %q has no checkpoint %q", a.p.RefOf(sb.Tenant, sb.Name), id).
			WithHint("`hearth checkpoints %s` lists its checkpoints", a.p.RefOf(sb.Tenant, sb.Name))
	}
	if err != nil {
		return sandbox.Checkpoint{}, a.s.internal("get checkpoint", err)
	}
	return c, nil
}

// image returns the current version of the image a create names ("" for
// the default): the caller's tenant's own image of that name, else a
// public one (of any tenant). Nothing else is an image: a checkpoint's or
// a sandbox root's layer key is no image's name, and another tenant's
// private image is not_found, as one that does not exist. A data dir's
// default image from before image versions (a snapshot called by the
// default image's name, with no catalog entry) is the default's version.
func (a access) image(ctx context.Context, name string) (sandbox.Image, error) {
	if name == "" {
		name = a.s.opts.DefaultImage
	}
	if sandbox.ValidateImageName(name) != nil {
		return sandbox.Image{}, imageNotFound(name) // as any name no image has
	}
	img, err := a.s.opts.Store.Images().Get(ctx, a.p.Home(), name)
	if err == nil {
		return img, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return sandbox.Image{}, a.s.internal("get image", err)
	}
	public, err := a.s.opts.Store.Images().ListPublic(ctx)
	if err != nil {
		return sandbox.Image{}, a.s.internal("list public images", err)
	}
	for _, img := range public {
		if img.Name == name {
			return img, nil
		}
	}
	if name == a.s.opts.DefaultImage {
		if ok, err := a.s.opts.Node.HasImage(ctx, name); err == nil && ok {
			return sandbox.Image{Name: name, Tenant: sandbox.SystemTenant, Public: true, Current: true, Layers: []string{name}, Source: sandbox.ImageSourceDefault}, nil
		}
	}
	return sandbox.Image{}, imageNotFound(name)
}

// tenant is the tenant whose secrets or bindings (what) the caller
// addresses with tenant ("" for its own): any for an operator, its own for
// anyone else (another is not_found, as a tenant that does not exist).
// manage asks to set or delete, which only a tenant admin may in its
// tenant. The decision is secretTenant's (secrets.go), the one rule for
// both, with a refusal that names what was refused.
func (a access) tenant(tenant string, manage bool, what string) (string, error) {
	tenant, err := secretTenant(a.p, tenant, manage)
	if sandbox.IsCode(err, sandbox.CodePermissionDenied) {
		return "", sandbox.Errorf(sandbox.CodePermissionDenied, "only a tenant admin may set or delete %s", what).WithHint("ask a tenant admin")
	}
	return tenant, err
}

// limitsOf is whose limits and usage the caller may read when it names
// tenant and agent (both "": its own): an operator any tenant's (a tenant
// admin's view, or with agent that agent's), a tenant admin its tenant's
// and its agents', an agent its own; what it may not name is not_found, as
// a tenant or agent that does not exist. A token restricted to a name
// prefix sees only its own usage: naming anyone is permission_denied.
func (a access) limitsOf(tenant, agent string) (sandbox.Principal, error) {
	p := a.p
	if tenant == "" && agent == "" {
		return p, nil
	}
	if p.NamePrefix != "" {
		return sandbox.Principal{}, sandbox.Errorf(sandbox.CodePermissionDenied, "this token is restricted to sandbox names starting with %q: it may read its own limits only", p.NamePrefix).
			WithHint("drop tenant and agent, or use a token without a name prefix").With("name_prefix", p.NamePrefix)
	}
	if tenant == "" {
		tenant = p.Tenant
	}
	notFound := sandbox.Errorf(sandbox.CodeNotFound, "no tenant %q with an agent %q that this token may see", tenant, agent).
		WithHint("name your own tenant (and one of its agents)")
	switch {
	case p.Role == sandbox.RoleOperator:
	case tenant != p.Tenant:
		return sandbox.Principal{}, notFound
	case p.Role == sandbox.RoleAgent && agent != p.Agent:
		return sandbox.Principal{}, notFound
	}
	if agent == "" {
		return sandbox.Principal{Tenant: tenant, Role: sandbox.RoleTenantAdmin}, nil
	}
	return sandbox.Principal{Tenant: tenant, Agent: agent, Role: sandbox.RoleAgent}, nil
}

// fleetwide is nil when the caller may read what counts every tenant's
// sandboxes (what, e.g. "read the metrics"): an operator, unless its token
// is restricted to a name prefix, which may read the counts of its own
// sandboxes only. Else permission_denied.
func (a access) fleetwide(what string) error {
	switch {
	case a.p.Role != sandbox.RoleOperator:
		return sandbox.Errorf(sandbox.CodePermissionDenied, "only an operator may %s", what).WithHint("use an operator token")
	case a.p.NamePrefix != "":
		return sandbox.Errorf(sandbox.CodePermissionDenied, "this token is restricted to sandbox names starting with %q; it may not %s, which counts every sandbox", a.p.NamePrefix, what).
			WithHint("use an operator token without a name prefix").With("name_prefix", a.p.NamePrefix)
	}
	return nil
}
