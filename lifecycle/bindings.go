package lifecycle

import (
	"bytes"
	"context"
	"errors"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// Credential bindings: a tenant's secret bound to an upstream HTTP(S) API
// (see sandbox.Binding). A sandbox of the tenant in network mode egress
// sends plain HTTP to http://NAME.hearth.internal/…; the egress gateway
// asks GatewayRoute where that goes and with which header, and adds the
// secret on the way out, so that the sandbox never sees it. A binding names
// its secret and holds no value. Who may do what is the secrets' rule
// (access.tenant): operators any tenant's, a tenant admin its own; an agent
// may list its tenant's bindings (and use them) but not set or delete one.

func bindingNotFound(tenant, name string) error {
	return sandbox.Errorf(sandbox.CodeNotFound, "no binding %q in tenant %q", name, tenant).
		WithHint("`hearth binding list` shows the tenant's bindings")
}

// SetBinding stores b as a binding of tenant ("" for the caller's tenant),
// replacing any of the same name, and returns it as stored. b's Tenant and
// times are ignored; an empty Header or Format takes its default (see
// sandbox.NormalizeBinding). Errors: invalid_argument for a bad field,
// not_found when the tenant has no secret b.Secret (set the secret first),
// permission_denied for an agent.
func (s *Credentials) SetBinding(ctx context.Context, p sandbox.Principal, tenant string, b sandbox.Binding) (sandbox.Binding, error) {
	tenant, err := s.access(p).tenant(tenant, true, "bindings")
	if err != nil {
		return sandbox.Binding{}, err
	}
	if b, err = sandbox.NormalizeBinding(b); err != nil {
		return sandbox.Binding{}, err
	}
	if _, err := s.opts.Store.Secrets().Get(ctx, tenant, b.Secret); errors.Is(err, store.ErrNotFound) {
		return sandbox.Binding{}, sandbox.Errorf(sandbox.CodeNotFound, "binding %q names the secret %q, which tenant %q does not have", b.Name, b.Secret, tenant).
			WithHint("set it first with `hearth secret set %s`; `hearth secret list` shows the tenant's secrets", b.Secret)
	} else if err != nil {
		return sandbox.Binding{}, s.internal("get secret", err)
	}
	now := s.now().UTC()
	b.Tenant, b.CreatedAt, b.UpdatedAt = tenant, now, now
	if err := s.opts.Store.Bindings().Put(ctx, b); err != nil {
		return sandbox.Binding{}, s.internal("put binding", err)
	}
	s.log.Info("binding set", "tenant", tenant, "binding", b.Name, "secret", b.Secret, "upstream", b.Upstream, "by", p.Agent)
	stored, err := s.opts.Store.Bindings().Get(ctx, tenant, b.Name)
	if err != nil {
		return sandbox.Binding{}, s.internal("get binding", err)
	}
	return stored, nil
}

// ListBindings returns tenant's bindings ("" for the caller's), by name.
func (s *Credentials) ListBindings(ctx context.Context, p sandbox.Principal, tenant string) ([]sandbox.Binding, error) {
	tenant, err := s.access(p).tenant(tenant, false, "bindings")
	if err != nil {
		return nil, err
	}
	list, err := s.opts.Store.Bindings().List(ctx, tenant)
	if err != nil {
		return nil, s.internal("list bindings", err)
	}
	return list, nil
}

// DeleteBinding removes tenant's binding name ("" for the caller's
// tenant); the secret it names stays. not_found if there is none.
func (s *Credentials) DeleteBinding(ctx context.Context, p sandbox.Principal, tenant, name string) error {
	tenant, err := s.access(p).tenant(tenant, true, "bindings")
	if err != nil {
		return err
	}
	if err := s.opts.Store.Bindings().Delete(ctx, tenant, name); errors.Is(err, store.ErrNotFound) {
		return bindingNotFound(tenant, name)
	} else if err != nil {
		return s.internal("delete binding", err)
	}
	s.log.Info("binding deleted", "tenant", tenant, "binding", name, "by", p.Agent)
	return nil
}

// GatewayRoute is the egress gateway's lookup for a request that the
// sandbox with id sandboxID sent to binding.hearth.internal: the binding
// of the sandbox's tenant and its secret's value, which the gateway puts
// in binding.Header as binding.HeaderValue(value) and must never log or
// hand to the sandbox. Errors, each a *sandbox.Error: not_found for an
// unknown sandbox id, a binding the tenant does not have, or a secret the
// binding names that is gone; permission_denied when the sandbox's network
// mode is not egress; invalid_argument when the value cannot go in a
// header (it holds CR, LF or NUL); unavailable when the daemon keeps no
// secrets; internal otherwise (the cause logged).
func (s *Credentials) GatewayRoute(ctx context.Context, sandboxID, binding string) (sandbox.Binding, []byte, error) {
	sb, err := s.opts.Store.Sandboxes().ByID(ctx, sandboxID)
	if errors.Is(err, store.ErrNotFound) {
		return sandbox.Binding{}, nil, sandbox.Errorf(sandbox.CodeNotFound, "no sandbox with id %q", sandboxID).
			WithHint("the sandbox was destroyed; only a running sandbox's requests go through the gateway")
	}
	if err != nil {
		return sandbox.Binding{}, nil, s.internal("get sandbox by id", err)
	}
	if sb.Network != sandbox.NetworkEgress {
		return sandbox.Binding{}, nil, sandbox.Errorf(sandbox.CodePermissionDenied, "sandbox %q has network mode %q; bindings need %q", sb.Name, sb.Network, sandbox.NetworkEgress).
			WithHint("create the sandbox with `--network %s`", sandbox.NetworkEgress)
	}
	b, err := s.opts.Store.Bindings().Get(ctx, sb.Tenant, binding)
	if errors.Is(err, store.ErrNotFound) {
		return sandbox.Binding{}, nil, bindingNotFound(sb.Tenant, binding)
	}
	if err != nil {
		return sandbox.Binding{}, nil, s.internal("get binding", err)
	}
	box, err := s.sealer()
	if err != nil {
		return sandbox.Binding{}, nil, err
	}
	value, err := s.openSecret(ctx, box, sb.Tenant, b.Secret)
	if err != nil {
		return sandbox.Binding{}, nil, err
	}
	if bytes.ContainsAny(value, "\r\n\x00") {
		return sandbox.Binding{}, nil, sandbox.Errorf(sandbox.CodeInvalidArgument, "the secret %q of binding %q holds a line break or NUL, which cannot go in a header", b.Secret, b.Name).
			WithHint("set the secret again as one line: `hearth secret set %s` drops one trailing newline", b.Secret)
	}
	return b, value, nil
}

// openSecret returns the value of tenant's secret name, opened with box:
// not_found (secretNotFound) when the tenant has no such secret, internal
// when the store or box fails. These are the steps and errors of opening
// each secret an exec names (withSecrets), shared with GatewayRoute.
func (s *Credentials) openSecret(ctx context.Context, box Sealer, tenant, name string) ([]byte, error) {
	sealed, err := s.opts.Store.Secrets().Get(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, secretNotFound(tenant, name)
	}
	if err != nil {
		return nil, s.internal("get secret", err)
	}
	v, err := box.Open(tenant, name, sealed)
	if err != nil {
		return nil, s.internal("open secret "+name, err)
	}
	return v, nil
}
