package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hearth/hearth/sandbox"
)

// secretsQuery addresses tenant's secrets ("" for the caller's).
func secretsQuery(tenant string) url.Values {
	if tenant == "" {
		return nil
	}
	return url.Values{"tenant": {tenant}}
}

// SetSecret stores value as tenant's secret name ("" for the caller's
// tenant); the daemon never returns it.
func (a *Admin) SetSecret(ctx context.Context, tenant, name, value string) (sandbox.SecretInfo, error) {
	var out sandbox.SecretInfo
	in := struct {
		Value string `json:"value"`
	}{value}
	_, err := a.t.doJSON(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), secretsQuery(tenant), in, &out)
	return out, err
}

// ListSecrets describes tenant's secrets ("" for the caller's tenant).
func (a *Admin) ListSecrets(ctx context.Context, tenant string) ([]sandbox.SecretInfo, error) {
	var out struct {
		Secrets []sandbox.SecretInfo `json:"secrets"`
	}
	_, err := a.t.doJSON(ctx, http.MethodGet, "/v1/secrets", secretsQuery(tenant), nil, &out)
	return out.Secrets, err
}

// DeleteSecret removes tenant's secret name ("" for the caller's tenant).
func (a *Admin) DeleteSecret(ctx context.Context, tenant, name string) error {
	_, err := a.t.doJSON(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), secretsQuery(tenant), nil, nil)
	return err
}
