package lifecycle

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"strings"

	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// A tenant's registry logins: the password (or token) sealed in the store
// as secrets are, under the tenant and a name no secret can have
// ("registry:" and the host), opened only for a pull of that tenant.

// registrySecretName is the sealing name of tenant's password for host.
func registrySecretName(host string) string { return "registry:" + host }

// normalizeHost checks and lower-cases a registry's host[:port].
func normalizeHost(host string) (string, error) {
	h := strings.ToLower(strings.TrimSpace(host))
	bad := sandbox.Errorf(sandbox.CodeInvalidArgument, "registry host %q is not host[:port]", host).WithHint("name the registry as in an image reference, e.g. registry.example.com or 127.0.0.1:5000")
	if h == "" || len(h) > 255 || strings.ContainsAny(h, "/@ \t") {
		return "", bad
	}
	name := h
	if hp, port, err := net.SplitHostPort(h); err == nil {
		if port == "" {
			return "", bad
		}
		name = hp
	}
	if strings.Trim(name, "[]") == "" {
		return "", bad
	}
	return h, nil
}

// Login stores p's tenant's credentials for login.Host, replacing any:
// only a tenant admin (or an operator, for its own tenant) may. The CA,
// if any, must be PEM certificates. A login with no username and no
// password is an anonymous registry's: it says the tenant may pull from
// it (a registry on the host's own or a private network needs a login,
// see internalRegistry) with its CA or insecure setting.
func (s *Images) Login(ctx context.Context, p sandbox.Principal, login sandbox.RegistryLogin, password []byte) (sandbox.RegistryLogin, error) {
	if p.Role == sandbox.RoleAgent {
		return sandbox.RegistryLogin{}, sandbox.Errorf(sandbox.CodePermissionDenied, "only a tenant admin may log in to a registry").WithHint("ask a tenant admin")
	}
	host, err := normalizeHost(login.Host)
	if err != nil {
		return sandbox.RegistryLogin{}, err
	}
	if (login.Username == "") != (len(password) == 0) {
		return sandbox.RegistryLogin{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "a registry login needs a username and a password, or neither (an anonymous registry the tenant trusts)").WithHint("pass the password on standard input: --password-stdin")
	}
	if login.CA != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(login.CA)) {
		return sandbox.RegistryLogin{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "the CA for %s holds no PEM certificate", host).WithHint("give the registry's CA certificate in PEM")
	}
	box := s.opts.Secrets
	if box == nil && len(password) > 0 {
		return sandbox.RegistryLogin{}, sandbox.Errorf(sandbox.CodeUnavailable, "this daemon keeps no secrets, so no registry passwords").WithHint("start hearth serve with its data dir's key file")
	}
	tenant, now := p.Home(), s.now().UTC()
	login.Tenant, login.Host, login.CreatedAt, login.UpdatedAt = tenant, host, now, now
	var sealed []byte
	if len(password) > 0 {
		sealed = box.Seal(tenant, registrySecretName(host), password)
	}
	if err := s.opts.Store.RegistryLogins().Put(ctx, login, sealed); err != nil {
		return sandbox.RegistryLogin{}, s.internal("put registry login", err)
	}
	got, _, err := s.opts.Store.RegistryLogins().Get(ctx, tenant, host)
	if err != nil {
		return sandbox.RegistryLogin{}, s.internal("get registry login", err)
	}
	return got, nil
}

// Logins lists p's tenant's registry logins (never their passwords).
func (s *Images) Logins(ctx context.Context, p sandbox.Principal) ([]sandbox.RegistryLogin, error) {
	logins, err := s.opts.Store.RegistryLogins().List(ctx, p.Home())
	if err != nil {
		return nil, s.internal("list registry logins", err)
	}
	return logins, nil
}

// Logout removes p's tenant's login for host; only a tenant admin may.
func (s *Images) Logout(ctx context.Context, p sandbox.Principal, host string) error {
	if p.Role == sandbox.RoleAgent {
		return sandbox.Errorf(sandbox.CodePermissionDenied, "only a tenant admin may log out of a registry").WithHint("ask a tenant admin")
	}
	host, err := normalizeHost(host)
	if err != nil {
		return err
	}
	err = s.opts.Store.RegistryLogins().Delete(ctx, p.Home(), host)
	if errors.Is(err, store.ErrNotFound) {
		return sandbox.Errorf(sandbox.CodeNotFound, "no registry login for %s", host).WithHint("`hearth registry list` shows the logins")
	}
	if err != nil {
		return s.internal("delete registry login", err)
	}
	return nil
}

// registries are tenant's logins, opened, for a pull.
func (s *Images) registries(ctx context.Context, tenant string) (map[string]node.Registry, error) {
	logins, err := s.opts.Store.RegistryLogins().List(ctx, tenant)
	if err != nil {
		return nil, s.internal("list registry logins", err)
	}
	regs := make(map[string]node.Registry, len(logins))
	for _, l := range logins {
		_, sealed, err := s.opts.Store.RegistryLogins().Get(ctx, tenant, l.Host)
		if err != nil {
			return nil, s.internal("get registry login", err)
		}
		var password []byte
		if len(sealed) > 0 {
			if s.opts.Secrets == nil {
				return nil, sandbox.Errorf(sandbox.CodeUnavailable, "this daemon keeps no secrets, so no registry passwords").WithHint("start hearth serve with its data dir's key file")
			}
			if password, err = s.opts.Secrets.Open(tenant, registrySecretName(l.Host), sealed); err != nil {
				return nil, s.internal("open registry login", err)
			}
		}
		regs[l.Host] = node.Registry{Username: l.Username, Password: string(password), CA: []byte(l.CA), Insecure: l.Insecure}
	}
	return regs, nil
}
