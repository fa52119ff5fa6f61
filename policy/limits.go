package policy

import (
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Limits are the guardrails in force for one tenant.
type Limits struct {
	AgentQuota            int           // sandboxes one agent identity may hold at once (default 5)
	AgentSharePercent     int           // AgentQuota never exceeds this share of the tenant's budget counted in default-size sandboxes (10)
	BudgetPercent         int           // share of the tenant's allocation all its sandboxes may take together (25)
	MaxTTL                time.Duration // longest life a sandbox may ask for, and the default (24h)
	IdleTimeout           time.Duration // idle window before sleep (10m)
	AlarmCreatesPerMinute int           // create rate per identity that raises an alarm (10)
	BreakerFactor         int           // BreakerFactor × AlarmCreatesPerMinute opens the breaker (3)
	BreakerCooldown       time.Duration // how long an open breaker refuses creates (5m)
	// GateOnFailure is what happens to a destructive command whose
	// automatic checkpoint fails: GateRefuse (the default) or GateAllow.
	GateOnFailure string
	// Network is the network mode of a sandbox whose create names none
	// (sandbox.NetworkNone by default); AllowEgress says whether a sandbox
	// may have egress at all (true).
	Network     string
	AllowEgress bool
	// gate holds the destructive patterns (DefaultDestructive unless
	// overridden), compiled; see Destructive. It is never changed once
	// built, so Limits stay comparable with ==.
	gate *gate
}

// Defaults are the guardrails of a tenant with no overrides.
func Defaults() Limits {
	return Limits{
		AgentQuota:            5,
		AgentSharePercent:     10,
		BudgetPercent:         25,
		MaxTTL:                24 * time.Hour,
		IdleTimeout:           10 * time.Minute,
		AlarmCreatesPerMinute: 10,
		BreakerFactor:         3,
		BreakerCooldown:       5 * time.Minute,
		GateOnFailure:         GateRefuse,
		Network:               sandbox.NetworkNone,
		AllowEgress:           true,
		gate:                  defaultGate,
	}
}

// defaultGate is DefaultDestructive compiled once, like a constant: a bad
// default pattern panics at init, which the package's tests catch.
var defaultGate = func() *gate {
	g, err := compileGate(DefaultDestructive())
	if err != nil {
		panic(err)
	}
	return g
}()

// With applies o over l, validating every set field (ranges: quota
// 1..1000, percents 1..100, MaxTTL 1m..720h, IdleTimeout 1s..720h, alarm
// 1..10000, factor 1..100, cooldown 1s..24h); an out-of-range field is a
// *sandbox.Error invalid_argument naming the JSON field (e.g.
// "policy.agent_quota must be between 1 and 1000, got 0") with details
// min, max and got (ints for counts and percents, seconds as float64 for
// durations). Fields are checked in the order of Limits and the first bad
// one is reported; on error l is returned unchanged.
func (l Limits) With(o sandbox.PolicyOverrides) (Limits, error) {
	out := l
	for _, err := range []error{
		setInt(&out.AgentQuota, o.AgentQuota, "agent_quota", 1, 1000),
		setInt(&out.AgentSharePercent, o.AgentSharePercent, "agent_share_percent", 1, 100),
		setInt(&out.BudgetPercent, o.BudgetPercent, "budget_percent", 1, 100),
		setDuration(&out.MaxTTL, o.MaxTTL, "max_ttl", time.Minute, 720*time.Hour),
		setDuration(&out.IdleTimeout, o.IdleTimeout, "idle_timeout", time.Second, 720*time.Hour),
		setInt(&out.AlarmCreatesPerMinute, o.AlarmCreatesPerMinute, "alarm_creates_per_minute", 1, 10000),
		setInt(&out.BreakerFactor, o.BreakerFactor, "breaker_factor", 1, 100),
		setDuration(&out.BreakerCooldown, o.BreakerCooldown, "breaker_cooldown", time.Second, 24*time.Hour),
		setGate(&out, o),
		setNetwork(&out, o),
	} {
		if err != nil {
			return l, err
		}
	}
	return out, nil
}

// setGate applies the gate's overrides: the patterns (compiled; an empty
// list turns the gate off) and the failure policy.
func setGate(l *Limits, o sandbox.PolicyOverrides) error {
	if o.DestructivePatterns != nil {
		g, err := compileGate(tenantPatterns(*o.DestructivePatterns))
		if err != nil {
			return err
		}
		l.gate = g
	}
	if v := o.GateOnFailure; v != nil {
		if *v != GateRefuse && *v != GateAllow {
			return sandbox.Errorf(sandbox.CodeInvalidArgument, "policy.gate_on_failure must be %q or %q, got %q", GateRefuse, GateAllow, *v).
				WithHint("use %q (the default) or %q", GateRefuse, GateAllow)
		}
		l.GateOnFailure = *v
	}
	return nil
}

// setNetwork applies the network overrides: the default mode, and whether
// egress is allowed; a default of egress where egress is not allowed is
// refused, and so is an egress policy that does not parse.
func setNetwork(l *Limits, o sandbox.PolicyOverrides) error {
	if o.Network != nil {
		if err := sandbox.ValidateNetwork(*o.Network); err != nil || *o.Network == "" {
			return sandbox.Errorf(sandbox.CodeInvalidArgument, "policy.network must be %q or %q, got %q", sandbox.NetworkNone, sandbox.NetworkEgress, *o.Network).
				WithHint("use %q (the default) or %q", sandbox.NetworkNone, sandbox.NetworkEgress)
		}
		l.Network = *o.Network
	}
	if o.AllowEgress != nil {
		l.AllowEgress = *o.AllowEgress
	}
	if o.Egress != nil {
		if _, _, err := o.Egress.Parse(); err != nil {
			return err
		}
	}
	if l.Network == sandbox.NetworkEgress && !l.AllowEgress {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "policy.network is %q but policy.allow_egress is false", sandbox.NetworkEgress).
			WithHint("allow egress, or make %q the default network", sandbox.NetworkNone)
	}
	return nil
}

