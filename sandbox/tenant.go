package sandbox

import (
	"strings"
	"time"
)

// Tenant is one organization sharing the fleet. Its sandboxes are burst
// capacity on top of its own workloads: together they may take
// BudgetPercent of its Allocation (see package policy).
type Tenant struct {
	// Name is the tenant's handle (see ValidateIdentity).
	Name string `json:"name"`
	// Allocation is the node capacity the tenant holds: MilliCPU,
	// MemoryBytes and DiskBytes (Pids is not allocated and stays 0).
	Allocation Resources `json:"allocation"`
	// Policy overrides the daemon's default guardrails for this tenant;
	// an unset field keeps the default.
	Policy    PolicyOverrides `json:"policy"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// PolicyOverrides are a tenant's departures from the default guardrails.
// A nil field keeps the default (package policy has them and their rules).
type PolicyOverrides struct {
	// AgentQuota is how many sandboxes one agent identity may hold at once.
	AgentQuota *int `json:"agent_quota,omitempty"`
	// AgentSharePercent caps AgentQuota at this share of the tenant's
	// budget counted in sandboxes of the default size.
	AgentSharePercent *int `json:"agent_share_percent,omitempty"`
	// BudgetPercent is the share of Allocation all of the tenant's
	// sandboxes may take together.
	BudgetPercent *int `json:"budget_percent,omitempty"`
	// MaxTTL is the longest life a sandbox may ask for (and the default).
	MaxTTL *Duration `json:"max_ttl,omitempty"`
	// IdleTimeout is how long a sandbox with no call from its owner and no
	// command running stays awake.
	IdleTimeout *Duration `json:"idle_timeout,omitempty"`
	// AlarmCreatesPerMinute is the create rate per identity that raises an
	// alarm; BreakerFactor times it opens the identity's circuit breaker
	// for BreakerCooldown.
	AlarmCreatesPerMinute *int      `json:"alarm_creates_per_minute,omitempty"`
	BreakerFactor         *int      `json:"breaker_factor,omitempty"`
	BreakerCooldown       *Duration `json:"breaker_cooldown,omitempty"`
}

// Agent is an agent identity: who, inside a tenant, creates and owns
// sandboxes. Its name is unique across tenants, since it prefixes the
// names of the sandboxes it creates (see AttributedName).
type Agent struct {
	Name      string    `json:"name"`
	Tenant    string    `json:"tenant"`
	CreatedAt time.Time `json:"created_at"`
}

// TokenInfo describes a bearer token without its secret, which is shown
// once, at creation, and never stored.
type TokenInfo struct {
	// ID is the token's public handle (revoke it by ID).
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Agent     string    `json:"agent"`
	Role      Role      `json:"role"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt zero means never; RevokedAt zero means live.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// MaxIdentityLen is the longest tenant or agent name: short enough that
// "agent-<identity>-" leaves half of a sandbox name's 63 characters.
const MaxIdentityLen = 24

// ValidateIdentity checks a tenant or agent name: 1–24 lowercase letters,
// digits and '-', starting with a letter and not ending with '-'. kind
// ("tenant", "agent") names it in the invalid_argument error.
func ValidateIdentity(kind, name string) error {
	bad := func(why string) *Error {
		return Errorf(CodeInvalidArgument, "invalid %s name %q: %s", kind, name, why).
			WithHint("use 1-%d lowercase letters, digits and '-', starting with a letter, e.g. %q", MaxIdentityLen, "claude-1")
	}
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxIdentityLen:
		return bad("longer than 24 characters").With("limit", MaxIdentityLen).With("used", len(name))
	case name[0] < 'a' || name[0] > 'z':
		return bad("does not start with a letter")
	case name[len(name)-1] == '-':
		return bad("ends with '-'")
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}); i >= 0 {
		return bad("character " + quoteRune(name, i) + " is not allowed")
	}
	return nil
}

// AttributionPrefix is the prefix of the names of the sandboxes agent
// creates: "agent-<agent>-".
func AttributionPrefix(agent string) string { return "agent-" + agent + "-" }

// AttributedName is the name a sandbox called name gets when agent creates
// it: name itself when it already carries the agent's prefix, else the
// prefix and name. The result is checked with ValidateName, so a name too
// long once prefixed is invalid_argument with the room left.
func AttributedName(agent, name string) (string, error) {
	prefix := AttributionPrefix(agent)
	if strings.HasPrefix(name, prefix) {
		return name, ValidateName(name)
	}
	if err := ValidateName(name); err != nil {
		return "", err
	}
	full := prefix + name
	if len(full) > MaxNameLen {
		return "", Errorf(CodeInvalidArgument, "sandbox name %q is too long: with the attribution prefix %q it has %d characters, over %d", name, prefix, len(full), MaxNameLen).
			WithHint("use at most %d characters", MaxNameLen-len(prefix)).
			With("limit", MaxNameLen-len(prefix)).With("used", len(name))
	}
	return full, nil
}
