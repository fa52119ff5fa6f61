package policy_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/sandbox"
)

func TestBudget(t *testing.T) {
	tests := []struct {
		alloc   sandbox.Resources
		percent int
		want    sandbox.Resources
	}{
		{sandbox.Resources{MilliCPU: 32000, MemoryBytes: 64 * gib, Pids: 4096, DiskBytes: 500 * gib}, 25,
			sandbox.Resources{MilliCPU: 8000, MemoryBytes: 16 * gib, DiskBytes: 125 * gib}},
		{sandbox.Resources{MilliCPU: 32000, MemoryBytes: 64 * gib, DiskBytes: 500 * gib}, 100,
			sandbox.Resources{MilliCPU: 32000, MemoryBytes: 64 * gib, DiskBytes: 500 * gib}},
		{sandbox.Resources{MilliCPU: 32000, MemoryBytes: 64 * gib, DiskBytes: 500 * gib}, 1,
			sandbox.Resources{MilliCPU: 320, MemoryBytes: 64 * gib / 100, DiskBytes: 5 * gib}},
		// Rounded down: 25% of 1003 is 250.75.
		{sandbox.Resources{MilliCPU: 1003, MemoryBytes: 7, DiskBytes: 399}, 25,
			sandbox.Resources{MilliCPU: 250, MemoryBytes: 1, DiskBytes: 99}},
		{sandbox.Resources{}, 25, sandbox.Resources{}},
		// No overflow at the top of int64.
		{sandbox.Resources{MilliCPU: math.MaxInt64, MemoryBytes: math.MaxInt64, DiskBytes: math.MaxInt64}, 100,
			sandbox.Resources{MilliCPU: math.MaxInt64, MemoryBytes: math.MaxInt64, DiskBytes: math.MaxInt64}},
		{sandbox.Resources{MilliCPU: math.MaxInt64, MemoryBytes: math.MaxInt64, DiskBytes: math.MaxInt64}, 50,
			sandbox.Resources{MilliCPU: math.MaxInt64 / 2, MemoryBytes: math.MaxInt64 / 2, DiskBytes: math.MaxInt64 / 2}},
	}
	for _, tt := range tests {
		l := limits(func(l *policy.Limits) { l.BudgetPercent = tt.percent })
		if got := policy.Budget(tt.alloc, l); got != tt.want {
			t.Errorf("Budget(%+v, %d%%) = %+v, want %+v", tt.alloc, tt.percent, got, tt.want)
		}
	}
}

func TestFit(t *testing.T) {
	tests := []struct {
		name         string
		budget, unit sandbox.Resources
		want         int
	}{
		{"exactly 4", fits(4), small(), 4},
		{"one byte short of 4", sandbox.Resources{MilliCPU: 4000, MemoryBytes: 4*512*mib - 1, DiskBytes: 8 * gib}, small(), 3},
		{"one byte over 4", sandbox.Resources{MilliCPU: 4000, MemoryBytes: 4*512*mib + 1, DiskBytes: 8 * gib}, small(), 4},
		{"cpu is the least", sandbox.Resources{MilliCPU: 2000, MemoryBytes: 10 * gib, DiskBytes: 100 * gib}, small(), 2},
		{"memory is the least", sandbox.Resources{MilliCPU: 9000, MemoryBytes: 1 * gib, DiskBytes: 100 * gib}, small(), 2},
		{"disk is the least", sandbox.Resources{MilliCPU: 9000, MemoryBytes: 10 * gib, DiskBytes: 5 * gib}, small(), 2},
		{"pids ignored", sandbox.Resources{MilliCPU: 3000, MemoryBytes: 10 * gib, DiskBytes: 100 * gib},
			sandbox.Resources{MilliCPU: 1000, Pids: 1 << 40}, 3},
		{"zero cpu in unit ignored", sandbox.Resources{MemoryBytes: 2 * gib, DiskBytes: 100 * gib},
			sandbox.Resources{MemoryBytes: gib, DiskBytes: gib}, 2},
		{"zero memory in unit ignored", sandbox.Resources{MilliCPU: 5000, DiskBytes: 100 * gib},
			sandbox.Resources{MilliCPU: 1000, DiskBytes: gib}, 5},
		{"zero disk in unit ignored", sandbox.Resources{MilliCPU: 5000, MemoryBytes: 3 * gib},
			sandbox.Resources{MilliCPU: 1000, MemoryBytes: gib}, 3},
		{"only disk", sandbox.Resources{DiskBytes: 7 * gib}, sandbox.Resources{DiskBytes: gib}, 7},
		{"empty unit takes nothing", fits(1), sandbox.Resources{}, math.MaxInt},
		{"empty unit, empty budget", sandbox.Resources{}, sandbox.Resources{Pids: 1}, math.MaxInt},
		{"empty budget", sandbox.Resources{}, small(), 0},
		{"budget overdrawn", sandbox.Resources{MilliCPU: -5000, MemoryBytes: 10 * gib, DiskBytes: 100 * gib}, small(), 0},
	}
	for _, tt := range tests {
		if got := policy.Fit(tt.budget, tt.unit); got != tt.want {
			t.Errorf("%s: Fit(%+v, %+v) = %d, want %d", tt.name, tt.budget, tt.unit, got, tt.want)
		}
	}
}

