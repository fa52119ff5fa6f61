package policy_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/sandbox"
)

// t0 is the fake clock's start; every time below is an offset from it.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// circuit is the refusal of a create by claude-1 while the breaker is open.
func circuit(used, limit int, halfOpen bool, retrySeconds int64) *wantErr {
	which := ""
	if halfOpen {
		which = "half-open "
	}
	return &wantErr{
		code: sandbox.CodeCircuitOpen,
		message: fmt.Sprintf("circuit open: agent-claude-1 made %d creates in the last minute, reaching the %slimit of %d; creates are refused until the cool-down ends",
			used, which, limit),
		hint:    "retry in " + (time.Duration(retrySeconds) * time.Second).String(),
		details: map[string]any{"retry_after_seconds": retrySeconds, "limit": limit, "used": used},
	}
}

// step is one call on the fake clock: Admit (or, if peek, Status only)
// and what it must answer; Status is checked after every step.
type step struct {
	at      time.Duration
	peek    bool
	admit   bool
	alarm   bool
	tripped bool
	err     *wantErr // the refusal, when !admit
	state   policy.BreakerState
	recent  int
	until   time.Duration // offset of Status's until; 0 means zero
}

// walk runs steps in order on one Rate and returns it.
func walk(t *testing.T, r policy.Rate, l policy.Limits, steps []step) policy.Rate {
	t.Helper()
	for i, s := range steps {
		what := fmt.Sprintf("step %d at +%s", i, s.at)
		now := at(s.at)
		if !s.peek {
			var d policy.RateDecision
			r, d = r.Admit("claude-1", now, l)
			if d.Alarm != s.alarm || d.Tripped != s.tripped || (d.Err == nil) != s.admit {
				t.Fatalf("%s: Admit = alarm %v, tripped %v, err %v; want alarm %v, tripped %v, admitted %v",
					what, d.Alarm, d.Tripped, d.Err, s.alarm, s.tripped, s.admit)
			}
			if !s.admit {
				s.err.check(t, what, d.Err)
			}
		}
		state, recent, until := r.Status(now, l)
		wantUntil := time.Time{}
		if s.until != 0 {
			wantUntil = at(s.until)
		}
		if state != s.state || recent != s.recent || !until.Equal(wantUntil) {
			t.Fatalf("%s: Status = %s, %d, %v; want %s, %d, %v", what, state, recent, until, s.state, s.recent, wantUntil)
		}
	}
	return r
}

func admitted(offset time.Duration, state policy.BreakerState, recent int, until time.Duration) step {
	return step{at: offset, admit: true, state: state, recent: recent, until: until}
}

