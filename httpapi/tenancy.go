package httpapi

import (
	"net/http"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// Tenants, agent identities, tokens and limits: each handler decodes, calls
// the lifecycle method of the same name with the caller, and encodes.

type tenantList struct {
	Tenants []sandbox.Tenant `json:"tenants"`
}

type agentList struct {
	Agents []sandbox.Agent `json:"agents"`
}

type tokenList struct {
	Tokens []sandbox.TokenInfo `json:"tokens"`
}

// createdToken is the body of POST /v1/tokens: the secret, shown once.
type createdToken struct {
	Token string            `json:"token"`
	Info  sandbox.TokenInfo `json:"info"`
}

func (s admin) handleCreateTenant(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var t sandbox.Tenant
	if err := s.decode(w, r, &t); err != nil {
		door.WriteError(w, r, err)
		return
	}
	t, err := s.svc.Tenancy.CreateTenant(r.Context(), p, t)
	s.reply(w, r, http.StatusCreated, t, err)
}

func (s admin) handleListTenants(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	ts, err := s.svc.Tenancy.ListTenants(r.Context(), p)
	s.reply(w, r, http.StatusOK, tenantList{Tenants: ts}, err)
}

func (s admin) handleGetTenant(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	t, err := s.svc.Tenancy.GetTenant(r.Context(), p, r.PathValue("tenant"))
	s.reply(w, r, http.StatusOK, t, err)
}

func (s admin) handleUpdateTenant(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var u sandbox.TenantUpdate
	if err := s.decode(w, r, &u); err != nil {
		door.WriteError(w, r, err)
		return
	}
	t, err := s.svc.Tenancy.UpdateTenant(r.Context(), p, r.PathValue("tenant"), u)
	s.reply(w, r, http.StatusOK, t, err)
}

func (s admin) handleCreateAgent(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var a sandbox.Agent
	if err := s.decode(w, r, &a); err != nil {
		door.WriteError(w, r, err)
		return
	}
	a, err := s.svc.Tenancy.CreateAgent(r.Context(), p, a)
	s.reply(w, r, http.StatusCreated, a, err)
}

func (s admin) handleListAgents(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	as, err := s.svc.Tenancy.ListAgents(r.Context(), p, r.URL.Query().Get("tenant"))
	s.reply(w, r, http.StatusOK, agentList{Agents: as}, err)
}

func (s admin) handleCreateToken(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req sandbox.TokenRequest
	if err := s.decode(w, r, &req); err != nil {
		door.WriteError(w, r, err)
		return
	}
	secret, info, err := s.svc.Tenancy.CreateToken(r.Context(), p, req)
	s.reply(w, r, http.StatusCreated, createdToken{Token: secret, Info: info}, err)
}

func (s admin) handleListTokens(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	ts, err := s.svc.Tenancy.ListTokens(r.Context(), p)
	s.reply(w, r, http.StatusOK, tokenList{Tokens: ts}, err)
}

func (s admin) handleRevokeToken(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	if err := s.svc.Tenancy.RevokeToken(r.Context(), p, r.PathValue("id")); err != nil {
		door.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleLimits answers the caller's limits and usage, or with ?tenant=
// and ?agent= those of a tenant or agent it may see (Tenancy.LimitsOf).
func (s admin) handleLimits(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	q := r.URL.Query()
	rep, err := s.svc.Tenancy.LimitsOf(r.Context(), p, q.Get("tenant"), q.Get("agent"))
	s.reply(w, r, http.StatusOK, rep, err)
}

// reply writes err, or v with status.
func (s *server) reply(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, status, v)
}
