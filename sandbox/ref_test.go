package sandbox_test

import (
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// TestLocate: how each kind of caller's reference resolves. A bare name is
// the caller's own tenant's (the system tenant's for an operator or a
// caller without a token), with the caller's attribution prefix added
// within its own tenant only; TENANT/NAME is TENANT's sandbox NAME.
func TestLocate(t *testing.T) {
	op := sandbox.Principal{Tenant: "system", Agent: "operator", Role: sandbox.RoleOperator}
	admin := sandbox.Principal{Tenant: "acme", Agent: "boss", Role: sandbox.RoleTenantAdmin}
	agent := sandbox.Principal{Tenant: "acme", Agent: "a1", Role: sandbox.RoleAgent}
	public := sandbox.Principal{}
	tests := []struct {
		p                  sandbox.Principal
		ref                string
		tenant, name, back string // back: RefOf of the result
	}{
		{agent, "web", "acme", "agent-a1-web", "agent-a1-web"},
		{agent, "agent-a1-web", "acme", "agent-a1-web", "agent-a1-web"},
		{agent, "acme/web", "acme", "agent-a1-web", "agent-a1-web"},
		{agent, "acme/agent-a1-web", "acme", "agent-a1-web", "agent-a1-web"},
		{agent, "globex/web", "globex", "web", "globex/web"},
		{agent, "globex/agent-a1-web", "globex", "agent-a1-web", "globex/agent-a1-web"},
		{admin, "web", "acme", "agent-boss-web", "agent-boss-web"},
		{admin, "agent-a1-web", "acme", "agent-a1-web", "agent-a1-web"},
		{op, "web", "system", "web", "web"},
		{op, "acme/agent-a1-web", "acme", "agent-a1-web", "acme/agent-a1-web"},
		{op, "system/web", "system", "web", "web"},
		{public, "web", "system", "web", "web"},
		{public, "acme/agent-a1-web", "acme", "agent-a1-web", "acme/agent-a1-web"},
	}
	for _, tt := range tests {
		tenant, name, err := tt.p.Locate(tt.ref)
		if err != nil || tenant != tt.tenant || name != tt.name {
			t.Errorf("%s/%s: Locate(%q) = %q, %q, %v; want %q, %q", tt.p.Tenant, tt.p.Agent, tt.ref, tenant, name, err, tt.tenant, tt.name)
			continue
		}
		if got := tt.p.RefOf(tenant, name); got != tt.back {
			t.Errorf("%s/%s: RefOf(%q, %q) = %q, want %q", tt.p.Tenant, tt.p.Agent, tenant, name, got, tt.back)
		}
		if got := tt.p.Canonical(tt.ref); got != tt.back {
			t.Errorf("%s/%s: Canonical(%q) = %q, want %q", tt.p.Tenant, tt.p.Agent, tt.ref, got, tt.back)
		}
	}
	for _, ref := range []string{"", "Web", "ACME/web", "/web", "acme/", "acme/a/b", "1acme/web", "acme-/web", "acme/" + strings.Repeat("x", 64)} {
		if _, _, err := agent.Locate(ref); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("Locate(%q) = %v, want invalid_argument", ref, err)
		}
		if got := agent.Canonical(ref); got != ref {
			t.Errorf("Canonical(%q) = %q, want it as written", ref, got)
		}
	}
}

// TestProxyURL: a URL names the sandbox's tenant, but for the operators'
// own (tenant system), whose bare name is what a caller without a token
// resolves.
func TestProxyURL(t *testing.T) {
	for _, tt := range []struct{ domain, tenant, want string }{
		{"", "acme", "http://h:1/v1/sandboxes/acme%2Fagent-a1-web/proxy/8080/"},
		{"", "system", "http://h:1/v1/sandboxes/agent-a1-web/proxy/8080/"},
		{"sb.example", "acme", "http://8080-agent-a1-web.acme.sb.example/"},
		{"sb.example", "system", "http://8080-agent-a1-web.sb.example/"},
	} {
		if got := sandbox.ProxyURL("http", "h:1", tt.domain, tt.tenant, "agent-a1-web", 8080); got != tt.want {
			t.Errorf("ProxyURL(%q, %q) = %q, want %q", tt.domain, tt.tenant, got, tt.want)
		}
	}
}

// FuzzLocate: any reference either resolves to a valid tenant and name,
// which the principal writes back as a reference resolving to the same,
// or is invalid_argument.
func FuzzLocate(f *testing.F) {
	for _, s := range []string{"web", "acme/web", "agent-a1-web", "/", "a//b", "acme/agent-a1-x", "system/pool-1"} {
		f.Add(s)
	}
	agent := sandbox.Principal{Tenant: "acme", Agent: "a1", Role: sandbox.RoleAgent}
	f.Fuzz(func(t *testing.T, ref string) {
		tenant, name, err := agent.Locate(ref)
		if err != nil {
			if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
				t.Fatalf("Locate(%q) = %v, want invalid_argument", ref, err)
			}
			return
		}
		if sandbox.ValidateName(name) != nil || sandbox.ValidateIdentity("tenant", tenant) != nil {
			t.Fatalf("Locate(%q) = %q, %q: not a valid tenant and name", ref, tenant, name)
		}
		t2, n2, err := agent.Locate(agent.RefOf(tenant, name))
		if err != nil || t2 != tenant || n2 != name {
			t.Fatalf("Locate(RefOf(Locate(%q))) = %q, %q, %v; want %q, %q", ref, t2, n2, err, tenant, name)
		}
	})
}
