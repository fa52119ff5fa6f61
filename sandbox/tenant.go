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
	Policy PolicyOverrides `json:"policy"`
	// Pool is the node pool every one of the tenant's sandboxes runs in
	// (see ValidatePool), "" for any node. Only a fleet that places
	// sandboxes on nodes honours it (package kube: the Nodes labelled
	// hearth.dev/pool=Pool); a daemon that runs its sandboxes itself
	// ignores it.
	Pool      string    `json:"pool,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
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
	// DestructivePatterns replaces the destructive-command gate's patterns
	// (RE2, matched case-insensitively against the command); an empty
	// list turns the gate off. GateOnFailure is "refuse" (the default) or
	// "allow": what happens to such a command when its automatic
	// checkpoint cannot be taken.
	DestructivePatterns *[]string `json:"destructive_patterns,omitempty"`
	GateOnFailure       *string   `json:"gate_on_failure,omitempty"`
	// Network is the network mode of a sandbox whose create names none;
	// AllowEgress says whether a sandbox may have egress at all.
	Network     *string `json:"network,omitempty"`
	AllowEgress *bool   `json:"allow_egress,omitempty"`
	// Egress narrows where the tenant's egress sandboxes may connect (see
	// EgressPolicy); a change applies to running sandboxes at once.
	Egress *EgressPolicy `json:"egress,omitempty"`
}

// Agent is an agent identity: who, inside a tenant, creates and owns
// sandboxes. Its name is unique within its tenant, since it prefixes the
// names of the sandboxes it creates there (see AttributedName); another
// tenant may have an agent of the same name.
type Agent struct {
	Name      string    `json:"name"`
	Tenant    string    `json:"tenant"`
	CreatedAt time.Time `json:"created_at"`
}

// TokenInfo describes a bearer token without its secret, which is shown
// once, at creation, and never stored.
type TokenInfo struct {
	// ID is the token's public handle (revoke it by ID).
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Agent  string `json:"agent"`
	Role   Role   `json:"role"`
	// NamePrefix is the token's restriction (see TokenRequest).
	NamePrefix string    `json:"name_prefix,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
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

// LimitsReport tells a caller the guardrails it is under and how close it
// is to each (GET /v1/limits, `hearth limits`). Operators are under none:
// their report has only Role, Tenant, Agent and MaxTTL.
type LimitsReport struct {
	Tenant string `json:"tenant"`
	Agent  string `json:"agent"`
	Role   Role   `json:"role"`
	// Sandboxes is the agent's quota: sandboxes it may hold at once.
	Sandboxes *Quota `json:"sandboxes,omitempty"`
	// Budget is what all of the tenant's sandboxes may take together,
	// and what they take now; Allocation is the tenant's node capacity.
	Budget     *ResourceQuota `json:"budget,omitempty"`
	Allocation *Resources     `json:"allocation,omitempty"`
	// MaxTTL is the longest life a create may ask for (the default too);
	// IdleTimeout how long a sandbox stays awake with nothing to do.
	MaxTTL      Duration `json:"max_ttl"`
	IdleTimeout Duration `json:"idle_timeout,omitempty"`
	// CreateRate is the create-rate alarm and circuit breaker.
	CreateRate *RateReport `json:"create_rate,omitempty"`
	// Network is the network mode a create gets when it names none;
	// AllowEgress says whether it may ask for egress.
	Network     string `json:"network,omitempty"`
	AllowEgress bool   `json:"allow_egress,omitempty"`
}

// Quota is a limit and what is used of it.
type Quota struct {
	Limit int `json:"limit"`
	Used  int `json:"used"`
}

// ResourceQuota is a resource limit and what is used of it.
type ResourceQuota struct {
	Limit Resources `json:"limit"`
	Used  Resources `json:"used"`
}

// RateReport is the state of one identity's create rate: creates in the
// last minute against the alarm and breaker thresholds, the breaker's
// state ("closed", "open", "half-open"), and when it next changes (when an
// open breaker half-opens, a half-open one closes; absent when closed).
// ResetsAt is when the oldest create in the window leaves it.
type RateReport struct {
	Recent         int       `json:"recent"`
	AlarmPerMinute int       `json:"alarm_per_minute"`
	BreakerLimit   int       `json:"breaker_limit"`
	Breaker        string    `json:"breaker"`
	Until          time.Time `json:"until,omitzero"`
	ResetsAt       time.Time `json:"resets_at,omitzero"`
}

// TokenRequest is the input of token create. Role defaults to agent. An
// operator token belongs to the tenant "system"; Agent then only labels it
// ("operator" when empty). Any other token names an existing tenant and an
// agent identity of that tenant; a tenant admin may leave Tenant out (its
// own). TTL zero means the token never expires.
type TokenRequest struct {
	Tenant string   `json:"tenant,omitempty"`
	Agent  string   `json:"agent,omitempty"`
	Role   Role     `json:"role,omitempty"`
	TTL    Duration `json:"ttl,omitempty"`
	// NamePrefix restricts the token to sandboxes whose names (as the
	// caller writes them, without its attribution prefix) start with it,
	// e.g. "hermes-": a create of another name is permission_denied, every
	// other call on one is not_found (as a sandbox that does not exist),
	// and list, the audit log and the usage counts of limits show only
	// names inside it. Empty: unrestricted.
	NamePrefix string `json:"name_prefix,omitempty"`
}

// TenantUpdate changes a tenant: a non-nil Allocation replaces it, a
// non-nil Pool replaces the tenant's pool ("" un-pins it); each set field
// of Policy replaces that override, after ResetPolicy (if true) has
// dropped every override back to the defaults.
type TenantUpdate struct {
	Allocation  *Resources      `json:"allocation,omitempty"`
	Pool        *string         `json:"pool,omitempty"`
	Policy      PolicyOverrides `json:"policy"`
	ResetPolicy bool            `json:"reset_policy,omitempty"`
}

// Alarm is an event the platform raises for operators: a create rate at
// its alarm threshold, or a circuit breaker that opened.
type Alarm struct {
	// Kind is "create_rate" or "circuit_open".
	Kind    string    `json:"kind"`
	Tenant  string    `json:"tenant"`
	Agent   string    `json:"agent"`
	Message string    `json:"message"`
	Recent  int       `json:"recent"`
	Limit   int       `json:"limit"`
	At      time.Time `json:"at"`
}

// SecretInfo describes a tenant's secret without its value, which nothing
// returns once set: exec hands it to the one command that names it.
type SecretInfo struct {
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Secret values are MinSecretLen to MaxSecretLen bytes: a shorter one would
// be scrubbed from every output it happens to occur in by chance.
const (
	MinSecretLen = 4
	MaxSecretLen = 64 << 10
)

// ValidateSecretName checks a secret's name, which is also the name of the
// environment variable a command receives it in: 1–128 characters of
// [A-Za-z0-9_], not starting with a digit.
func ValidateSecretName(name string) error {
	bad := func(why string) *Error {
		return Errorf(CodeInvalidArgument, "invalid secret name %q: %s", name, why).
			WithHint("use an environment variable name, e.g. %q", "OPENAI_API_KEY")
	}
	switch {
	case name == "":
		return bad("empty")
	case len(name) > 128:
		return bad("longer than 128 characters")
	case name[0] >= '0' && name[0] <= '9':
		return bad("starts with a digit")
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_')
	}); i >= 0 {
		return bad("character " + quoteRune(name, i) + " is not allowed")
	}
	return nil
}
