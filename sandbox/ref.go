package sandbox

import "strings"

// Sandbox names are unique within a tenant, not across tenants: two
// tenants may each have a sandbox called "web", and nothing one does tells
// it whether the other has one. A sandbox reference is how a caller names
// an existing sandbox in every door:
//
//   - NAME names a sandbox of the caller's own tenant. For a tenant's
//     principal (an agent or a tenant admin) the caller's attribution
//     prefix may be left out (see Resolve). For an operator, and for a
//     caller without a token (a public port's URL), the tenant is
//     SystemTenant, whose sandboxes are the operators' own: a bare name
//     never picks one of several tenants' sandboxes.
//   - TENANT/NAME names the sandbox NAME of TENANT. Operators address any
//     tenant's sandbox so; anyone else only their own tenant's, and a
//     reference to another tenant's is not_found, as one to a sandbox
//     that does not exist.
//
// In a URL path the '/' travels escaped (%2F), as every path segment is.

// SystemTenant is the tenant of operators and of the platform's own
// sandboxes (the warm pool); no tenant can take its name.
const SystemTenant = "system"

// ParseRef splits a sandbox reference into its tenant ("" when ref has
// none) and name. It checks the tenant's spelling only: the name is
// checked once it is resolved (see Principal.Locate). A malformed tenant is
// invalid_argument.
func ParseRef(ref string) (tenant, name string, err error) {
	tenant, name, ok := strings.Cut(ref, "/")
	if !ok {
		return "", ref, nil
	}
	if err := ValidateIdentity("tenant", tenant); err != nil {
		return "", "", Errorf(CodeInvalidArgument, "invalid sandbox reference %q: %s", ref, err.(*Error).Message).
			WithHint("write NAME, or TENANT/NAME, e.g. %q", "acme/build-42")
	}
	return tenant, name, nil
}

// Ref is the reference TENANT/NAME.
func Ref(tenant, name string) string { return tenant + "/" + name }

// PublicRef is how a caller of no tenant (a public URL) writes tenant's
// sandbox called name: NAME for an operators' sandbox, TENANT/NAME for a
// tenant's.
func PublicRef(tenant, name string) string { return Principal{}.RefOf(tenant, name) }

// Home is the tenant whose sandboxes p names without a tenant, and the
// tenant of the sandboxes p creates: p's own, SystemTenant for a caller
// without one.
func (p Principal) Home() string {
	if p.Tenant == "" {
		return SystemTenant
	}
	return p.Tenant
}

// Locate maps ref, a sandbox reference as p wrote it, to the tenant and
// stored name of the sandbox it names. It decides nothing about whether p
// may see that sandbox (lifecycle does). Errors: invalid_argument for a
// malformed reference or name.
func (p Principal) Locate(ref string) (tenant, name string, err error) {
	tenant, name, err = ParseRef(ref)
	if err != nil {
		return "", "", err
	}
	if tenant == "" {
		tenant = p.Home()
	}
	if tenant == p.Home() {
		name = p.Resolve(name)
	}
	if err := ValidateName(name); err != nil {
		return "", "", err
	}
	return tenant, name, nil
}

// RefOf is how p writes a reference to the sandbox name of tenant: the
// stored name for one of p's own tenant, TENANT/NAME for another's.
func (p Principal) RefOf(tenant, name string) string {
	if tenant == p.Home() {
		return name
	}
	return Ref(tenant, name)
}

// Canonical is ref as lifecycle resolves it for p (RefOf of what Locate
// returns), so that records of calls that wrote the same sandbox
// differently (with and without the attribution prefix, or the caller's
// own tenant) read the same; a malformed ref comes back as written. The
// audit log records sandboxes so.
func (p Principal) Canonical(ref string) string {
	tenant, name, err := p.Locate(ref)
	if err != nil {
		return ref
	}
	return p.RefOf(tenant, name)
}

// Resolve maps a sandbox name of p's own tenant, as p wrote it, to the
// stored name. Operators use names as they are. Anyone else may leave out
// their own attribution prefix: a name that does not start with "agent-"
// is one of theirs and gets their prefix; a name that does is taken as it
// is (their own with the prefix written out, or, for a tenant admin,
// another agent's).
func (p Principal) Resolve(name string) string {
	if p.Role == RoleOperator || p.Agent == "" || strings.HasPrefix(name, "agent-") {
		return name
	}
	return AttributionPrefix(p.Agent) + name
}

// InScope reports whether p's NamePrefix restriction lets it reach the
// sandbox called name (the stored name, as Resolve returns it): always
// without a restriction; with one, when name, less p's own attribution
// prefix, starts with NamePrefix.
func (p Principal) InScope(name string) bool {
	if p.NamePrefix == "" {
		return true
	}
	if p.Agent != "" {
		name = strings.TrimPrefix(name, AttributionPrefix(p.Agent))
	}
	return strings.HasPrefix(name, p.NamePrefix)
}

// OutOfScope is the permission_denied error of a create of a sandbox name
// outside p's NamePrefix restriction. (A reference to an existing sandbox
// outside it is not_found, as any sandbox p may not see.)
func (p Principal) OutOfScope(name string) *Error {
	return Errorf(CodePermissionDenied, "this token is restricted to sandbox names starting with %q; %q is outside it", p.NamePrefix, name).
		WithHint("use a name starting with %q, or a token without that restriction", p.NamePrefix).
		With("name_prefix", p.NamePrefix)
}
