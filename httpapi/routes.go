package httpapi

// routes lists every route of the API. GET patterns also answer HEAD.
// Paths name the sandbox; file paths travel in the query (?path=), never in
// the URL path, so that they need no escaping rules of their own.
func (s *server) routes() {
	s.mux.HandleFunc("GET /v1/health", s.handleHealth)
	s.mux.Handle("GET /v1/pool", s.authed(s.handlePool))
	s.mux.Handle("GET /v1/limits", s.authed(s.handleLimits))

	s.mux.Handle("POST /v1/tenants", s.authed(s.handleCreateTenant))
	s.mux.Handle("GET /v1/tenants", s.authed(s.handleListTenants))
	s.mux.Handle("GET /v1/tenants/{tenant}", s.authed(s.handleGetTenant))
	s.mux.Handle("PATCH /v1/tenants/{tenant}", s.authed(s.handleUpdateTenant))
	s.mux.Handle("POST /v1/agents", s.authed(s.handleCreateAgent))
	s.mux.Handle("GET /v1/agents", s.authed(s.handleListAgents))
	s.mux.Handle("POST /v1/tokens", s.authed(s.handleCreateToken))
	s.mux.Handle("GET /v1/tokens", s.authed(s.handleListTokens))
	s.mux.Handle("DELETE /v1/tokens/{id}", s.authed(s.handleRevokeToken))

	s.mux.Handle("POST /v1/sandboxes", s.authed(s.handleCreate))
	s.mux.Handle("GET /v1/sandboxes", s.authed(s.handleList))
	s.mux.Handle("GET /v1/sandboxes/{name}", s.authed(s.handleGet))
	s.mux.Handle("DELETE /v1/sandboxes/{name}", s.authed(s.handleDestroy))

	s.mux.Handle("POST /v1/sandboxes/{name}/sleep", s.authed(s.handleSleep))
	s.mux.Handle("POST /v1/sandboxes/{name}/wake", s.authed(s.handleWake))

	s.mux.Handle("POST /v1/sandboxes/{name}/checkpoints", s.authed(s.handleCheckpoint))
	s.mux.Handle("GET /v1/sandboxes/{name}/checkpoints", s.authed(s.handleListCheckpoints))
	s.mux.Handle("DELETE /v1/sandboxes/{name}/checkpoints/{id}", s.authed(s.handleDeleteCheckpoint))
	s.mux.Handle("POST /v1/sandboxes/{name}/restore", s.authed(s.handleRestore))
	s.mux.Handle("POST /v1/sandboxes/{name}/fork", s.authed(s.handleFork))

	s.mux.Handle("GET /v1/sandboxes/{name}/exec", s.authed(s.handleExec))

	s.mux.Handle("GET /v1/sandboxes/{name}/fs/file", s.authed(s.handleReadFile))
	s.mux.Handle("PUT /v1/sandboxes/{name}/fs/file", s.authed(s.handleWriteFile))
	s.mux.Handle("DELETE /v1/sandboxes/{name}/fs/file", s.authed(s.handleRemove))
	s.mux.Handle("GET /v1/sandboxes/{name}/fs/list", s.authed(s.handleListDir))
	s.mux.Handle("GET /v1/sandboxes/{name}/fs/stat", s.authed(s.handleStat))
	s.mux.Handle("POST /v1/sandboxes/{name}/fs/mkdir", s.authed(s.handleMkdir))
	s.mux.Handle("POST /v1/sandboxes/{name}/fs/rename", s.authed(s.handleRename))
	s.mux.Handle("POST /v1/sandboxes/{name}/fs/chmod", s.authed(s.handleChmod))
}
