package policy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/sandbox"
)

func TestDefaults(t *testing.T) {
	want := policy.WithDefaultGate(policy.Limits{
		AgentQuota:            5,
		AgentSharePercent:     10,
		BudgetPercent:         25,
		MaxTTL:                24 * time.Hour,
		IdleTimeout:           10 * time.Minute,
		AlarmCreatesPerMinute: 10,
		BreakerFactor:         3,
		BreakerCooldown:       5 * time.Minute,
		GateOnFailure:         policy.GateRefuse,
		Network:               sandbox.NetworkNone,
		AllowEgress:           true,
	})
	if got := policy.Defaults(); got != want {
		t.Errorf("Defaults() = %+v, want %+v", got, want)
	}
}

// intField is a count or percent of Limits, its override and its range.
type intField struct {
	json     string
	lo, hi   int
	override func(*sandbox.PolicyOverrides, int)
	field    func(*policy.Limits) *int
}

// durField is a duration of Limits, its override and its range.
type durField struct {
	json     string
	lo, hi   time.Duration
	override func(*sandbox.PolicyOverrides, time.Duration)
	field    func(*policy.Limits) *time.Duration
}

func intFields() []intField {
	return []intField{
		{"agent_quota", 1, 1000,
			func(o *sandbox.PolicyOverrides, v int) { o.AgentQuota = ptr(v) },
			func(l *policy.Limits) *int { return &l.AgentQuota }},
		{"agent_share_percent", 1, 100,
			func(o *sandbox.PolicyOverrides, v int) { o.AgentSharePercent = ptr(v) },
			func(l *policy.Limits) *int { return &l.AgentSharePercent }},
		{"budget_percent", 1, 100,
			func(o *sandbox.PolicyOverrides, v int) { o.BudgetPercent = ptr(v) },
			func(l *policy.Limits) *int { return &l.BudgetPercent }},
		{"alarm_creates_per_minute", 1, 10000,
			func(o *sandbox.PolicyOverrides, v int) { o.AlarmCreatesPerMinute = ptr(v) },
			func(l *policy.Limits) *int { return &l.AlarmCreatesPerMinute }},
		{"breaker_factor", 1, 100,
			func(o *sandbox.PolicyOverrides, v int) { o.BreakerFactor = ptr(v) },
			func(l *policy.Limits) *int { return &l.BreakerFactor }},
	}
}

func durFields() []durField {
	return []durField{
		{"max_ttl", time.Minute, 720 * time.Hour,
			func(o *sandbox.PolicyOverrides, v time.Duration) { o.MaxTTL = dur(v) },
			func(l *policy.Limits) *time.Duration { return &l.MaxTTL }},
		{"idle_timeout", time.Second, 720 * time.Hour,
			func(o *sandbox.PolicyOverrides, v time.Duration) { o.IdleTimeout = dur(v) },
			func(l *policy.Limits) *time.Duration { return &l.IdleTimeout }},
		{"breaker_cooldown", time.Second, 24 * time.Hour,
			func(o *sandbox.PolicyOverrides, v time.Duration) { o.BreakerCooldown = dur(v) },
			func(l *policy.Limits) *time.Duration { return &l.BreakerCooldown }},
	}
}

