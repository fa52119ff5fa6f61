package policy

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Budget is what all of a tenant's sandboxes may take together:
// BudgetPercent of alloc in MilliCPU, MemoryBytes and DiskBytes (Pids 0),
// rounded down.
func Budget(alloc sandbox.Resources, l Limits) sandbox.Resources {
	return sandbox.Resources{
		MilliCPU:    percent(alloc.MilliCPU, l.BudgetPercent),
		MemoryBytes: percent(alloc.MemoryBytes, l.BudgetPercent),
		DiskBytes:   percent(alloc.DiskBytes, l.BudgetPercent),
	}
}

// percent is v×p/100 rounded down, without overflowing for any v ≥ 0 and
// p in 0..100.
func percent(v int64, p int) int64 {
	return v/100*int64(p) + v%100*int64(p)/100
}

// Fit is how many sandboxes of size unit fit in budget: the minimum over
// unit's non-zero MilliCPU, MemoryBytes, DiskBytes (Pids ignored), never
// below 0. A unit with none of the three set takes nothing, so any number
// fits: math.MaxInt.
func Fit(budget, unit sandbox.Resources) int {
	n := int64(math.MaxInt)
	for _, d := range dimensions() {
		if each := d.of(unit); each > 0 {
			n = min(n, max(0, d.of(budget)/each))
		}
	}
	return int(n)
}

// AgentQuota is the quota in force for one identity: min(l.AgentQuota,
// max(1, Fit(budget, Sizes()[DefaultSize]) * AgentSharePercent / 100)).
func AgentQuota(l Limits, budget sandbox.Resources) int {
	share := percent(int64(Fit(budget, sandbox.Sizes()[sandbox.DefaultSize])), l.AgentSharePercent)
	return int(min(int64(l.AgentQuota), max(1, share)))
}

// Usage is what a tenant and the creating identity hold when a create
// is decided.
type Usage struct {
	AgentSandboxes int               // sandboxes the identity holds now (any status)
	Tenant         sandbox.Resources // sum of the Resources of all the tenant's sandboxes now
}

// CreateRequest is one create to decide.
type CreateRequest struct {
	Agent     string            // the creating identity, for messages
	Tenant    string            // for messages
	Size      string            // preset name, for messages
	Resources sandbox.Resources // the preset's resources
	TTL       time.Duration     // asked for; 0 = the default (MaxTTL)
}

// AdmitCreate decides one create: the TTL the sandbox gets, or why not.
// Checks in this order: TTL (negative or over MaxTTL → invalid_argument),
// agent quota (→ quota_exceeded), tenant budget (→ budget_exceeded, first
// dimension that overflows in the order cpu, memory, disk).
func AdmitCreate(req CreateRequest, u Usage, alloc sandbox.Resources, l Limits) (time.Duration, error) {
	ttl := req.TTL
	switch {
	case ttl < 0:
		return 0, sandbox.Errorf(sandbox.CodeInvalidArgument, "ttl %s is negative", ttl).
			WithHint("ask for a positive ttl such as 1h, or none for the default %s", l.MaxTTL)
	case ttl == 0:
		ttl = l.MaxTTL
	case ttl > l.MaxTTL:
		return 0, sandbox.Errorf(sandbox.CodeInvalidArgument, "ttl %s is longer than the %s cap", ttl, l.MaxTTL).
			WithHint("ask for at most %s", l.MaxTTL).
			With("limit_seconds", int64(l.MaxTTL/time.Second)).With("requested_seconds", ceilSeconds(ttl))
	}
	budget := Budget(alloc, l)
	if quota := AgentQuota(l, budget); u.AgentSandboxes >= quota {
		return 0, sandbox.Errorf(sandbox.CodeQuotaExceeded, "quota exceeded: %d of %d sandboxes in use for %s", u.AgentSandboxes, quota, identity(req.Agent)).
			WithHint("destroy one or wait").
			With("limit", quota).With("used", u.AgentSandboxes)
	}
	for _, d := range dimensions() {
		limit, used, requested := d.of(budget), d.of(u.Tenant), d.of(req.Resources)
		if used+requested > limit {
			return 0, sandbox.Errorf(sandbox.CodeBudgetExceeded, "budget exceeded: tenant %s's sandboxes would use %s of %s %s",
				req.Tenant, decimal(used+requested, d.unit, true), decimal(limit, d.unit, false), d.label).
				WithHint("destroy a sandbox, choose a smaller size, or ask an operator to raise the tenant's allocation").
				With("resource", d.name).With("limit", limit).With("used", used).With("requested", requested)
		}
	}
	return ttl, nil
}

// dimension is one resource a budget counts.
type dimension struct {
	name  string                        // the details' "resource"
	label string                        // the message's unit and noun
	unit  int64                         // base units (millicpu, bytes) per message unit
	of    func(sandbox.Resources) int64 // the dimension's base number in r
}

// dimensions are the budgeted resources in the order AdmitCreate checks them.
func dimensions() [3]dimension {
	return [3]dimension{
		{"cpu", "CPUs", 1000, func(r sandbox.Resources) int64 { return r.MilliCPU }},
		{"memory", "GiB of memory", 1 << 30, func(r sandbox.Resources) int64 { return r.MemoryBytes }},
		{"disk", "GiB of disk", 1 << 30, func(r sandbox.Resources) int64 { return r.DiskBytes }},
	}
}

// decimal renders v/unit (v ≥ 0) with up to three decimals, trailing zeros
// trimmed, rounded up or down. A budget message rounds what would be used
// up and the limit down, so that the one over never reads as equal.
func decimal(v, unit int64, up bool) string {
	whole, rest := v/unit, v%unit
	thousandths := rest * 1000 / unit
	if up && thousandths*unit < rest*1000 {
		thousandths++
	}
	if thousandths == 1000 {
		whole, thousandths = whole+1, 0
	}
	s := strconv.FormatInt(whole, 10)
	if thousandths == 0 {
		return s
	}
	frac := strconv.FormatInt(1000+thousandths, 10)[1:]
	return s + "." + strings.TrimRight(frac, "0")
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// identity renders an agent identity as its sandboxes' names start:
// "agent-<agent>".
func identity(agent string) string {
	return strings.TrimSuffix(sandbox.AttributionPrefix(agent), "-")
}
