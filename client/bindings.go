package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hearth/hearth/sandbox"
)

// SetBinding creates or replaces tenant's credential binding b.Name (""
// for the caller's tenant; see sandbox.Binding) and returns it as the
// daemon stored it: Header and Format defaulted, Upstream normalized. b's
// Tenant and times are not sent. The secret b names must exist in the
// tenant (not_found otherwise); only tenant admins and operators may set
// one (permission_denied).
func (a *Admin) SetBinding(ctx context.Context, tenant string, b sandbox.Binding) (sandbox.Binding, error) {
	var out sandbox.Binding
	in := struct {
		Secret   string `json:"secret"`
		Upstream string `json:"upstream"`
		Header   string `json:"header,omitempty"`
		Format   string `json:"format,omitempty"`
	}{b.Secret, b.Upstream, b.Header, b.Format}
	_, err := a.t.doJSON(ctx, http.MethodPut, "/v1/bindings/"+url.PathEscape(b.Name), secretsQuery(tenant), in, &out)
	return out, err
}

// ListBindings returns tenant's credential bindings ("" for the caller's
// tenant), by name.
func (a *Admin) ListBindings(ctx context.Context, tenant string) ([]sandbox.Binding, error) {
	var out struct {
		Bindings []sandbox.Binding `json:"bindings"`
	}
	_, err := a.t.doJSON(ctx, http.MethodGet, "/v1/bindings", secretsQuery(tenant), nil, &out)
	return out.Bindings, err
}

// DeleteBinding removes tenant's binding name ("" for the caller's
// tenant); the secret it names stays.
func (a *Admin) DeleteBinding(ctx context.Context, tenant, name string) error {
	_, err := a.t.doJSON(ctx, http.MethodDelete, "/v1/bindings/"+url.PathEscape(name), secretsQuery(tenant), nil, nil)
	return err
}
