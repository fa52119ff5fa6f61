package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// newEvent returns an audit event with every field set, at at, by the
// agent of tenant. Its ID is one the store must ignore.
func newEvent(verb, tenant, agent string, at time.Time) sandbox.AuditEvent {
	return sandbox.AuditEvent{
		ID:         999,
		At:         at,
		Door:       sandbox.DoorCLI,
		Verb:       verb,
		Tenant:     tenant,
		Agent:      agent,
		Role:       sandbox.RoleAgent,
		TokenID:    "tok-" + agent,
		Sandbox:    "agent-" + agent + "-web",
		Code:       sandbox.CodeQuotaExceeded,
		Status:     429,
		DurationMs: 1234,
	}
}

// mustAppend appends events or fails the test.
func mustAppend(t *testing.T, s store.Store, events ...sandbox.AuditEvent) {
	t.Helper()
	if err := s.Audit().Append(t.Context(), events); err != nil {
		t.Fatalf("Audit.Append(%d events) = %v, want nil", len(events), err)
	}
}

// mustListAudit lists the events matching f or fails the test.
func mustListAudit(t *testing.T, s store.Store, f sandbox.AuditFilter) []sandbox.AuditEvent {
	t.Helper()
	list, err := s.Audit().List(t.Context(), f)
	if err != nil {
		t.Fatalf("Audit.List(%+v) = %v, want nil", f, err)
	}
	if list == nil {
		t.Errorf("Audit.List(%+v) = nil, want a non-nil slice", f)
	}
	return list
}

// verbs returns the verbs of events, in order.
func verbs(events []sandbox.AuditEvent) []string {
	out := []string{}
	for _, e := range events {
		out = append(out, e.Verb)
	}
	return out
}

// checkEvent reports every way got differs from want, as stored: the time
// the same instant in UTC, the ID the store's.
func checkEvent(t *testing.T, what string, got, want sandbox.AuditEvent) {
	t.Helper()
	checkTime(t, what+".At", got.At, want.At)
	got.At, want.At = time.Time{}, time.Time{}
	want.ID = got.ID
	if got != want {
		t.Errorf("%s (time and ID aside) =\n\t%+v\nwant\n\t%+v", what, got, want)
	}
}

func testAuditRoundTrip(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	full := newEvent("sandbox.create", "acme", "alice", t0)
	// An unauthenticated success-less call: every optional field empty.
	bare := sandbox.AuditEvent{At: at(time.Microsecond), Door: sandbox.DoorAPI, Verb: "sandbox.list",
		Code: sandbox.CodeUnauthenticated, Status: 401}
	ok := newEvent("sandbox.exec", "acme", "alice", at(time.Second))
	ok.Code, ok.Status, ok.Door = "", 101, sandbox.DoorAPI
	mustAppend(t, s, full, bare, ok)

	list := mustListAudit(t, s, sandbox.AuditFilter{})
	if len(list) != 3 {
		t.Fatalf("Audit.List = %q, want 3 events", verbs(list))
	}
	for i, want := range []sandbox.AuditEvent{full, bare, ok} {
		checkEvent(t, want.Verb, list[i], want)
	}
	if list[0].ID <= 0 || list[1].ID <= list[0].ID || list[2].ID <= list[1].ID {
		t.Errorf("IDs = %d, %d, %d; want positive and increasing", list[0].ID, list[1].ID, list[2].ID)
	}
}

func testAuditIDs(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	if err := s.Audit().Append(ctx, nil); err != nil {
		t.Errorf("Audit.Append(none) = %v, want nil", err)
	}
	// IDs follow the order of appending, not of At.
	mustAppend(t, s, newEvent("first", "acme", "alice", at(time.Hour)))
	mustAppend(t, s, newEvent("second", "acme", "alice", at(time.Hour)), newEvent("third", "acme", "alice", at(time.Hour)))
	list := mustListAudit(t, s, sandbox.AuditFilter{})
	if got, want := verbs(list), []string{"first", "second", "third"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Audit.List (equal times) = %q, want %q in ID order", got, want)
	}
	last := list[2].ID
	if list[1].ID <= list[0].ID || last <= list[1].ID {
		t.Errorf("IDs = %d, %d, %d; want increasing across appends", list[0].ID, list[1].ID, last)
	}

	// Deleting everything, the newest included, frees no ID.
	if n, err := s.Audit().DeleteBefore(ctx, at(2*time.Hour)); err != nil || n != 3 {
		t.Fatalf("Audit.DeleteBefore(after all) = %d, %v; want 3, nil", n, err)
	}
	mustAppend(t, s, newEvent("after", "acme", "alice", at(3*time.Hour)))
	list = mustListAudit(t, s, sandbox.AuditFilter{})
	if len(list) != 1 || list[0].ID <= last {
		t.Errorf("after deleting every event, the next one = %+v, want one with an ID above %d", list, last)
	}
}