func TestAgentQuota(t *testing.T) {
	tests := []struct {
		name         string
		quota, share int
		budget       sandbox.Resources
		want         int
	}{
		{"share of 100 small is 10, capped by quota 5", 5, 10, fits(100), 5},
		{"share of 50 small is exactly 5", 5, 10, fits(50), 5},
		{"share of 49 small is 4", 5, 10, fits(49), 4},
		{"share of 30 small is 3", 5, 10, fits(30), 3},
		{"share of 10 small is 1", 5, 10, fits(10), 1},
		{"share of 9 small is 0, floored at 1", 5, 10, fits(9), 1},
		{"empty budget floored at 1", 5, 10, sandbox.Resources{}, 1},
		{"quota 1", 1, 10, fits(1000), 1},
		{"quota 1000, share 100", 1000, 100, fits(999), 999},
		{"quota 1000, share 100, room for more", 1000, 100, fits(5000), 1000},
		{"share 1 of 250", 5, 1, fits(250), 2},
		{"the least dimension counts", 5, 10, sandbox.Resources{MilliCPU: 100000, MemoryBytes: 20 * 512 * mib, DiskBytes: 1000 * gib}, 2},
	}
	for _, tt := range tests {
		l := limits(func(l *policy.Limits) { l.AgentQuota, l.AgentSharePercent = tt.quota, tt.share })
		if got := policy.AgentQuota(l, tt.budget); got != tt.want {
			t.Errorf("%s: AgentQuota(quota %d, share %d%%, %+v) = %d, want %d", tt.name, tt.quota, tt.share, tt.budget, got, tt.want)
		}
	}
}

// budgetHint is the hint of every budget refusal.
const budgetHint = "destroy a sandbox, choose a smaller size, or ask an operator to raise the tenant's allocation"