// TestRateWalk follows one identity under the default limits (alarm at
// 10, trip over 30, cool-down 5m) through every state of the breaker.
func TestRateWalk(t *testing.T) {
	const s = time.Second
	var steps []step
	// Closed: 30 creates a second apart; the 10th raises the alarm.
	for i := range 30 {
		st := admitted(time.Duration(i)*s, policy.BreakerClosed, i+1, 0)
		st.alarm = i == 9
		steps = append(steps, st)
	}
	steps = append(steps,
		// The 31st trips the breaker; refusals count down to half-open.
		step{at: 30 * s, tripped: true, err: circuit(30, 30, false, 300), state: policy.BreakerOpen, recent: 30, until: 330 * s},
		step{at: 30*s + time.Millisecond, err: circuit(30, 30, false, 300), state: policy.BreakerOpen, recent: 30, until: 330 * s},
		step{at: 60 * s, err: circuit(30, 30, false, 270), state: policy.BreakerOpen, recent: 29, until: 330 * s},
		step{at: 90 * s, err: circuit(30, 30, false, 240), state: policy.BreakerOpen, recent: 0, until: 330 * s},
		step{at: 329*s + 500*time.Millisecond, err: circuit(30, 30, false, 1), state: policy.BreakerOpen, recent: 0, until: 330 * s},
		step{at: 330*s - time.Nanosecond, err: circuit(30, 30, false, 1), state: policy.BreakerOpen, recent: 0, until: 330 * s},
		step{at: 330*s - time.Nanosecond, peek: true, state: policy.BreakerOpen, until: 330 * s},
		step{at: 330 * s, peek: true, state: policy.BreakerHalfOpen, until: 390 * s},
	)
	// Half-open from 330s: 10 creates are admitted, the 10th alarms again
	// (the last alarm was long ago).
	for i := range 10 {
		st := admitted(330*s+time.Duration(i)*s, policy.BreakerHalfOpen, i+1, 390*s)
		st.alarm = i == 9
		steps = append(steps, st)
	}
	steps = append(steps,
		// The 11th re-opens it.
		step{at: 340 * s, tripped: true, err: circuit(10, 10, true, 300), state: policy.BreakerOpen, recent: 10, until: 640 * s},
		step{at: 400 * s, err: circuit(10, 10, true, 240), state: policy.BreakerOpen, recent: 0, until: 640 * s},
		// Half-open again from 640s; one create, then a quiet minute closes it.
		admitted(640*s, policy.BreakerHalfOpen, 1, 700*s),
		step{at: 700*s - time.Nanosecond, peek: true, state: policy.BreakerHalfOpen, recent: 1, until: 700 * s},
		step{at: 700 * s, peek: true, state: policy.BreakerClosed, recent: 0},
	)
	// Closed again: the full limit of 30 applies, and the alarm at the 10th.
	for i := range 30 {
		st := admitted(700*s+time.Duration(i)*s, policy.BreakerClosed, i+1, 0)
		st.alarm = i == 9
		steps = append(steps, st)
	}
	steps = append(steps,
		step{at: 730 * s, tripped: true, err: circuit(30, 30, false, 300), state: policy.BreakerOpen, recent: 30, until: 1030 * s},
	)
	r := walk(t, policy.Rate{}, policy.Defaults(), steps)
	if len(r.Recent) != 30 {
		t.Errorf("after the walk Recent has %d times, want the 30 that tripped it (refusals are not recorded)", len(r.Recent))
	}
}

// TestRateWords pins the breaker's refusals word for word.
func TestRateWords(t *testing.T) {
	l := policy.Defaults()
	var r policy.Rate
	var d policy.RateDecision
	for i := range 31 {
		r, d = r.Admit("claude-1", at(time.Duration(i)*time.Millisecond), l)
	}
	(&wantErr{sandbox.CodeCircuitOpen,
		"circuit open: agent-claude-1 made 30 creates in the last minute, reaching the limit of 30; creates are refused until the cool-down ends",
		"retry in 5m0s",
		map[string]any{"retry_after_seconds": int64(300), "limit": 30, "used": 30}}).check(t, "trip", d.Err)
	_, d = r.Admit("claude-1", at(2*time.Minute+10*time.Second), l)
	(&wantErr{sandbox.CodeCircuitOpen,
		"circuit open: agent-claude-1 made 30 creates in the last minute, reaching the limit of 30; creates are refused until the cool-down ends",
		"retry in 2m51s",
		map[string]any{"retry_after_seconds": int64(171), "limit": 30, "used": 30}}).check(t, "open", d.Err)
	halfOpen := at(5*time.Minute + 30*time.Millisecond)
	for i := range 11 {
		r, d = r.Admit("claude-1", halfOpen.Add(time.Duration(i)*time.Second), l)
	}
	(&wantErr{sandbox.CodeCircuitOpen,
		"circuit open: agent-claude-1 made 10 creates in the last minute, reaching the half-open limit of 10; creates are refused until the cool-down ends",
		"retry in 5m0s",
		map[string]any{"retry_after_seconds": int64(300), "limit": 10, "used": 10}}).check(t, "re-open", d.Err)
}

