package policy

import (
	"sort"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// window is the span the create rate is counted over: (now-window, now].
const window = time.Minute

// Rate is one identity's create history and breaker; the zero value is a
// fresh, closed breaker. Callers keep one per identity and replace it with
// what Admit returns. Admit never writes to the receiver's Recent, so
// copies of a Rate may share it.
type Rate struct {
	Recent        []time.Time // creates admitted in the last minute, oldest first
	OpenUntil     time.Time   // refusing creates until then (zero: not open)
	HalfOpenSince time.Time   // zero: closed (or open)
	AlarmedAt     time.Time   // the last alarm
}

// RateDecision is what Admit decided about one create.
type RateDecision struct {
	Alarm   bool  // raise the create-rate alarm now (at most one per minute per identity)
	Tripped bool  // this call opened (or re-opened) the breaker
	Err     error // circuit_open with details retry_after_seconds (ceil, ≥1), limit, used; nil = admitted
}

// BreakerState is the state of an identity's circuit breaker.
type BreakerState string

// The breaker's states.
const (
	BreakerClosed   BreakerState = "closed"
	BreakerOpen     BreakerState = "open"
	BreakerHalfOpen BreakerState = "half-open"
)

// Admit counts one create by agent at now against r (see the package doc
// for the rules) and returns the Rate to keep and the decision.
func (r Rate) Admit(agent string, now time.Time, l Limits) (Rate, RateDecision) {
	r = r.settle(now)
	if !r.OpenUntil.IsZero() {
		// Recent still holds the creates that opened the breaker: as many as
		// the half-open limit, or (from closed) the full one.
		used := len(r.Recent)
		halfOpen := used < breakerLimit(false, l)
		return r, RateDecision{Err: circuitOpen(agent, used, halfOpen, r.OpenUntil.Sub(now), l)}
	}
	halfOpen := !r.HalfOpenSince.IsZero()
	r.Recent = inWindow(r.Recent, now)
	if len(r.Recent) >= breakerLimit(halfOpen, l) {
		r.OpenUntil, r.HalfOpenSince = now.Add(l.BreakerCooldown), time.Time{}
		return r, RateDecision{Tripped: true, Err: circuitOpen(agent, len(r.Recent), halfOpen, l.BreakerCooldown, l)}
	}
	// inWindow clipped the capacity, so this append copies.
	r.Recent = append(r.Recent, now)
	var d RateDecision
	if len(r.Recent) >= l.AlarmCreatesPerMinute && (r.AlarmedAt.IsZero() || now.Sub(r.AlarmedAt) >= window) {
		r.AlarmedAt, d.Alarm = now, true
	}
	return r, d
}

// breakerLimit is how many creates in a window the breaker lets through:
// BreakerFactor × AlarmCreatesPerMinute, or AlarmCreatesPerMinute while
// half-open.
func breakerLimit(halfOpen bool, l Limits) int {
	if halfOpen {
		return l.AlarmCreatesPerMinute
	}
	return l.BreakerFactor * l.AlarmCreatesPerMinute
}

// Status reports, for introspection: the state at now, creates in the
// last minute, and when the breaker closes or half-opens (zero if closed).
// It applies the changes time alone makes (an open breaker past OpenUntil
// is half-open with no creates counted, and closed a minute later); the
// answer does not depend on l, which the signature carries for symmetry
// with Admit.
func (r Rate) Status(now time.Time, l Limits) (state BreakerState, recent int, until time.Time) {
	r = r.settle(now)
	recent = len(inWindow(r.Recent, now))
	switch {
	case !r.OpenUntil.IsZero():
		return BreakerOpen, recent, r.OpenUntil
	case !r.HalfOpenSince.IsZero():
		return BreakerHalfOpen, recent, r.HalfOpenSince.Add(window)
	}
	return BreakerClosed, recent, time.Time{}
}

// settle applies the changes time alone makes by now: an open breaker
// half-opens at OpenUntil, forgetting its history, and a half-open one
// closes a full window after it half-opened.
func (r Rate) settle(now time.Time) Rate {
	if !r.OpenUntil.IsZero() && !now.Before(r.OpenUntil) {
		r = Rate{HalfOpenSince: r.OpenUntil, AlarmedAt: r.AlarmedAt}
	}
	if !r.HalfOpenSince.IsZero() && !now.Before(r.HalfOpenSince.Add(window)) {
		r.HalfOpenSince = time.Time{}
	}
	return r
}

// inWindow is the part of ts (oldest first) after now-window, with its
// capacity clipped so that appending to it never writes to ts's array.
func inWindow(ts []time.Time, now time.Time) []time.Time {
	cutoff := now.Add(-window)
	i := sort.Search(len(ts), func(i int) bool { return ts[i].After(cutoff) })
	return ts[i:len(ts):len(ts)]
}

// circuitOpen is the refusal of a create by agent while the breaker is
// open: used creates in the window crossed the (half-open) limit, and the
// breaker half-opens in retry.
func circuitOpen(agent string, used int, halfOpen bool, retry time.Duration, l Limits) error {
	limit, which := breakerLimit(halfOpen, l), ""
	if halfOpen {
		which = "half-open "
	}
	secs := max(1, ceilSeconds(retry))
	return sandbox.Errorf(sandbox.CodeCircuitOpen, "circuit open: %s made %d creates in the last minute, reaching the %slimit of %d; creates are refused until the cool-down ends",
		identity(agent), used, which, limit).
		WithHint("retry in %s", time.Duration(secs)*time.Second).
		With("retry_after_seconds", secs).With("limit", limit).With("used", used)
}