// TestWithEachField sets each field alone at its range's edges, just
// inside them and just past them: in range it changes that field only;
// out of range it is invalid_argument naming the field, and l comes back
// unchanged.
func TestWithEachField(t *testing.T) {
	base := policy.Defaults()
	for _, f := range intFields() {
		for _, c := range []struct {
			v  int
			ok bool
		}{
			{f.lo - 1, false}, {f.lo, true}, {f.lo + 1, true},
			{f.hi - 1, true}, {f.hi, true}, {f.hi + 1, false}, {-1, false},
		} {
			var o sandbox.PolicyOverrides
			f.override(&o, c.v)
			got, err := base.With(o)
			what := fmt.Sprintf("With(%s=%d)", f.json, c.v)
			if c.ok {
				want := base
				*f.field(&want) = c.v
				if err != nil || got != want {
					t.Errorf("%s = %+v, %v; want %+v", what, got, err, want)
				}
				continue
			}
			(&wantErr{
				code:    sandbox.CodeInvalidArgument,
				message: fmt.Sprintf("policy.%s must be between %d and %d, got %d", f.json, f.lo, f.hi, c.v),
				hint:    fmt.Sprintf("use a value from %d to %d, or leave it unset to keep %d", f.lo, f.hi, *f.field(&base)),
				details: map[string]any{"min": f.lo, "max": f.hi, "got": c.v},
			}).check(t, what, err)
			if got != base {
				t.Errorf("%s returned %+v, want l unchanged", what, got)
			}
		}
	}
	for _, f := range durFields() {
		for _, c := range []struct {
			v  time.Duration
			ok bool
		}{
			{-time.Second, false}, {0, false}, {f.lo - time.Nanosecond, false}, {f.lo, true},
			{f.lo + time.Nanosecond, true}, {f.hi, true}, {f.hi + time.Nanosecond, false},
		} {
			var o sandbox.PolicyOverrides
			f.override(&o, c.v)
			got, err := base.With(o)
			what := fmt.Sprintf("With(%s=%s)", f.json, c.v)
			if c.ok {
				want := base
				*f.field(&want) = c.v
				if err != nil || got != want {
					t.Errorf("%s = %+v, %v; want %+v", what, got, err, want)
				}
				continue
			}
			(&wantErr{
				code:    sandbox.CodeInvalidArgument,
				message: fmt.Sprintf("policy.%s must be between %s and %s, got %s", f.json, f.lo, f.hi, c.v),
				hint:    fmt.Sprintf("use a duration from %s to %s, or leave it unset to keep %s", f.lo, f.hi, *f.field(&base)),
				details: map[string]any{"min": f.lo.Seconds(), "max": f.hi.Seconds(), "got": c.v.Seconds()},
			}).check(t, what, err)
			if got != base {
				t.Errorf("%s returned %+v, want l unchanged", what, got)
			}
		}
	}
}

// TestWithWords pins the words of a few refusals literally.
func TestWithWords(t *testing.T) {
	tests := []struct {
		o    sandbox.PolicyOverrides
		want wantErr
	}{
		{sandbox.PolicyOverrides{AgentQuota: ptr(0)}, wantErr{sandbox.CodeInvalidArgument,
			"policy.agent_quota must be between 1 and 1000, got 0",
			"use a value from 1 to 1000, or leave it unset to keep 5",
			map[string]any{"min": 1, "max": 1000, "got": 0}}},
		{sandbox.PolicyOverrides{BudgetPercent: ptr(101)}, wantErr{sandbox.CodeInvalidArgument,
			"policy.budget_percent must be between 1 and 100, got 101",
			"use a value from 1 to 100, or leave it unset to keep 25",
			map[string]any{"min": 1, "max": 100, "got": 101}}},
		{sandbox.PolicyOverrides{MaxTTL: dur(30 * time.Second)}, wantErr{sandbox.CodeInvalidArgument,
			"policy.max_ttl must be between 1m0s and 720h0m0s, got 30s",
			"use a duration from 1m0s to 720h0m0s, or leave it unset to keep 24h0m0s",
			map[string]any{"min": 60.0, "max": 2592000.0, "got": 30.0}}},
		{sandbox.PolicyOverrides{IdleTimeout: dur(500 * time.Millisecond)}, wantErr{sandbox.CodeInvalidArgument,
			"policy.idle_timeout must be between 1s and 720h0m0s, got 500ms",
			"use a duration from 1s to 720h0m0s, or leave it unset to keep 10m0s",
			map[string]any{"min": 1.0, "max": 2592000.0, "got": 0.5}}},
		{sandbox.PolicyOverrides{BreakerCooldown: dur(25 * time.Hour)}, wantErr{sandbox.CodeInvalidArgument,
			"policy.breaker_cooldown must be between 1s and 24h0m0s, got 25h0m0s",
			"use a duration from 1s to 24h0m0s, or leave it unset to keep 5m0s",
			map[string]any{"min": 1.0, "max": 86400.0, "got": 90000.0}}},
	}
	for _, tt := range tests {
		_, err := policy.Defaults().With(tt.o)
		tt.want.check(t, tt.want.message, err)
	}
}