// TestRateEdges checks, for several limits, that the alarm comes exactly
// on the T-th create, the trip on the trip+1-th, and in half-open the
// re-open on the T+1-th.
func TestRateEdges(t *testing.T) {
	for _, c := range []struct{ alarm, factor int }{{1, 1}, {2, 1}, {1, 3}, {3, 2}, {10, 3}, {7, 4}, {50, 10}} {
		l := limits(func(l *policy.Limits) {
			l.AlarmCreatesPerMinute, l.BreakerFactor, l.BreakerCooldown = c.alarm, c.factor, time.Second
		})
		trip := c.alarm * c.factor
		name := fmt.Sprintf("alarm %d factor %d", c.alarm, c.factor)
		var r policy.Rate
		now := t0
		for n := 1; n <= trip+1; n++ {
			var d policy.RateDecision
			now = now.Add(time.Millisecond)
			r, d = r.Admit("claude-1", now, l)
			if d.Alarm != (n == c.alarm) || d.Tripped != (n == trip+1) || (d.Err == nil) != (n <= trip) {
				t.Fatalf("%s: create %d: alarm %v tripped %v err %v", name, n, d.Alarm, d.Tripped, d.Err)
			}
		}
		now = now.Add(time.Second) // the cool-down
		for n := 1; n <= c.alarm+1; n++ {
			var d policy.RateDecision
			r, d = r.Admit("claude-1", now, l)
			if d.Alarm || d.Tripped != (n == c.alarm+1) || (d.Err == nil) != (n <= c.alarm) {
				t.Fatalf("%s: half-open create %d: alarm %v tripped %v err %v", name, n, d.Alarm, d.Tripped, d.Err)
			}
			now = now.Add(time.Millisecond)
		}
		if state, _, _ := r.Status(now, l); state != policy.BreakerOpen {
			t.Errorf("%s: after the re-open Status = %s, want open", name, state)
		}
	}
}

// TestRateAlarmOncePerMinute: a rate that stays high alarms again only a
// full minute after the last alarm.
func TestRateAlarmOncePerMinute(t *testing.T) {
	const s = time.Second
	var steps []step
	for i := range 10 { // alarm at 9s
		st := admitted(time.Duration(i)*s, policy.BreakerClosed, i+1, 0)
		st.alarm = i == 9
		steps = append(steps, st)
	}
	for i := range 10 { // 11..20 in the window, within a minute of the alarm
		steps = append(steps, admitted(50*s+time.Duration(i)*s, policy.BreakerClosed, 11+i, 0))
	}
	steps = append(steps,
		// Window (8s, 68s]: 9s and 50..59s, and this one; the alarm was 59s ago.
		admitted(68*s, policy.BreakerClosed, 12, 0),
		// Window (9s, 69s]: 50..59s, 68s and this one; the alarm was a minute ago.
		step{at: 69 * s, admit: true, alarm: true, state: policy.BreakerClosed, recent: 12},
		admitted(70*s, policy.BreakerClosed, 13, 0),
	)
	walk(t, policy.Rate{}, policy.Defaults(), steps)

	// Under T in the window, no alarm however long since the last one.
	r := policy.Rate{AlarmedAt: t0}
	for i := range 9 {
		var d policy.RateDecision
		r, d = r.Admit("claude-1", at(time.Hour+time.Duration(i)*s), policy.Defaults())
		if d.Alarm || d.Err != nil {
			t.Fatalf("create %d of 9: alarm %v err %v", i+1, d.Alarm, d.Err)
		}
	}
}

// TestRateWindowBoundary: a create at t is out of the window at t+60s
// and still in it a nanosecond earlier.
func TestRateWindowBoundary(t *testing.T) {
	l := limits(func(l *policy.Limits) { l.AlarmCreatesPerMinute, l.BreakerFactor = 2, 1 })
	var r policy.Rate
	r, _ = r.Admit("claude-1", at(0), l)
	r, _ = r.Admit("claude-1", at(time.Second), l)
	if _, d := r.Admit("claude-1", at(time.Minute), l); d.Err != nil {
		t.Errorf("create at +60s (the one at 0 has left the window): %v", d.Err)
	}
	if _, d := r.Admit("claude-1", at(time.Minute-time.Nanosecond), l); !d.Tripped {
		t.Errorf("create at +60s-1ns (three in the window, limit 2): tripped %v err %v, want tripped", d.Tripped, d.Err)
	}
	if _, recent, _ := r.Status(at(time.Minute), l); recent != 1 {
		t.Errorf("Status at +60s: recent %d, want 1", recent)
	}
	if _, recent, _ := r.Status(at(time.Minute-time.Nanosecond), l); recent != 2 {
		t.Errorf("Status at +60s-1ns: recent %d, want 2", recent)
	}
}

