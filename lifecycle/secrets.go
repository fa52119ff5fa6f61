package lifecycle

import (
	"context"
	"errors"
	"io"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/scrub"
	"github.com/hearth/hearth/store"
)

// Secrets: a tenant's credentials, kept sealed in the store (see package
// secrets) and given to one command at a time (ExecRequest.Secrets), in
// its environment only: never on the sandbox's disk, never in a log or the
// audit log, and scrubbed from the output that goes back to the caller.
// Operators manage any tenant's, a tenant admin its own; an agent may list
// its tenant's names and use them.

// Credentials keeps tenants' secrets and the bindings that name them, and
// opens them for a command (Processes.Exec) or the egress gateway
// (GatewayRoute). It is safe for concurrent use.
type Credentials struct{ *core }

func secretNotFound(tenant, name string) error {
	return sandbox.Errorf(sandbox.CodeNotFound, "secret %q not found in tenant %q", name, tenant).
		WithHint("`hearth secret list` shows the secrets you can use")
}

// secretTenant is the tenant whose secrets p addresses with tenant ("" for
// its own), or an error if p may not manage them.
func secretTenant(p sandbox.Principal, tenant string, manage bool) (string, error) {
	if tenant == "" {
		tenant = p.Tenant
	}
	switch {
	case p.Role == sandbox.RoleOperator:
		return tenant, nil
	case tenant != p.Tenant:
		return "", tenantNotFound(tenant)
	case manage && p.Role != sandbox.RoleTenantAdmin:
		return "", sandbox.Errorf(sandbox.CodePermissionDenied, "only a tenant admin may set or delete secrets").WithHint("ask a tenant admin")
	}
	return tenant, nil
}

// sealer returns the service's secrets box, or unavailable without one.
func (s *Credentials) sealer() (Sealer, error) {
	if s.opts.Secrets == nil {
		return nil, sandbox.Errorf(sandbox.CodeUnavailable, "this daemon keeps no secrets").WithHint("start hearth serve with its data dir's key file")
	}
	return s.opts.Secrets, nil
}

// SetSecret stores value as tenant's secret name ("" for the caller's
// tenant), replacing any earlier one.
func (s *Credentials) SetSecret(ctx context.Context, p sandbox.Principal, tenant, name string, value []byte) (sandbox.SecretInfo, error) {
	tenant, err := s.access(p).tenant(tenant, true, "secrets")
	if err != nil {
		return sandbox.SecretInfo{}, err
	}
	if err := sandbox.ValidateSecretName(name); err != nil {
		return sandbox.SecretInfo{}, err
	}
	if len(value) < sandbox.MinSecretLen || len(value) > sandbox.MaxSecretLen {
		return sandbox.SecretInfo{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "a secret value is %d to %d bytes, got %d", sandbox.MinSecretLen, sandbox.MaxSecretLen, len(value)).
			WithHint("a shorter value would be scrubbed from every output it occurs in by chance").
			With("min", sandbox.MinSecretLen).With("max", sandbox.MaxSecretLen).With("used", len(value))
	}
	box, err := s.sealer()
	if err != nil {
		return sandbox.SecretInfo{}, err
	}
	now := s.now().UTC()
	if err := s.opts.Store.Secrets().Put(ctx, tenant, name, box.Seal(tenant, name, value), now); err != nil {
		return sandbox.SecretInfo{}, s.internal("put secret", err)
	}
	s.log.Info("secret set", "tenant", tenant, "secret", name, "by", p.Agent)
	list, err := s.opts.Store.Secrets().List(ctx, tenant)
	if err != nil {
		return sandbox.SecretInfo{}, s.internal("list secrets", err)
	}
	for _, info := range list {
		if info.Name == name {
			return info, nil
		}
	}
	return sandbox.SecretInfo{Tenant: tenant, Name: name, CreatedAt: now, UpdatedAt: now}, nil
}

// ListSecrets describes tenant's secrets ("" for the caller's), without
// their values.
func (s *Credentials) ListSecrets(ctx context.Context, p sandbox.Principal, tenant string) ([]sandbox.SecretInfo, error) {
	tenant, err := s.access(p).tenant(tenant, false, "secrets")
	if err != nil {
		return nil, err
	}
	list, err := s.opts.Store.Secrets().List(ctx, tenant)
	if err != nil {
		return nil, s.internal("list secrets", err)
	}
	return list, nil
}

// DeleteSecret removes tenant's secret name ("" for the caller's tenant).
func (s *Credentials) DeleteSecret(ctx context.Context, p sandbox.Principal, tenant, name string) error {
	tenant, err := s.access(p).tenant(tenant, true, "secrets")
	if err != nil {
		return err
	}
	if err := s.opts.Store.Secrets().Delete(ctx, tenant, name); errors.Is(err, store.ErrNotFound) {
		return secretNotFound(tenant, name)
	} else if err != nil {
		return s.internal("delete secret", err)
	}
	s.log.Info("secret deleted", "tenant", tenant, "secret", name, "by", p.Agent)
	return nil
}

// withSecrets opens the secrets req names, of tenant, and returns req
// without their names, their values for the agent (see
// agent.Client.ExecSecrets: never in a request's JSON, never a Go
// string), the streams wrapped in scrubbers, and a done func that the
// caller runs once the command's output has ended: it flushes the
// scrubbers and wipes the values.
func (s *Credentials) withSecrets(ctx context.Context, tenant string, req sandbox.ExecRequest, stdout, stderr io.Writer) (sandbox.ExecRequest, []agent.Secret, io.Writer, io.Writer, func(), error) {
	noop := func() {}
	if len(req.Secrets) == 0 {
		return req, nil, stdout, stderr, noop, nil
	}
	box, err := s.sealer()
	if err != nil {
		return req, nil, nil, nil, noop, err
	}
	var vars []agent.Secret
	var values []scrub.Secret
	wipe := func() {
		for _, v := range vars {
			clear(v.Value)
		}
	}
	for _, name := range req.Secrets {
		v, err := s.openSecret(ctx, box, tenant, name)
		if err != nil {
			wipe()
			return req, nil, nil, nil, noop, err
		}
		vars = append(vars, agent.Secret{Name: name, Value: v})
		values = append(values, scrub.Secret{Name: name, Value: v})
	}
	req.Secrets = nil
	out, errw := scrub.NewWriter(orDiscard(stdout), values), scrub.NewWriter(orDiscard(stderr), values)
	return req, vars, out, errw, func() { out.Flush(); errw.Flush(); wipe() }, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