func TestAdmitCreate(t *testing.T) {
	// big holds a budget of 64 CPUs, 128 GiB and 512 GiB: the quota is 5.
	big := sandbox.Resources{MilliCPU: 256000, MemoryBytes: 512 * gib, DiskBytes: 2048 * gib}
	// tight holds a budget of 8 CPUs, 2 GiB and 10 GiB: the quota is 1.
	tight := sandbox.Resources{MilliCPU: 32000, MemoryBytes: 8 * gib, DiskBytes: 40 * gib}
	usage := func(agent int, cpu, mem, disk int64) policy.Usage {
		return policy.Usage{AgentSandboxes: agent, Tenant: sandbox.Resources{MilliCPU: cpu, MemoryBytes: mem, DiskBytes: disk}}
	}
	res := func(cpu, mem, disk int64) sandbox.Resources {
		return sandbox.Resources{MilliCPU: cpu, MemoryBytes: mem, Pids: 256, DiskBytes: disk}
	}
	quota := func(used int) *wantErr {
		return &wantErr{sandbox.CodeQuotaExceeded,
			fmt.Sprintf("quota exceeded: %d of 5 sandboxes in use for agent-claude-1", used),
			"destroy one or wait",
			map[string]any{"limit": 5, "used": used}}
	}
	budget := func(resource, message string, limit, used, requested int64) *wantErr {
		return &wantErr{sandbox.CodeBudgetExceeded, "budget exceeded: tenant acme's sandboxes would use " + message, budgetHint,
			map[string]any{"resource": resource, "limit": limit, "used": used, "requested": requested}}
	}
	tests := []struct {
		name    string
		ttl     time.Duration
		res     sandbox.Resources
		u       policy.Usage
		alloc   sandbox.Resources
		wantTTL time.Duration
		want    *wantErr
	}{
		// TTL.
		{"no ttl gets the cap", 0, small(), usage(0, 0, 0, 0), big, 24 * time.Hour, nil},
		{"ttl at the cap", 24 * time.Hour, small(), usage(0, 0, 0, 0), big, 24 * time.Hour, nil},
		{"ttl one under the cap", 24*time.Hour - time.Nanosecond, small(), usage(0, 0, 0, 0), big, 24*time.Hour - time.Nanosecond, nil},
		{"ttl of 1ns", time.Nanosecond, small(), usage(0, 0, 0, 0), big, time.Nanosecond, nil},
		{"ttl one over the cap", 24*time.Hour + time.Nanosecond, small(), usage(0, 0, 0, 0), big, 0, &wantErr{sandbox.CodeInvalidArgument,
			"ttl 24h0m0.000000001s is longer than the 24h0m0s cap", "ask for at most 24h0m0s",
			map[string]any{"limit_seconds": int64(86400), "requested_seconds": int64(86401)}}},
		{"ttl twice the cap", 48 * time.Hour, small(), usage(0, 0, 0, 0), big, 0, &wantErr{sandbox.CodeInvalidArgument,
			"ttl 48h0m0s is longer than the 24h0m0s cap", "ask for at most 24h0m0s",
			map[string]any{"limit_seconds": int64(86400), "requested_seconds": int64(172800)}}},
		{"ttl negative", -time.Second, small(), usage(0, 0, 0, 0), big, 0, &wantErr{sandbox.CodeInvalidArgument,
			"ttl -1s is negative", "ask for a positive ttl such as 1h, or none for the default 24h0m0s", nil}},
		{"ttl one under zero", -time.Nanosecond, small(), usage(0, 0, 0, 0), big, 0, &wantErr{sandbox.CodeInvalidArgument,
			"ttl -1ns is negative", "ask for a positive ttl such as 1h, or none for the default 24h0m0s", nil}},

		// Agent quota (5 with big).
		{"quota one under", 0, small(), usage(4, 0, 0, 0), big, 24 * time.Hour, nil},
		{"quota at the limit", 0, small(), usage(5, 0, 0, 0), big, 0, quota(5)},
		{"quota over the limit", 0, small(), usage(6, 0, 0, 0), big, 0, quota(6)},
		{"quota floored at 1: one under", 0, small(), usage(0, 0, 0, 0), tight, 24 * time.Hour, nil},
		{"quota floored at 1: at it", 0, small(), usage(1, 0, 0, 0), tight, 0, &wantErr{sandbox.CodeQuotaExceeded,
			"quota exceeded: 1 of 1 sandboxes in use for agent-claude-1", "destroy one or wait",
			map[string]any{"limit": 1, "used": 1}}},

		// Budget (tight: 8000 millicpu, 2 GiB, 10 GiB), each dimension at
		// the limit, one under and one over.
		{"cpu one under", 0, res(1000, 1, 1), usage(0, 6999, 0, 0), tight, 24 * time.Hour, nil},
		{"cpu at the budget", 0, res(1000, 1, 1), usage(0, 7000, 0, 0), tight, 24 * time.Hour, nil},
		{"cpu one over", 0, res(1000, 1, 1), usage(0, 7001, 0, 0), tight, 0,
			budget("cpu", "8.001 of 8 CPUs", 8000, 7001, 1000)},
		{"cpu words", 0, small(), usage(0, 8000, 0, 0), tight, 0,
			budget("cpu", "9 of 8 CPUs", 8000, 8000, 1000)},
		{"memory one under", 0, res(1, 512*mib, 1), usage(0, 0, 2*gib-512*mib-1, 0), tight, 24 * time.Hour, nil},
		{"memory at the budget", 0, res(1, 512*mib, 1), usage(0, 0, 2*gib-512*mib, 0), tight, 24 * time.Hour, nil},
		{"memory one over", 0, res(1, 512*mib, 1), usage(0, 0, 2*gib-512*mib+1, 0), tight, 0,
			budget("memory", "2.001 of 2 GiB of memory", 2*gib, 2*gib-512*mib+1, 512*mib)},
		{"memory words", 0, small(), usage(0, 0, 2*gib, 0), tight, 0,
			budget("memory", "2.5 of 2 GiB of memory", 2*gib, 2*gib, 512*mib)},
		{"disk one under", 0, res(1, 1, 2*gib), usage(0, 0, 0, 8*gib-1), tight, 24 * time.Hour, nil},
		{"disk at the budget", 0, res(1, 1, 2*gib), usage(0, 0, 0, 8*gib), tight, 24 * time.Hour, nil},
		{"disk one over", 0, res(1, 1, 2*gib), usage(0, 0, 0, 8*gib+1), tight, 0,
			budget("disk", "10.001 of 10 GiB of disk", 10*gib, 8*gib+1, 2*gib)},
		{"disk words", 0, small(), usage(0, 0, 0, 10*gib), tight, 0,
			budget("disk", "12 of 10 GiB of disk", 10*gib, 10*gib, 2*gib)},
		{"fractions", 0, res(250, 128*mib, gib/3), usage(0, 1500, 0, 0),
			sandbox.Resources{MilliCPU: 6000, MemoryBytes: 8 * gib, DiskBytes: 40 * gib}, 0,
			budget("cpu", "1.75 of 1.5 CPUs", 1500, 1500, 250)},
		{"fractions of a GiB", 0, res(1, 128*mib, 1), usage(0, 0, 5*gib/4, 0),
			sandbox.Resources{MilliCPU: 32000, MemoryBytes: 5 * gib, DiskBytes: 40 * gib}, 0,
			budget("memory", "1.375 of 1.25 GiB of memory", 5*gib/4, 5*gib/4, 128*mib)},
		{"a limit short of a thousandth reads rounded down", 0, res(1, 1, gib), usage(0, 0, 0, 0),
			sandbox.Resources{MilliCPU: 32000, MemoryBytes: 8 * gib, DiskBytes: 4*gib - 4}, 0,
			budget("disk", "1 of 0.999 GiB of disk", gib-1, 0, gib)},
		{"an excess short of a thousandth reads rounded up", 0, res(1, 1, 1), usage(0, 0, 0, 10*gib),
			tight, 0, budget("disk", "10.001 of 10 GiB of disk", 10*gib, 10*gib, 1)},
		{"an overdrawn dimension refuses even a create that adds none of it", 0, res(1000, 0, 0), usage(0, 0, 3*gib, 0),
			tight, 0, budget("memory", "3 of 2 GiB of memory", 2*gib, 3*gib, 0)},
		{"a zero allocation has no room", 0, small(), usage(0, 0, 0, 0),
			sandbox.Resources{MilliCPU: 32000, MemoryBytes: 8 * gib}, 0, budget("disk", "2 of 0 GiB of disk", 0, 0, 2*gib)},

		// The order of checks.
		{"ttl before quota", 48 * time.Hour, small(), usage(5, 0, 0, 0), big, 0, &wantErr{sandbox.CodeInvalidArgument,
			"ttl 48h0m0s is longer than the 24h0m0s cap", "ask for at most 24h0m0s",
			map[string]any{"limit_seconds": int64(86400), "requested_seconds": int64(172800)}}},
		{"quota before budget", 0, small(), usage(5, 64000, 128*gib, 512*gib), big, 0, quota(5)},
		{"cpu before memory and disk", 0, small(), usage(0, 8000, 2*gib, 10*gib), tight, 0,
			budget("cpu", "9 of 8 CPUs", 8000, 8000, 1000)},
		{"memory before disk", 0, small(), usage(0, 0, 2*gib, 10*gib), tight, 0,
			budget("memory", "2.5 of 2 GiB of memory", 2*gib, 2*gib, 512*mib)},
	}
	for _, tt := range tests {
		req := policy.CreateRequest{Agent: "claude-1", Tenant: "acme", Size: "small", Resources: tt.res, TTL: tt.ttl}
		ttl, err := policy.AdmitCreate(req, tt.u, tt.alloc, policy.Defaults())
		tt.want.check(t, tt.name, err)
		if ttl != tt.wantTTL {
			t.Errorf("%s: ttl %s, want %s", tt.name, ttl, tt.wantTTL)
		}
	}
}