// TestRateStatus reports each state of hand-made Rates, including the
// changes time makes with no create to trigger them.
func TestRateStatus(t *testing.T) {
	l := policy.Defaults()
	three := []time.Time{at(-50 * time.Second), at(-10 * time.Second), at(0)}
	tests := []struct {
		name   string
		r      policy.Rate
		now    time.Duration
		state  policy.BreakerState
		recent int
		until  time.Time
	}{
		{"zero", policy.Rate{}, 0, policy.BreakerClosed, 0, time.Time{}},
		{"closed with creates", policy.Rate{Recent: three}, 0, policy.BreakerClosed, 3, time.Time{}},
		{"closed, some creates old", policy.Rate{Recent: three}, 15 * time.Second, policy.BreakerClosed, 2, time.Time{}},
		{"closed, the oldest at exactly 60s", policy.Rate{Recent: three}, 10 * time.Second, policy.BreakerClosed, 2, time.Time{}},
		{"closed, the oldest 1ns before 60s", policy.Rate{Recent: three}, 10*time.Second - time.Nanosecond, policy.BreakerClosed, 3, time.Time{}},
		{"open", policy.Rate{Recent: three, OpenUntil: at(time.Minute)}, 0, policy.BreakerOpen, 3, at(time.Minute)},
		{"open, last instant", policy.Rate{Recent: three, OpenUntil: at(time.Minute)}, time.Minute - time.Nanosecond, policy.BreakerOpen, 1, at(time.Minute)},
		{"half-open at OpenUntil, window emptied", policy.Rate{Recent: []time.Time{at(30 * time.Second)}, OpenUntil: at(time.Minute)}, time.Minute, policy.BreakerHalfOpen, 0, at(2 * time.Minute)},
		{"half-open after OpenUntil with no call", policy.Rate{OpenUntil: at(time.Minute)}, 90 * time.Second, policy.BreakerHalfOpen, 0, at(2 * time.Minute)},
		{"closed a minute after OpenUntil with no call", policy.Rate{OpenUntil: at(time.Minute)}, 2 * time.Minute, policy.BreakerClosed, 0, time.Time{}},
		{"half-open", policy.Rate{Recent: three, HalfOpenSince: at(-30 * time.Second)}, 0, policy.BreakerHalfOpen, 3, at(30 * time.Second)},
		{"half-open, last instant", policy.Rate{Recent: three, HalfOpenSince: at(-30 * time.Second)}, 30*time.Second - time.Nanosecond, policy.BreakerHalfOpen, 2, at(30 * time.Second)},
		{"closed a minute after half-opening", policy.Rate{Recent: three, HalfOpenSince: at(-30 * time.Second)}, 30 * time.Second, policy.BreakerClosed, 2, time.Time{}},
	}
	for _, tt := range tests {
		state, recent, until := tt.r.Status(at(tt.now), l)
		if state != tt.state || recent != tt.recent || !until.Equal(tt.until) {
			t.Errorf("%s: Status = %s, %d, %v; want %s, %d, %v", tt.name, state, recent, until, tt.state, tt.recent, tt.until)
		}
	}
}

