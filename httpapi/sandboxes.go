package httpapi

import (
	"fmt"
	"net/http"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/sandbox"
)

// health is the body of GET /v1/health.
type health struct {
	Status  string `json:"status"`
	Runtime string `json:"runtime"`
	// Cluster is the store and its nodes, told to operators only.
	Cluster *sandbox.ClusterHealth `json:"cluster,omitempty"`
}

// handleHealth answers without authentication, so that load balancers and
// `hearth doctor` can probe the daemon; to anyone but an operator it
// reveals only the runtime (a bad token is no error here: it is no one).
// An operator's token also gets the store, the leader and the nodes with
// their last heartbeat; a store that does not answer them is internal, so
// that a probe with a token sees the store's trouble.
func (s admin) handleHealth(w http.ResponseWriter, r *http.Request, _ sandbox.Principal) {
	if q := queryParams(r); q.err != nil {
		door.WriteError(w, r, q.err)
		return
	}
	h := health{Status: "ok", Runtime: s.svc.Sandboxes.Runtime()}
	if s.opts.Cluster == nil || door.BearerToken(r) == "" {
		s.encode(w, http.StatusOK, h)
		return
	}
	if p, err := s.svc.Tenancy.Authenticate(r.Context(), door.BearerToken(r)); err == nil && p.Role == sandbox.RoleOperator {
		c, err := s.opts.Cluster(r.Context())
		if err != nil {
			door.WriteError(w, r, fmt.Errorf("read the cluster's health: %w", err))
			return
		}
		h.Cluster = &c
	}
	s.encode(w, http.StatusOK, h)
}

// handlePool answers the warm pool's state per size, for operators.
func (s admin) handlePool(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	sizes, err := s.svc.Pool.Status(r.Context(), p)
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusOK, poolState{Sizes: sizes})
}

// poolState is the body of GET /v1/pool.
type poolState struct {
	Sizes []sandbox.PoolSize `json:"sizes"`
}

// handleCreate answers 201 with the new sandbox, or 200 with the caller's
// existing sandbox of that name (create is idempotent by name). The call
// names the sandbox for the audit log, since the path does not.
func (s sandboxes) handleCreate(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var req sandbox.CreateRequest
	if err := s.decode(w, r, &req); err != nil {
		door.WriteError(w, r, err)
		return
	}
	sb, created, err := s.svc.Sandboxes.Create(r.Context(), p, req)
	if err == nil {
		door.NoteSandbox(r, sb.Name)
	} else {
		door.NoteSandbox(r, req.Name)
	}
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	s.encode(w, status, sb)
}

// sandboxList is the body of GET /v1/sandboxes.
type sandboxList struct {
	Sandboxes []sandbox.Sandbox `json:"sandboxes"`
}

func (s sandboxes) handleList(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	list, err := s.svc.Sandboxes.List(r.Context(), p)
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	if list == nil {
		list = []sandbox.Sandbox{}
	}
	s.encode(w, http.StatusOK, sandboxList{Sandboxes: list})
}

func (s sandboxes) handleGet(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	sb, err := s.svc.Sandboxes.Describe(r.Context(), p, r.PathValue("name"))
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusOK, sb)
}

func (s sandboxes) handleDestroy(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	if err := s.svc.Sandboxes.Destroy(r.Context(), p, r.PathValue("name")); err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusNoContent, nil)
}

// handleUpdate applies the sandbox.SandboxUpdate body (labels) and answers
// the sandbox as it now is.
func (s sandboxes) handleUpdate(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	var u sandbox.SandboxUpdate
	if err := s.decode(w, r, &u); err != nil {
		door.WriteError(w, r, err)
		return
	}
	sb, err := s.svc.Sandboxes.Update(r.Context(), p, r.PathValue("name"), u)
	if err != nil {
		door.WriteError(w, r, err)
		return
	}
	s.encode(w, http.StatusOK, sb)
}
