package sandbox

import "time"

// Doors an AuditEvent names: the native API called by any client, the
// same API called by the hearth CLI (which says so in its User-Agent), the
// MCP endpoint /mcp, the Sprites-compatible API /v1/sprites, and
// Kubernetes (kubectl exec, a sandbox's Pod deleted), through a hearth
// node.
const (
	DoorAPI        = "api"
	DoorCLI        = "cli"
	DoorMCP        = "mcp"
	DoorSprites    = "sprites"
	DoorKubernetes = "kubernetes"
)

// AuditEvent is one call through a door, as the audit log keeps it: who
// made it, through which door, what it did and to which sandbox, how it
// ended and how long it took. It never holds a secret: no token (only the
// token's ID), request body, environment value, file content or command
// text.
type AuditEvent struct {
	// ID orders events as the store appended them; the store assigns it,
	// increasing and never reused.
	ID int64 `json:"id"`
	// At is when the call arrived.
	At time.Time `json:"at"`
	// Door is DoorAPI, DoorCLI, DoorMCP, DoorSprites or DoorKubernetes.
	Door string `json:"door"`
	// Verb names the operation, one stable name per route:
	// "sandbox.create", "sandbox.exec", "fs.write", "token.create", …
	Verb string `json:"verb"`
	// Tenant, Agent and Role are the caller's principal; all empty when
	// the call was not authenticated.
	Tenant string `json:"tenant"`
	Agent  string `json:"agent"`
	Role   Role   `json:"role"`
	// TokenID names the token the caller authenticated with.
	TokenID string `json:"token_id,omitempty"`
	// Sandbox is the sandbox the call addressed, as the caller's
	// reference resolves (Principal.Canonical): the stored name for a
	// sandbox of the caller's tenant, TENANT/NAME for another's; for a
	// create, the created (or resumed) sandbox's name, or the name asked
	// for when the create failed.
	Sandbox string `json:"sandbox,omitempty"`
	// Code is the error code of the answer; empty for a success.
	Code Code `json:"code,omitempty"`
	// Status is the HTTP status of the answer: 101 for an exec WebSocket,
	// whose outcome is in Code.
	Status int `json:"status"`
	// DurationMs is how long the call took, in milliseconds; for an exec,
	// the whole command.
	DurationMs int64 `json:"duration_ms"`
}

// AuditFilter narrows a listing of the audit log. Zero fields match
// everything.
type AuditFilter struct {
	// Since keeps the events at or after it.
	Since time.Time
	// Tenant and Agent keep the events of that caller's tenant and agent
	// identity.
	Tenant, Agent string
	// Limit, when positive, keeps only the newest Limit events.
	Limit int
	// SandboxPrefix, when set, keeps only the events whose Sandbox, less
	// OwnPrefix when it starts with it, starts with SandboxPrefix: the
	// events of a token restricted to a name prefix (see Principal.InScope,
	// whose rule this is).
	SandboxPrefix, OwnPrefix string
	// After, when positive, keeps only the events whose ID is greater: those
	// appended after it (a follower's next look).
	After int64
	// OnName, when set, keeps only the events on the sandbox called OnName
	// of tenant OnTenant: the calls of its tenant's callers, whose Sandbox
	// is OnName, and those of other tenants' (operators), whose Sandbox is
	// OnTenant/OnName.
	OnTenant, OnName string
}

// ScopeAudit narrows f to the events p may read, as Owns and InScope do
// for sandboxes: an operator reads every event, a tenant admin its
// tenant's, an agent its own identity's; a token restricted to a name
// prefix, of those, only the events on sandboxes inside it. ok is false
// when f asks for events outside that scope, of which p may read none.
func (p Principal) ScopeAudit(f AuditFilter) (_ AuditFilter, ok bool) {
	f.SandboxPrefix, f.OwnPrefix = p.NamePrefix, ""
	if p.NamePrefix != "" && p.Agent != "" {
		f.OwnPrefix = AttributionPrefix(p.Agent)
	}
	switch p.Role {
	case RoleOperator:
		return f, true
	case RoleTenantAdmin:
		if f.Tenant != "" && f.Tenant != p.Tenant {
			return f, false
		}
		f.Tenant = p.Tenant
	default:
		if f.Tenant != "" && f.Tenant != p.Tenant || f.Agent != "" && f.Agent != p.Agent {
			return f, false
		}
		f.Tenant, f.Agent = p.Tenant, p.Agent
	}
	return f, true
}