func testAuditZeroTime(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	good := newEvent("good", "acme", "alice", t0)
	bad := newEvent("bad", "acme", "alice", time.Time{})
	if err := s.Audit().Append(t.Context(), []sandbox.AuditEvent{good, bad}); err == nil {
		t.Fatalf("Audit.Append(an event with a zero At) = nil, want an error")
	}
	if list := mustListAudit(t, s, sandbox.AuditFilter{}); len(list) != 0 {
		t.Errorf("Audit.List after a refused append = %q, want none (all or none)", verbs(list))
	}
}

func testAuditList(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	if list := mustListAudit(t, s, sandbox.AuditFilter{}); len(list) != 0 {
		t.Fatalf("Audit.List(empty store) = %q, want none", verbs(list))
	}
	// Appended out of time order: listing is by At.
	mustAppend(t, s,
		newEvent("a3", "acme", "alice", at(3*time.Second)),
		newEvent("a1", "acme", "alice", at(1*time.Second)),
		newEvent("b2", "acme", "bob", at(2*time.Second)),
		newEvent("g4", "globex", "alice-g", at(4*time.Second)),
		newEvent("a5", "acme", "alice", at(5*time.Second)),
	)
	mustAppend(t, s, newEvent("g0", "globex", "gina", at(0)))
	tests := []struct {
		name string
		f    sandbox.AuditFilter
		want []string
	}{
		{"all", sandbox.AuditFilter{}, []string{"g0", "a1", "b2", "a3", "g4", "a5"}},
		{"since is inclusive", sandbox.AuditFilter{Since: at(2 * time.Second)}, []string{"b2", "a3", "g4", "a5"}},
		{"since in another zone", sandbox.AuditFilter{Since: at(2 * time.Second).UTC()}, []string{"b2", "a3", "g4", "a5"}},
		{"since after all", sandbox.AuditFilter{Since: at(time.Minute)}, []string{}},
		{"tenant", sandbox.AuditFilter{Tenant: "acme"}, []string{"a1", "b2", "a3", "a5"}},
		{"tenant and agent", sandbox.AuditFilter{Tenant: "acme", Agent: "alice"}, []string{"a1", "a3", "a5"}},
		{"agent alone", sandbox.AuditFilter{Agent: "bob"}, []string{"b2"}},
		{"agent of another tenant", sandbox.AuditFilter{Tenant: "globex", Agent: "bob"}, []string{}},
		{"no such tenant", sandbox.AuditFilter{Tenant: "initech"}, []string{}},
		{"limit keeps the newest", sandbox.AuditFilter{Limit: 2}, []string{"g4", "a5"}},
		{"limit over the count", sandbox.AuditFilter{Limit: 100}, []string{"g0", "a1", "b2", "a3", "g4", "a5"}},
		{"everything at once", sandbox.AuditFilter{Since: at(2 * time.Second), Tenant: "acme", Agent: "alice", Limit: 1}, []string{"a5"}},
		{"limit and tenant", sandbox.AuditFilter{Tenant: "acme", Limit: 3}, []string{"b2", "a3", "a5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verbs(mustListAudit(t, s, tt.f)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Audit.List(%+v) = %q, want %q", tt.f, got, tt.want)
			}
		})
	}
}

// testAuditSandboxPrefix: a SandboxPrefix keeps the events on sandboxes
// inside a name restriction (sandbox.Principal.InScope's rule): the
// sandbox, less OwnPrefix when it starts with it, starts with the prefix;
// '_' and '%' are plain characters; events on no sandbox are left out;
// Limit counts only the events kept.
func testAuditSandboxPrefix(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	on := func(verb, sb string, d time.Duration) sandbox.AuditEvent {
		e := newEvent(verb, "acme", "alice", at(d))
		e.Sandbox = sb
		return e
	}
	mustAppend(t, s,
		on("own-in", "agent-alice-hermes-1", time.Second),
		on("own-out", "agent-alice-web", 2*time.Second),
		on("bare-in", "hermes-2", 3*time.Second),
		on("other-agent", "agent-bob-hermes-3", 4*time.Second),
		on("no-sandbox", "", 5*time.Second),
		on("wildcard", "hermesx", 6*time.Second),
		on("own-in-2", "agent-alice-hermes-4", 7*time.Second),
		on("doubled", "agent-alice-agent-alice-hermes-5", 8*time.Second),
	)
	tests := []struct {
		name string
		f    sandbox.AuditFilter
		want []string
	}{
		{"own prefix", sandbox.AuditFilter{SandboxPrefix: "hermes-", OwnPrefix: "agent-alice-"},
			[]string{"own-in", "bare-in", "own-in-2"}},
		{"no own prefix", sandbox.AuditFilter{SandboxPrefix: "agent-bob-"}, []string{"other-agent"}},
		{"underscore is no wildcard", sandbox.AuditFilter{SandboxPrefix: "hermes_"}, []string{}},
		{"percent is no wildcard", sandbox.AuditFilter{SandboxPrefix: "herm%", OwnPrefix: "agent-alice-"}, []string{}},
		{"limit counts kept events", sandbox.AuditFilter{SandboxPrefix: "hermes-", OwnPrefix: "agent-alice-", Limit: 2},
			[]string{"bare-in", "own-in-2"}},
		{"with since", sandbox.AuditFilter{Since: at(2 * time.Second), SandboxPrefix: "hermes-", OwnPrefix: "agent-alice-"},
			[]string{"bare-in", "own-in-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verbs(mustListAudit(t, s, tt.f)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Audit.List(%+v) = %q, want %q", tt.f, got, tt.want)
			}
		})
	}
}