// TestWithAll sets every field at once over non-default limits; an unset
// field keeps l's value, not the default.
func TestWithAll(t *testing.T) {
	base := limits(func(l *policy.Limits) { l.AgentQuota, l.MaxTTL = 7, time.Hour })
	got, err := base.With(sandbox.PolicyOverrides{BudgetPercent: ptr(50)})
	if want := limits(func(l *policy.Limits) { l.AgentQuota, l.MaxTTL, l.BudgetPercent = 7, time.Hour, 50 }); err != nil || got != want {
		t.Errorf("With(budget_percent) over custom limits = %+v, %v; want %+v", got, err, want)
	}
	all := sandbox.PolicyOverrides{
		AgentQuota: ptr(2), AgentSharePercent: ptr(3), BudgetPercent: ptr(4),
		MaxTTL: dur(2 * time.Hour), IdleTimeout: dur(3 * time.Minute),
		AlarmCreatesPerMinute: ptr(5), BreakerFactor: ptr(6), BreakerCooldown: dur(7 * time.Second),
		Network: ptr(sandbox.NetworkEgress), AllowEgress: ptr(true),
	}
	want := policy.WithDefaultGate(policy.Limits{
		AgentQuota: 2, AgentSharePercent: 3, BudgetPercent: 4,
		MaxTTL: 2 * time.Hour, IdleTimeout: 3 * time.Minute,
		AlarmCreatesPerMinute: 5, BreakerFactor: 6, BreakerCooldown: 7 * time.Second,
		GateOnFailure: policy.GateRefuse, Network: sandbox.NetworkEgress, AllowEgress: true,
	})
	if got, err := base.With(all); err != nil || got != want {
		t.Errorf("With(all) = %+v, %v; want %+v", got, err, want)
	}
}

// TestWithFirstBadField reports the first bad field in Limits' order
// when several are bad, and keeps none of the good ones.
func TestWithFirstBadField(t *testing.T) {
	base := policy.Defaults()
	got, err := base.With(sandbox.PolicyOverrides{
		AgentQuota: ptr(3), BudgetPercent: ptr(0), BreakerFactor: ptr(0), MaxTTL: dur(0),
	})
	if e := sandbox.AsError(err); e == nil || e.Message != "policy.budget_percent must be between 1 and 100, got 0" {
		t.Errorf("With(several bad) = %v, want the budget_percent error", err)
	}
	if got != base {
		t.Errorf("With(several bad) returned %+v, want l unchanged", got)
	}
}

// The network policy: the default mode and whether egress is allowed,
// each edge of NetworkFor, and the overrides' validation.
func TestNetwork(t *testing.T) {
	d := policy.Defaults()
	noEgress, err := d.With(sandbox.PolicyOverrides{AllowEgress: ptr(false)})
	if err != nil {
		t.Fatal(err)
	}
	egressFirst, err := d.With(sandbox.PolicyOverrides{Network: ptr(sandbox.NetworkEgress)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		l     policy.Limits
		asked string
		want  string
		code  sandbox.Code
	}{
		{"default is none", d, "", sandbox.NetworkNone, ""},
		{"egress asked, allowed", d, sandbox.NetworkEgress, sandbox.NetworkEgress, ""},
		{"none asked", d, sandbox.NetworkNone, sandbox.NetworkNone, ""},
		{"tenant default egress", egressFirst, "", sandbox.NetworkEgress, ""},
		{"tenant default egress, none asked", egressFirst, sandbox.NetworkNone, sandbox.NetworkNone, ""},
		{"egress not allowed", noEgress, sandbox.NetworkEgress, "", sandbox.CodePermissionDenied},
		{"none where egress is not allowed", noEgress, "", sandbox.NetworkNone, ""},
		{"unknown mode", d, "bridge", "", sandbox.CodeInvalidArgument},
	} {
		got, err := tt.l.NetworkFor(tt.asked)
		if got != tt.want || sandbox.ErrorCode(err) != tt.code {
			t.Errorf("%s: NetworkFor(%q) = %q, %v; want %q, code %q", tt.name, tt.asked, got, err, tt.want, tt.code)
		}
	}
	for _, o := range []sandbox.PolicyOverrides{
		{Network: ptr("bridge")},
		{Network: ptr("")},
		{Network: ptr(sandbox.NetworkEgress), AllowEgress: ptr(false)},
	} {
		if _, err := d.With(o); !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("With(network %v, allow_egress %v) = %v, want invalid_argument", o.Network, o.AllowEgress, err)
		}
	}
}