// Network decides the network mode of a create that asked for mode ("" for
// the default): invalid_argument for an unknown mode, permission_denied for
// egress where l does not allow it.
func (l Limits) NetworkFor(mode string) (string, error) {
	if err := sandbox.ValidateNetwork(mode); err != nil {
		return "", err
	}
	if mode == "" {
		mode = l.Network
	}
	if mode == sandbox.NetworkEgress && !l.AllowEgress {
		return "", sandbox.Errorf(sandbox.CodePermissionDenied, "the tenant's policy does not allow egress").
			WithHint("create the sandbox with network %q, or ask a tenant admin to set policy.allow_egress", sandbox.NetworkNone)
	}
	return mode, nil
}

// setInt sets *dst to *v when v is set and within lo..hi.
func setInt(dst *int, v *int, field string, lo, hi int) error {
	switch {
	case v == nil:
		return nil
	case *v < lo || *v > hi:
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "policy.%s must be between %d and %d, got %d", field, lo, hi, *v).
			WithHint("use a value from %d to %d, or leave it unset to keep %d", lo, hi, *dst).
			With("min", lo).With("max", hi).With("got", *v)
	}
	*dst = *v
	return nil
}

// setDuration sets *dst to *v when v is set and within lo..hi.
func setDuration(dst *time.Duration, v *sandbox.Duration, field string, lo, hi time.Duration) error {
	if v == nil {
		return nil
	}
	d := time.Duration(*v)
	if d < lo || d > hi {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "policy.%s must be between %s and %s, got %s", field, lo, hi, d).
			WithHint("use a duration from %s to %s, or leave it unset to keep %s", lo, hi, *dst).
			With("min", lo.Seconds()).With("max", hi.Seconds()).With("got", d.Seconds())
	}
	*dst = d
	return nil
}
