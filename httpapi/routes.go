package httpapi

import (
	"net/http"

	"github.com/hearth/hearth/sandbox"
)

// Verbs the middleware treats specially (see observe.go).
const (
	verbHealth = "health"         // not audited: no caller, and probed constantly
	verbCreate = "sandbox.create" // counted in hearth_creates_total
	verbExec   = "sandbox.exec"   // timed in hearth_exec_duration_seconds
)

// routes lists every route of the API with its verb: the one stable name
// the audit log and the metrics know the operation by, and its query
// parameters (authed's; authedQuery's handlers read theirs). GET patterns
// also answer HEAD. Paths name the sandbox; file paths travel in the query
// (?path=), never in the URL path, so that they need no escaping rules of
// their own. A route that reads a body or messages about a sandbox checks
// first that the caller may see it (visibleFirst).
func (s *server) routes() {
	s.route("GET /v1/health", verbHealth, http.HandlerFunc(s.handleHealth))
	s.route("GET /v1/pool", "pool.get", s.authed(s.handlePool))
	s.route("GET /v1/limits", "limits.get", s.authed(s.handleLimits))
	s.route("GET /v1/audit", "audit.list", s.authedQuery(s.handleAudit))
	s.route("GET /metrics", "metrics.get", s.authed(s.handleMetrics))

	s.route("POST /v1/tenants", "tenant.create", s.authed(s.handleCreateTenant))
	s.route("GET /v1/tenants", "tenant.list", s.authed(s.handleListTenants))
	s.route("GET /v1/tenants/{tenant}", "tenant.get", s.authed(s.handleGetTenant))
	s.route("PATCH /v1/tenants/{tenant}", "tenant.update", s.authed(s.handleUpdateTenant))
	s.route("POST /v1/agents", "agent.create", s.authed(s.handleCreateAgent))
	s.route("GET /v1/agents", "agent.list", s.authed(s.handleListAgents, "tenant"))
	s.route("POST /v1/tokens", "token.create", s.authed(s.handleCreateToken))
	s.route("GET /v1/tokens", "token.list", s.authed(s.handleListTokens))
	s.route("DELETE /v1/tokens/{id}", "token.revoke", s.authed(s.handleRevokeToken))
	s.route("PUT /v1/secrets/{secret}", "secret.set", s.authed(s.handleSetSecret, "tenant"))
	s.route("GET /v1/secrets", "secret.list", s.authed(s.handleListSecrets, "tenant"))
	s.route("DELETE /v1/secrets/{secret}", "secret.delete", s.authed(s.handleDeleteSecret, "tenant"))
	s.route("PUT /v1/bindings/{binding}", "binding.set", s.authed(s.handleSetBinding, "tenant"))
	s.route("GET /v1/bindings", "binding.list", s.authed(s.handleListBindings, "tenant"))
	s.route("DELETE /v1/bindings/{binding}", "binding.delete", s.authed(s.handleDeleteBinding, "tenant"))

	s.route("POST /v1/sandboxes", verbCreate, s.authed(s.handleCreate))
	s.route("GET /v1/sandboxes", "sandbox.list", s.authed(s.handleList))
	s.route("GET /v1/sandboxes/{name}", "sandbox.get", s.authed(s.handleGet))
	s.route("PATCH /v1/sandboxes/{name}", "sandbox.update", s.authed(s.visibleFirst(s.handleUpdate)))
	s.route("DELETE /v1/sandboxes/{name}", "sandbox.destroy", s.authed(s.handleDestroy))

	s.route("POST /v1/sandboxes/{name}/sleep", "sandbox.sleep", s.authed(s.handleSleep))
	s.route("POST /v1/sandboxes/{name}/wake", "sandbox.wake", s.authed(s.handleWake))

	s.route("POST /v1/sandboxes/{name}/checkpoints", "checkpoint.create", s.authed(s.visibleFirst(s.handleCheckpoint)))
	s.route("GET /v1/sandboxes/{name}/checkpoints", "checkpoint.list", s.authed(s.handleListCheckpoints))
	s.route("DELETE /v1/sandboxes/{name}/checkpoints/{id}", "checkpoint.delete", s.authed(s.handleDeleteCheckpoint))
	s.route("POST /v1/sandboxes/{name}/restore", "sandbox.restore", s.authed(s.visibleFirst(s.handleRestore)))
	s.route("POST /v1/sandboxes/{name}/fork", "sandbox.fork", s.authed(s.visibleFirst(s.handleFork)))

	s.route("GET /v1/sandboxes/{name}/exec", verbExec, s.authed(s.handleExec))
	s.route("GET /v1/sandboxes/{name}/ports", "sandbox.ports", s.authedQuery(s.handlePorts))
	// Every method: the proxy authenticates itself (public ports need no
	// token).
	s.route("/v1/sandboxes/{name}/proxy/{port}/{path...}", verbProxy, http.HandlerFunc(s.handleProxy))
	s.route("/v1/sandboxes/{name}/proxy/{port}", verbProxy, http.HandlerFunc(s.handleProxyRoot))

	s.route("GET /v1/sandboxes/{name}/fs/file", "fs.read", s.authedQuery(s.handleReadFile))
	s.route("PUT /v1/sandboxes/{name}/fs/file", "fs.write", s.authedQuery(s.visibleFirst(s.handleWriteFile)))
	s.route("DELETE /v1/sandboxes/{name}/fs/file", "fs.remove", s.authedQuery(s.handleRemove))
	s.route("GET /v1/sandboxes/{name}/fs/list", "fs.list", s.authedQuery(s.handleListDir))
	s.route("GET /v1/sandboxes/{name}/fs/stat", "fs.stat", s.authedQuery(s.handleStat))
	s.route("POST /v1/sandboxes/{name}/fs/mkdir", "fs.mkdir", s.authedQuery(s.handleMkdir))
	s.route("POST /v1/sandboxes/{name}/fs/rename", "fs.rename", s.authedQuery(s.handleRename))
	s.route("POST /v1/sandboxes/{name}/fs/chmod", "fs.chmod", s.authedQuery(s.handleChmod))

	for _, d := range s.opts.Doors {
		s.mountDoor(d)
	}
	if s.opts.MCP != nil { // every method: the MCP handler answers the ones it does not take
		// Each request holds one of the caller's connections: a GET is a
		// long-lived stream, a POST lasts as long as its tool call.
		s.routeDoor("/mcp", "mcp", sandbox.DoorMCP, s.authedQuery(func(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
			if release, ok := s.holdConn(w, r, p); ok {
				defer release()
				s.opts.MCP.ServeHTTP(w, r)
			}
		}))
	}
}