// testAuditOn: OnTenant and OnName keep the events on one sandbox: its
// tenant's calls, which name it alone, and other tenants' (operators'),
// which name it TENANT/NAME; not those of a sandbox of the same name in
// another tenant, nor of a name it starts. After keeps those appended
// after an event, whatever their times.
func testAuditOn(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	on := func(verb, tenant, sb string, d time.Duration) sandbox.AuditEvent {
		e := newEvent(verb, tenant, "alice", at(d))
		e.Sandbox = sb
		return e
	}
	mustAppend(t, s,
		on("mine", "acme", "web", time.Second),
		on("operator", "operators", "acme/web", 2*time.Second),
		on("namesake", "globex", "web", 3*time.Second),
		on("longer", "acme", "web2", 4*time.Second),
		on("operator-on-namesake", "operators", "globex/web", 5*time.Second),
		on("mine-again", "acme", "web", 6*time.Second),
		on("none", "acme", "", 7*time.Second),
	)
	all := mustListAudit(t, s, sandbox.AuditFilter{})
	// Appended last, at the earliest time: a call recorded at its end.
	mustAppend(t, s, on("late", "acme", "web", 500*time.Millisecond))
	type auditCase struct {
		name string
		f    sandbox.AuditFilter
		want []string
	}
	tests := []auditCase{
		{"its calls", sandbox.AuditFilter{OnTenant: "acme", OnName: "web"}, []string{"late", "mine", "operator", "mine-again"}},
		{"the namesake's", sandbox.AuditFilter{OnTenant: "globex", OnName: "web"}, []string{"namesake", "operator-on-namesake"}},
		{"its tenant's callers", sandbox.AuditFilter{Tenant: "acme", OnTenant: "acme", OnName: "web"}, []string{"late", "mine", "mine-again"}},
		{"newest", sandbox.AuditFilter{OnTenant: "acme", OnName: "web", Limit: 2}, []string{"operator", "mine-again"}},
		{"since", sandbox.AuditFilter{Since: at(2 * time.Second), OnTenant: "acme", OnName: "web"}, []string{"operator", "mine-again"}},
		{"no such sandbox", sandbox.AuditFilter{OnTenant: "acme", OnName: "we"}, []string{}},
		// After keeps the events appended after one, whatever their At.
		{"after", sandbox.AuditFilter{After: all[1].ID, OnTenant: "acme", OnName: "web"}, []string{"late", "mine-again"}},
		{"after the last", sandbox.AuditFilter{After: all[len(all)-1].ID}, []string{"late"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verbs(mustListAudit(t, s, tt.f)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Audit.List(%+v) = %q, want %q", tt.f, got, tt.want)
			}
		})
	}
}

func testAuditDelete(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	mustAppend(t, s,
		newEvent("old", "acme", "alice", at(0)),
		newEvent("older", "acme", "alice", at(-time.Hour)),
		newEvent("edge", "acme", "alice", at(time.Minute)),
		newEvent("new", "acme", "alice", at(time.Hour)),
	)
	if n, err := s.Audit().DeleteBefore(ctx, at(-2*time.Hour)); err != nil || n != 0 {
		t.Errorf("Audit.DeleteBefore(before all) = %d, %v; want 0, nil", n, err)
	}
	// Before is strict: the event at exactly t stays.
	if n, err := s.Audit().DeleteBefore(ctx, at(time.Minute)); err != nil || n != 2 {
		t.Fatalf("Audit.DeleteBefore(t0+1m) = %d, %v; want 2, nil", n, err)
	}
	if got, want := verbs(mustListAudit(t, s, sandbox.AuditFilter{})), []string{"edge", "new"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Audit.List after Audit.DeleteBefore = %q, want %q", got, want)
	}
}

func testAuditCancelled(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Audit().Append(ctx, []sandbox.AuditEvent{newEvent("cancelled", "acme", "alice", t0)}); !errors.Is(err, context.Canceled) {
		t.Errorf("Audit.Append(cancelled ctx) = %v, want context.Canceled", err)
	}
	if list := mustListAudit(t, s, sandbox.AuditFilter{}); len(list) != 0 {
		t.Errorf("Audit.List after a cancelled append = %q, want none", verbs(list))
	}
	if _, err := s.Audit().List(ctx, sandbox.AuditFilter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Audit.List(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Audit().DeleteBefore(ctx, at(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Errorf("Audit.DeleteBefore(cancelled ctx) = %v, want context.Canceled", err)
	}
}
