package sandbox_test

import (
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// restricted is p with its token restricted to the name prefix "hermes-".
func restricted(p sandbox.Principal) sandbox.Principal {
	p.NamePrefix = "hermes-"
	return p
}

func TestScopeAudit(t *testing.T) {
	since := time.Date(2026, time.January, 2, 0, 0, 0, 0, time.UTC)
	op := sandbox.Principal{Tenant: "system", Agent: "operator", Role: sandbox.RoleOperator}
	admin := sandbox.Principal{Tenant: "acme", Agent: "boss", Role: sandbox.RoleTenantAdmin}
	agent := sandbox.Principal{Tenant: "acme", Agent: "claude-1", Role: sandbox.RoleAgent}
	tests := []struct {
		name   string
		p      sandbox.Principal
		f      sandbox.AuditFilter
		want   sandbox.AuditFilter
		wantOK bool
	}{
		{"operator, everything", op, sandbox.AuditFilter{}, sandbox.AuditFilter{}, true},
		{"operator, as asked", op, sandbox.AuditFilter{Since: since, Tenant: "globex", Agent: "x", Limit: 3}, sandbox.AuditFilter{Since: since, Tenant: "globex", Agent: "x", Limit: 3}, true},
		{"admin, its tenant", admin, sandbox.AuditFilter{Limit: 3}, sandbox.AuditFilter{Tenant: "acme", Limit: 3}, true},
		{"admin, an agent of its tenant", admin, sandbox.AuditFilter{Agent: "claude-1"}, sandbox.AuditFilter{Tenant: "acme", Agent: "claude-1"}, true},
		{"admin, another tenant", admin, sandbox.AuditFilter{Tenant: "globex"}, sandbox.AuditFilter{Tenant: "globex"}, false},
		{"agent, itself", agent, sandbox.AuditFilter{Since: since}, sandbox.AuditFilter{Since: since, Tenant: "acme", Agent: "claude-1"}, true},
		{"agent, named", agent, sandbox.AuditFilter{Tenant: "acme", Agent: "claude-1"}, sandbox.AuditFilter{Tenant: "acme", Agent: "claude-1"}, true},
		{"agent, another agent", agent, sandbox.AuditFilter{Agent: "claude-2"}, sandbox.AuditFilter{Agent: "claude-2"}, false},
		{"agent, another tenant", agent, sandbox.AuditFilter{Tenant: "globex"}, sandbox.AuditFilter{Tenant: "globex"}, false},
		{"no role is an agent", sandbox.Principal{Tenant: "acme", Agent: "x"}, sandbox.AuditFilter{}, sandbox.AuditFilter{Tenant: "acme", Agent: "x"}, true},
		{"restricted agent", restricted(agent), sandbox.AuditFilter{}, sandbox.AuditFilter{Tenant: "acme", Agent: "claude-1", SandboxPrefix: "hermes-", OwnPrefix: "agent-claude-1-"}, true},
		{"restricted admin", restricted(admin), sandbox.AuditFilter{Agent: "x"}, sandbox.AuditFilter{Tenant: "acme", Agent: "x", SandboxPrefix: "hermes-", OwnPrefix: "agent-boss-"}, true},
		{"restricted operator", restricted(op), sandbox.AuditFilter{}, sandbox.AuditFilter{SandboxPrefix: "hermes-", OwnPrefix: "agent-operator-"}, true},
		{"a prefix asked for is no restriction", agent, sandbox.AuditFilter{SandboxPrefix: "x", OwnPrefix: "y"}, sandbox.AuditFilter{Tenant: "acme", Agent: "claude-1"}, true},
	}
	for _, tt := range tests {
		got, ok := tt.p.ScopeAudit(tt.f)
		if ok != tt.wantOK || ok && got != tt.want {
			t.Errorf("%s: ScopeAudit(%+v) = %+v, %v; want %+v, %v", tt.name, tt.f, got, ok, tt.want, tt.wantOK)
		}
	}
}