// TestRateQuietCooldown: an identity that waits out the cool-down and
// the half-open minute without a call comes back closed, with the full
// limit.
func TestRateQuietCooldown(t *testing.T) {
	l := policy.Defaults()
	r := policy.Rate{OpenUntil: at(0), AlarmedAt: at(-time.Minute)}
	for i := range 30 {
		var d policy.RateDecision
		r, d = r.Admit("claude-1", at(time.Minute+time.Duration(i)*time.Millisecond), l)
		if d.Err != nil {
			t.Fatalf("create %d after a quiet cool-down and minute: %v", i+1, d.Err)
		}
	}
	if !r.HalfOpenSince.IsZero() || !r.OpenUntil.IsZero() {
		t.Errorf("Rate after closing = %+v, want OpenUntil and HalfOpenSince zero", r)
	}
}

// TestRateTripDoesNotAlarm: the refusal that opens the breaker is
// reported as Tripped, not as an alarm, even when no alarm came before.
func TestRateTripDoesNotAlarm(t *testing.T) {
	var recent []time.Time
	for i := range 30 {
		recent = append(recent, at(time.Duration(i)*time.Millisecond))
	}
	_, d := policy.Rate{Recent: recent}.Admit("claude-1", at(time.Second), policy.Defaults())
	if d.Alarm || !d.Tripped {
		t.Errorf("31st create: alarm %v tripped %v, want tripped only", d.Alarm, d.Tripped)
	}
}

// TestRateRetryRoundsUp: retry_after_seconds is the cool-down left,
// rounded up to the second.
func TestRateRetryRoundsUp(t *testing.T) {
	l := limits(func(l *policy.Limits) {
		l.AlarmCreatesPerMinute, l.BreakerFactor, l.BreakerCooldown = 1, 1, 1500*time.Millisecond
	})
	var r policy.Rate
	r, _ = r.Admit("claude-1", at(0), l)
	r, d := r.Admit("claude-1", at(0), l)
	circuit(1, 1, false, 2).check(t, "trip with a 1.5s cool-down", d.Err)
	_, d = r.Admit("claude-1", at(1499*time.Millisecond), l)
	circuit(1, 1, false, 1).check(t, "1ms before half-open", d.Err)
}

// TestRateDoesNotMutate: Admit never writes to the receiver's Recent,
// even when it has spare capacity another Rate may be using.
func TestRateDoesNotMutate(t *testing.T) {
	l := policy.Defaults()
	backing := make([]time.Time, 3, 10)
	for i := range backing {
		backing[i] = at(time.Duration(i) * time.Second)
	}
	orig := slices.Clone(backing[:cap(backing)])
	r := policy.Rate{Recent: backing}
	a, _ := r.Admit("claude-1", at(10*time.Second), l)
	b, _ := r.Admit("claude-1", at(20*time.Second), l)
	c, _ := r.Admit("claude-1", at(2*time.Minute), l) // prunes all
	if !slices.Equal(backing[:cap(backing)], orig) || len(r.Recent) != 3 {
		t.Fatalf("Admit wrote to the receiver's slice: %v, want %v", backing[:cap(backing)], orig)
	}
	if got := a.Recent[len(a.Recent)-1]; !got.Equal(at(10 * time.Second)) {
		t.Errorf("first fork's last create = %v, want +10s", got)
	}
	if got := b.Recent[len(b.Recent)-1]; !got.Equal(at(20 * time.Second)) {
		t.Errorf("second fork's last create = %v, want +20s (overwritten by a shared array?)", got)
	}
	if len(c.Recent) != 1 {
		t.Errorf("Recent after a quiet minute = %v, want only the new create", c.Recent)
	}
	// A refusal keeps the receiver intact too, and appending to what it
	// returns does not reach the receiver's array.
	full := make([]time.Time, 30, 40)
	for i := range full {
		full[i] = at(time.Duration(i) * time.Millisecond)
	}
	tripped, d := policy.Rate{Recent: full}.Admit("claude-1", at(time.Second), l)
	if !d.Tripped {
		t.Fatalf("31st create not tripped: %+v", d)
	}
	_ = append(tripped.Recent, at(time.Hour))
	if extra := full[:31][30]; !extra.IsZero() {
		t.Errorf("appending to the returned Recent wrote %v into the receiver's array", extra)
	}
}