// TestAdmitCreateLimits uses non-default limits: the TTL cap and its
// words follow MaxTTL, the quota follows AgentQuota and the budget
// BudgetPercent.
func TestAdmitCreateLimits(t *testing.T) {
	l := limits(func(l *policy.Limits) { l.MaxTTL, l.AgentQuota, l.BudgetPercent = 90*time.Minute, 2, 100 })
	alloc := fits(40) // budget 40 small at 100%; share 10% is 4, capped at 2
	req := policy.CreateRequest{Agent: "b", Tenant: "t", Size: "small", Resources: small()}
	if ttl, err := policy.AdmitCreate(req, policy.Usage{}, alloc, l); err != nil || ttl != 90*time.Minute {
		t.Errorf("default ttl = %s, %v; want 1h30m0s", ttl, err)
	}
	req.TTL = 91 * time.Minute
	_, err := policy.AdmitCreate(req, policy.Usage{}, alloc, l)
	(&wantErr{sandbox.CodeInvalidArgument, "ttl 1h31m0s is longer than the 1h30m0s cap", "ask for at most 1h30m0s",
		map[string]any{"limit_seconds": int64(5400), "requested_seconds": int64(5460)}}).check(t, "ttl over a custom cap", err)
	req.TTL = -time.Minute
	_, err = policy.AdmitCreate(req, policy.Usage{}, alloc, l)
	(&wantErr{sandbox.CodeInvalidArgument, "ttl -1m0s is negative", "ask for a positive ttl such as 1h, or none for the default 1h30m0s", nil}).
		check(t, "negative ttl under a custom cap", err)
	req.TTL = 0
	_, err = policy.AdmitCreate(req, policy.Usage{AgentSandboxes: 2}, alloc, l)
	(&wantErr{sandbox.CodeQuotaExceeded, "quota exceeded: 2 of 2 sandboxes in use for agent-b", "destroy one or wait",
		map[string]any{"limit": 2, "used": 2}}).check(t, "custom quota", err)
	_, err = policy.AdmitCreate(req, policy.Usage{AgentSandboxes: 1, Tenant: fits(40)}, alloc, l)
	(&wantErr{sandbox.CodeBudgetExceeded, "budget exceeded: tenant t's sandboxes would use 41 of 40 CPUs", budgetHint,
		map[string]any{"resource": "cpu", "limit": int64(40000), "used": int64(40000), "requested": int64(1000)}}).check(t, "full budget at 100%", err)
	if _, err := policy.AdmitCreate(req, policy.Usage{AgentSandboxes: 1, Tenant: fits(39)}, alloc, l); err != nil {
		t.Errorf("last small sandbox of a 100%% budget: %v", err)
	}
}
