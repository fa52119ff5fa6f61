package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hearth/hearth/sandbox"
)

// CreateTenant creates a tenant (operators only).
func (a *Admin) CreateTenant(ctx context.Context, t sandbox.Tenant) (sandbox.Tenant, error) {
	var out sandbox.Tenant
	_, err := a.t.doJSON(ctx, http.MethodPost, "/v1/tenants", nil, t, &out)
	return out, err
}

// ListTenants returns the tenants the caller can see, by name.
func (a *Admin) ListTenants(ctx context.Context) ([]sandbox.Tenant, error) {
	var out struct {
		Tenants []sandbox.Tenant `json:"tenants"`
	}
	_, err := a.t.doJSON(ctx, http.MethodGet, "/v1/tenants", nil, nil, &out)
	return out.Tenants, err
}

// GetTenant returns one tenant.
func (a *Admin) GetTenant(ctx context.Context, name string) (sandbox.Tenant, error) {
	var out sandbox.Tenant
	_, err := a.t.doJSON(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(name), nil, nil, &out)
	return out, err
}

// UpdateTenant changes a tenant's allocation or policy (operators only).
func (a *Admin) UpdateTenant(ctx context.Context, name string, u sandbox.TenantUpdate) (sandbox.Tenant, error) {
	var out sandbox.Tenant
	_, err := a.t.doJSON(ctx, http.MethodPatch, "/v1/tenants/"+url.PathEscape(name), nil, u, &out)
	return out, err
}

// CreateAgent creates an agent identity.
func (a *Admin) CreateAgent(ctx context.Context, agent sandbox.Agent) (sandbox.Agent, error) {
	var out sandbox.Agent
	_, err := a.t.doJSON(ctx, http.MethodPost, "/v1/agents", nil, agent, &out)
	return out, err
}

// ListAgents returns the agent identities the caller can see, of tenant
// ("" for all).
func (a *Admin) ListAgents(ctx context.Context, tenant string) ([]sandbox.Agent, error) {
	var q url.Values
	if tenant != "" {
		q = url.Values{"tenant": {tenant}}
	}
	var out struct {
		Agents []sandbox.Agent `json:"agents"`
	}
	_, err := a.t.doJSON(ctx, http.MethodGet, "/v1/agents", q, nil, &out)
	return out.Agents, err
}

// CreateToken creates a token and returns its secret, which the daemon
// shows this once, and its description.
func (a *Admin) CreateToken(ctx context.Context, req sandbox.TokenRequest) (string, sandbox.TokenInfo, error) {
	var out struct {
		Token string            `json:"token"`
		Info  sandbox.TokenInfo `json:"info"`
	}
	_, err := a.t.doJSON(ctx, http.MethodPost, "/v1/tokens", nil, req, &out)
	return out.Token, out.Info, err
}

// ListTokens describes the tokens the caller can see, oldest first.
func (a *Admin) ListTokens(ctx context.Context) ([]sandbox.TokenInfo, error) {
	var out struct {
		Tokens []sandbox.TokenInfo `json:"tokens"`
	}
	_, err := a.t.doJSON(ctx, http.MethodGet, "/v1/tokens", nil, nil, &out)
	return out.Tokens, err
}

// RevokeToken revokes the token with that id.
func (a *Admin) RevokeToken(ctx context.Context, id string) error {
	_, err := a.t.doJSON(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, nil, nil)
	return err
}

// Limits reports the guardrails the caller is under and its usage.
func (c *Client) Limits(ctx context.Context) (sandbox.LimitsReport, error) {
	return c.LimitsOf(ctx, "", "")
}

// LimitsOf returns the limits and usage of tenant, or of its agent when
// agent is not "" (an operator: any; a tenant admin: its own tenant and
// its agents; an agent: itself; both "": the caller's own, as Limits).
func (c *Client) LimitsOf(ctx context.Context, tenant, agent string) (sandbox.LimitsReport, error) {
	var out sandbox.LimitsReport
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	if agent != "" {
		q.Set("agent", agent)
	}
	p := "/v1/limits"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	_, err := c.t.doJSON(ctx, http.MethodGet, p, nil, nil, &out)
	return out, err
}

// Cordon stops (on) or lets again (off) a control plane place new
// sandboxes on node (operators only).
func (a *Admin) Cordon(ctx context.Context, node string, on bool) error {
	method := http.MethodDelete
	if on {
		method = http.MethodPut
	}
	_, err := a.t.doJSON(ctx, method, "/v1/nodes/"+url.PathEscape(node)+"/cordon", nil, nil, nil)
	return err
}
