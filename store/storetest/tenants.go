package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// newTenant returns a tenant with every field set, every policy override
// included, created (and last updated) at created.
func newTenant(name string, created time.Time) sandbox.Tenant {
	return sandbox.Tenant{
		Name: name,
		// Past 32 bits, so that a narrow column shows.
		Allocation: sandbox.Resources{MilliCPU: 64_000, MemoryBytes: 256 << 30, DiskBytes: 2 << 40},
		Policy: sandbox.PolicyOverrides{
			AgentQuota:            new(3),
			AgentSharePercent:     new(25),
			BudgetPercent:         new(40),
			MaxTTL:                new(sandbox.Duration(12 * time.Hour)),
			IdleTimeout:           new(sandbox.Duration(90 * time.Second)),
			AlarmCreatesPerMinute: new(30),
			BreakerFactor:         new(4),
			BreakerCooldown:       new(sandbox.Duration(5*time.Minute + 1)),
			DestructivePatterns:   &[]string{`\bdeploy\b`, `rm -rf`},
			GateOnFailure:         new("allow"),
			Network:               new(sandbox.NetworkEgress),
			AllowEgress:           new(false), // false, not unset
			Egress:                &sandbox.EgressPolicy{Deny: []string{"198.51.100.0/24"}},
		},
		Pool:      "gpu-a100",
		CreatedAt: created,
		UpdatedAt: created,
	}
}

// mustCreateTenant creates t or fails the test.
func mustCreateTenant(t *testing.T, s store.Store, tn sandbox.Tenant) {
	t.Helper()
	if err := s.Tenants().Create(t.Context(), tn); err != nil {
		t.Fatalf("Tenants.Create(%q) = %v, want nil", tn.Name, err)
	}
}

// mustGetTenant gets the tenant called name or fails the test.
func mustGetTenant(t *testing.T, s store.Store, name string) sandbox.Tenant {
	t.Helper()
	tn, err := s.Tenants().Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Tenants.Get(%q) = %v, want nil", name, err)
	}
	return tn
}

// mustListTenants lists the tenants or fails the test.
func mustListTenants(t *testing.T, s store.Store) []sandbox.Tenant {
	t.Helper()
	list, err := s.Tenants().List(t.Context())
	if err != nil {
		t.Fatalf("Tenants.List = %v, want nil", err)
	}
	return list
}

// policyString renders p with its nil fields left out and its set ones
// shown, zero included, for messages: %+v would print pointers.
func policyString(p sandbox.PolicyOverrides) string {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Sprintf("unprintable policy: %v", err)
	}
	return string(b)
}

// checkTenant reports every way got differs from want, as stored: times the
// same instants in UTC, Allocation.Pids 0, policy fields nil where want's
// are and pointing at equal values where want's are set.
func checkTenant(t *testing.T, what string, got, want sandbox.Tenant) {
	t.Helper()
	checkTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
	checkTime(t, what+".UpdatedAt", got.UpdatedAt, want.UpdatedAt)
	want.Allocation.Pids = 0 // not stored
	if got.Name != want.Name || got.Allocation != want.Allocation {
		t.Errorf("%s = %q with allocation %+v, want %q with %+v", what, got.Name, got.Allocation, want.Name, want.Allocation)
	}
	if got.Pool != want.Pool {
		t.Errorf("%s.Pool = %q, want %q", what, got.Pool, want.Pool)
	}
	if !reflect.DeepEqual(got.Policy, want.Policy) {
		t.Errorf("%s.Policy = %s, want %s", what, policyString(got.Policy), policyString(want.Policy))
	}
}

// tenantNames returns the names of ts, in order.
func tenantNames(ts []sandbox.Tenant) []string {
	out := []string{}
	for _, tn := range ts {
		out = append(out, tn.Name)
	}
	return out
}

// mustCreateAgent creates a or fails the test.
func mustCreateAgent(t *testing.T, s store.Store, a sandbox.Agent) {
	t.Helper()
	if err := s.Agents().Create(t.Context(), a); err != nil {
		t.Fatalf("Agents.Create(%q in %q) = %v, want nil", a.Name, a.Tenant, err)
	}
}

// mustGetAgent gets tenant's agent called name or fails the test.
func mustGetAgent(t *testing.T, s store.Store, tenant, name string) sandbox.Agent {
	t.Helper()
	a, err := s.Agents().Get(t.Context(), tenant, name)
	if err != nil {
		t.Fatalf("Agents.Get(%q of %q) = %v, want nil", name, tenant, err)
	}
	return a
}

// mustListAgents lists the agents of tenant or fails the test.
func mustListAgents(t *testing.T, s store.Store, tenant string) []sandbox.Agent {
	t.Helper()
	list, err := s.Agents().List(t.Context(), tenant)
	if err != nil {
		t.Fatalf("Agents.List(%q) = %v, want nil", tenant, err)
	}
	return list
}

// checkAgent reports every way got differs from want: CreatedAt the same
// instant in UTC, the names equal.
func checkAgent(t *testing.T, what string, got, want sandbox.Agent) {
	t.Helper()
	checkTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
	if got.Name != want.Name || got.Tenant != want.Tenant {
		t.Errorf("%s = %q in %q, want %q in %q", what, got.Name, got.Tenant, want.Name, want.Tenant)
	}
}

// agentNames returns the names of as, in order.
func agentNames(as []sandbox.Agent) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.Name)
	}
	return out
}

func testTenantRoundTrip(t *testing.T, open OpenFunc) {
	full := newTenant("full", t0)
	// A precise time in a far zone catches an implementation that keeps only
	// seconds or milliseconds, or drops the offset.
	full.UpdatedAt = time.Date(2025, time.March, 14, 3, 4, 5, 999_999_000, time.FixedZone("UTC-9:30", -(9*3600+1800)))
	full.Allocation.Pids = 4096 // not kept: comes back 0

	// Every override set to zero: set, not defaulted.
	zeros := newTenant("zeros", at(time.Second))
	zeros.Allocation = sandbox.Resources{}
	zeros.Policy = sandbox.PolicyOverrides{
		AgentQuota:            new(0),
		AgentSharePercent:     new(0),
		BudgetPercent:         new(0),
		MaxTTL:                new(sandbox.Duration(0)),
		IdleTimeout:           new(sandbox.Duration(0)),
		AlarmCreatesPerMinute: new(0),
		BreakerFactor:         new(0),
		BreakerCooldown:       new(sandbox.Duration(0)),
	}

	// No overrides and no pool: any node.
	defaults := newTenant("defaults", at(2*time.Second))
	defaults.Policy = sandbox.PolicyOverrides{}
	defaults.Pool = ""

	// Some set, some zero, some nil.
	mixed := newTenant("mixed", at(3*time.Second))
	mixed.Policy = sandbox.PolicyOverrides{
		AgentQuota:    new(0),
		MaxTTL:        new(sandbox.Duration(36 * time.Hour)),
		IdleTimeout:   new(sandbox.Duration(0)),
		BreakerFactor: new(2),
	}

	tests := []struct {
		name string
		tn   sandbox.Tenant
	}{
		{"every field", full},
		{"zero overrides", zeros},
		{"no overrides, no pool", defaults},
		{"mixed overrides", mixed},
	}
	s := openStore(t, open)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustCreateTenant(t, s, tt.tn)
			checkTenant(t, "Tenants.Get("+tt.tn.Name+")", mustGetTenant(t, s, tt.tn.Name), tt.tn)
		})
	}
	// Listed tenants carry every field too.
	list := mustListTenants(t, s)
	if len(list) != len(tests) {
		t.Fatalf("Tenants.List = %q, want %d tenants", tenantNames(list), len(tests))
	}
	for _, got := range list {
		for _, tt := range tests {
			if got.Name == tt.tn.Name {
				checkTenant(t, "listed "+got.Name, got, tt.tn)
			}
		}
	}
}

func testTenantEmptyName(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	if err := s.Tenants().Create(t.Context(), newTenant("", t0)); err == nil {
		t.Errorf("Tenants.Create(empty name) = nil, want an error")
	}
	if list := mustListTenants(t, s); len(list) != 0 {
		t.Errorf("Tenants.List after refused create = %q, want none", tenantNames(list))
	}
	if _, err := s.Tenants().Get(t.Context(), ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Tenants.Get(\"\") = %v, want ErrNotFound", err)
	}
}

func testTenantConflict(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	orig := newTenant("acme", t0)
	mustCreateTenant(t, s, orig)
	dup := newTenant("acme", at(time.Minute))
	dup.Allocation.MilliCPU = 1000
	dup.Policy = sandbox.PolicyOverrides{}
	if err := s.Tenants().Create(t.Context(), dup); !errors.Is(err, store.ErrExists) {
		t.Fatalf("Tenants.Create(taken name) = %v, want ErrExists", err)
	}
	checkTenant(t, "original after conflict", mustGetTenant(t, s, orig.Name), orig)
	if got := tenantNames(mustListTenants(t, s)); !reflect.DeepEqual(got, []string{"acme"}) {
		t.Errorf("Tenants.List after conflict = %q, want [acme]", got)
	}
}

func testTenantGetMissing(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	mustCreateTenant(t, s, newTenant("acme", t0))
	for _, name := range []string{"globex", "ACME", "acm", "acme "} {
		if _, err := s.Tenants().Get(t.Context(), name); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Tenants.Get(%q) = %v, want ErrNotFound", name, err)
		}
	}
}

func testTenantList(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	if list := mustListTenants(t, s); len(list) != 0 {
		t.Fatalf("Tenants.List(empty store) = %q, want none", tenantNames(list))
	}
	// Inserted out of name order, and created in neither name nor insertion
	// order, so that "by name" cannot be met by either.
	for _, tn := range []sandbox.Tenant{
		newTenant("initech", at(time.Second)),
		newTenant("acme2", at(3*time.Second)),
		newTenant("globex", at(2*time.Second)),
		newTenant("acme", at(4*time.Second)),
		newTenant("acme-2", t0),
	} {
		mustCreateTenant(t, s, tn)
	}
	want := []string{"acme", "acme-2", "acme2", "globex", "initech"}
	if got := tenantNames(mustListTenants(t, s)); !reflect.DeepEqual(got, want) {
		t.Errorf("Tenants.List = %q, want %q", got, want)
	}
}

func testTenantUpdate(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	orig := newTenant("acme", t0)
	other := newTenant("globex", t0)
	mustCreateTenant(t, s, orig)
	mustCreateTenant(t, s, other)

	upd := orig
	upd.Allocation = sandbox.Resources{MilliCPU: 8000, MemoryBytes: 16 << 30, DiskBytes: 0, Pids: 99}
	// One override set to zero, one changed, the others cleared.
	upd.Policy = sandbox.PolicyOverrides{
		AgentQuota: new(0),
		MaxTTL:     new(sandbox.Duration(time.Hour)),
	}
	upd.Pool = "arm64"                 // moved to another pool
	upd.CreatedAt = at(24 * time.Hour) // ignored: CreatedAt is kept
	upd.UpdatedAt = at(time.Hour + 7*time.Microsecond)
	if err := s.Tenants().Update(ctx, upd); err != nil {
		t.Fatalf("Tenants.Update(%q) = %v, want nil", upd.Name, err)
	}
	want := upd
	want.CreatedAt = orig.CreatedAt
	checkTenant(t, "Tenants.Get after update", mustGetTenant(t, s, orig.Name), want)
	checkTenant(t, "untouched tenant", mustGetTenant(t, s, other.Name), other)

	// Back to overrides on every field, from none; un-pinned.
	upd.Policy = newTenant("", t0).Policy
	upd.Pool = ""
	upd.UpdatedAt = at(2 * time.Hour)
	if err := s.Tenants().Update(ctx, upd); err != nil {
		t.Fatalf("Tenants.Update(%q) again = %v, want nil", upd.Name, err)
	}
	want = upd
	want.CreatedAt = orig.CreatedAt
	checkTenant(t, "Tenants.Get after second update", mustGetTenant(t, s, orig.Name), want)

	missing := newTenant("initech", at(time.Hour))
	if err := s.Tenants().Update(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Tenants.Update(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.Tenants().Get(ctx, missing.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Tenants.Get after Tenants.Update(missing) = %v, want ErrNotFound (no upsert)", err)
	}
	if err := s.Tenants().Update(ctx, newTenant("", at(time.Hour))); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Tenants.Update(empty name) = %v, want ErrNotFound", err)
	}
}

func testAgentCreate(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx := t.Context()
	mustCreateTenant(t, s, newTenant("acme", t0))
	mustCreateTenant(t, s, newTenant("globex", t0))

	claude := sandbox.Agent{Name: "claude-1", Tenant: "acme", CreatedAt: at(time.Second)}
	// A precise time in a far zone, as for sandboxes.
	ops := sandbox.Agent{Name: "ops-bot", Tenant: "globex",
		CreatedAt: time.Date(2025, time.March, 14, 3, 4, 5, 999_999_000, time.FixedZone("UTC-9:30", -(9*3600+1800)))}
	mustCreateAgent(t, s, claude)
	mustCreateAgent(t, s, ops)
	checkAgent(t, "Agents.Get(claude-1)", mustGetAgent(t, s, claude.Tenant, claude.Name), claude)
	checkAgent(t, "Agents.Get(ops-bot)", mustGetAgent(t, s, ops.Tenant, ops.Name), ops)

	// Names are unique within a tenant: they prefix its sandbox names
	// (testAgentNamesPerTenant: not across tenants).
	dup := sandbox.Agent{Name: claude.Name, Tenant: claude.Tenant, CreatedAt: at(time.Minute)}
	if err := s.Agents().Create(ctx, dup); !errors.Is(err, store.ErrExists) {
		t.Errorf("Agents.Create(%q in %q) = %v, want ErrExists", dup.Name, dup.Tenant, err)
	}
	checkAgent(t, "original after conflicts", mustGetAgent(t, s, claude.Tenant, claude.Name), claude)

	orphan := sandbox.Agent{Name: "orphan", Tenant: "initech", CreatedAt: t0}
	if err := s.Agents().Create(ctx, orphan); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Agents.Create(in missing tenant) = %v, want ErrNotFound", err)
	}
	if _, err := s.Agents().Get(ctx, orphan.Tenant, orphan.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Agents.Get after refused create = %v, want ErrNotFound", err)
	}

	for _, a := range []sandbox.Agent{
		{Name: "", Tenant: "acme", CreatedAt: t0},
		{Name: "no-tenant", Tenant: "", CreatedAt: t0},
	} {
		if err := s.Agents().Create(ctx, a); err == nil {
			t.Errorf("Agents.Create(%q in %q) = nil, want an error", a.Name, a.Tenant)
		}
	}

	for _, tn := range [][2]string{{"acme", ""}, {"acme", "missing"}, {"acme", "CLAUDE-1"}, {"acme", "acme"},
		{"globex", "claude-1"}, {"", "claude-1"}} {
		if _, err := s.Agents().Get(ctx, tn[0], tn[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Agents.Get(%q of %q) = %v, want ErrNotFound", tn[1], tn[0], err)
		}
	}
	if got, want := agentNames(mustListAgents(t, s, "")), []string{"claude-1", "ops-bot"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Agents.List(\"\") after refused creates = %q, want %q", got, want)
	}
}

// testAgentNamesPerTenant: an agent name is unique within its tenant only.
// Tenants may each have an agent of the same name, each found in its own
// tenant; Agents.List of every tenant lists them by name and then tenant.
func testAgentNamesPerTenant(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	for _, name := range []string{"globex", "acme", "initech"} {
		mustCreateTenant(t, s, newTenant(name, t0))
	}
	g := sandbox.Agent{Name: "a1", Tenant: "globex", CreatedAt: t0}
	a := sandbox.Agent{Name: "a1", Tenant: "acme", CreatedAt: at(time.Second)}
	mustCreateAgent(t, s, g)
	mustCreateAgent(t, s, a)
	checkAgent(t, "Agents.Get(a1 of acme)", mustGetAgent(t, s, "acme", "a1"), a)
	checkAgent(t, "Agents.Get(a1 of globex)", mustGetAgent(t, s, "globex", "a1"), g)
	if _, err := s.Agents().Get(t.Context(), "initech", "a1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Agents.Get(a1 of initech) = %v, want ErrNotFound", err)
	}
	all := mustListAgents(t, s, "")
	if len(all) != 2 || all[0].Tenant != "acme" || all[1].Tenant != "globex" {
		t.Errorf("Agents.List(\"\") = %+v, want a1 of acme, then of globex", all)
	}
	if one := mustListAgents(t, s, "globex"); len(one) != 1 {
		t.Errorf("Agents.List(globex) = %+v, want globex's a1 only", one)
	} else {
		checkAgent(t, "Agents.List(globex)[0]", one[0], g)
	}
}

func testAgentList(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	for _, name := range []string{"acme", "globex", "initech"} {
		mustCreateTenant(t, s, newTenant(name, t0))
	}
	if got := mustListAgents(t, s, ""); len(got) != 0 {
		t.Fatalf("Agents.List(\"\", no agents yet) = %q, want none", agentNames(got))
	}
	// Inserted out of name order, created in neither name nor insertion
	// order.
	fixtures := []sandbox.Agent{
		{Name: "zed", Tenant: "acme", CreatedAt: at(time.Second)},
		{Name: "bot-2", Tenant: "globex", CreatedAt: at(5 * time.Second)},
		{Name: "alice", Tenant: "acme", CreatedAt: at(3 * time.Second)},
		{Name: "bot-10", Tenant: "globex", CreatedAt: t0},
		{Name: "mallory", Tenant: "acme", CreatedAt: at(2 * time.Second)},
	}
	for _, a := range fixtures {
		mustCreateAgent(t, s, a)
	}
	tests := []struct {
		name   string
		tenant string
		want   []string
	}{
		{"one tenant", "acme", []string{"alice", "mallory", "zed"}},
		{"another tenant", "globex", []string{"bot-10", "bot-2"}},
		{"every tenant", "", []string{"alice", "bot-10", "bot-2", "mallory", "zed"}},
		{"tenant without agents", "initech", []string{}},
		{"unknown tenant", "missing", []string{}},
		{"case differs", "ACME", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := agentNames(mustListAgents(t, s, tt.tenant)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Agents.List(%q) = %q, want %q", tt.tenant, got, tt.want)
			}
		})
	}
	// Listed agents carry every field.
	got := mustListAgents(t, s, "globex")
	if len(got) != 2 {
		t.Fatalf("Agents.List(globex) = %q, want 2", agentNames(got))
	}
	checkAgent(t, "listed bot-10", got[0], fixtures[3])
}

// testConcurrentTenants races creates of one tenant name, and of one agent
// name in one tenant, against readers: exactly one create of each wins,
// the others get ErrExists, and nobody sees a transient error; the same
// agent name created at once in every other tenant wins everywhere.
func testConcurrentTenants(t *testing.T, open OpenFunc) {
	const (
		contenders = 8
		readers    = 4
	)
	s := openStore(t, open)
	ctx := t.Context()
	for c := range contenders {
		mustCreateTenant(t, s, newTenant(fmt.Sprintf("home-%d", c), t0))
	}

	tenantErrs := make([]error, contenders)
	agentErrs := make([]error, contenders)
	everywhereErrs := make([]error, contenders)
	start := make(chan struct{})
	var writers, readersWG sync.WaitGroup
	for c := range contenders {
		writers.Go(func() {
			<-start
			tn := newTenant("contested", at(time.Duration(c)*time.Millisecond))
			tn.Allocation.MilliCPU = int64(c + 1) // tells the winner
			tenantErrs[c] = s.Tenants().Create(ctx, tn)
		})
		writers.Go(func() {
			<-start
			a := sandbox.Agent{Name: "contested-agent", Tenant: "home-0", CreatedAt: at(time.Duration(c) * time.Millisecond)}
			agentErrs[c] = s.Agents().Create(ctx, a)
		})
		writers.Go(func() {
			<-start
			a := sandbox.Agent{Name: "everywhere", Tenant: fmt.Sprintf("home-%d", c), CreatedAt: t0}
			everywhereErrs[c] = s.Agents().Create(ctx, a)
		})
	}
	done := make(chan struct{})
	for r := range readers {
		readersWG.Go(func() {
			<-start
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.Tenants().List(ctx); err != nil {
					t.Errorf("reader %d: Tenants.List = %v, want nil", r, err)
					return
				}
				if _, err := s.Tenants().Get(ctx, "contested"); err != nil && !errors.Is(err, store.ErrNotFound) {
					t.Errorf("reader %d: Tenants.Get(contested) = %v, want nil or ErrNotFound", r, err)
					return
				}
				if _, err := s.Agents().List(ctx, ""); err != nil {
					t.Errorf("reader %d: Agents.List = %v, want nil", r, err)
					return
				}
			}
		})
	}
	close(start)
	writers.Wait()
	close(done)
	readersWG.Wait()

	var tenantWinners, agentWinners []int
	for c := range contenders {
		switch err := tenantErrs[c]; {
		case err == nil:
			tenantWinners = append(tenantWinners, c)
		case !errors.Is(err, store.ErrExists):
			t.Errorf("Tenants.Create(contested) by %d = %v, want nil or ErrExists", c, err)
		}
		switch err := agentErrs[c]; {
		case err == nil:
			agentWinners = append(agentWinners, c)
		case !errors.Is(err, store.ErrExists):
			t.Errorf("Agents.Create(contested-agent in home-0) by %d = %v, want nil or ErrExists", c, err)
		}
		if err := everywhereErrs[c]; err != nil {
			t.Errorf("Agents.Create(everywhere in home-%d) = %v, want nil", c, err)
		}
	}
	if len(tenantWinners) != 1 {
		t.Errorf("%d concurrent Tenants.Create(contested) calls succeeded (%v), want exactly 1", len(tenantWinners), tenantWinners)
	} else if got := mustGetTenant(t, s, "contested"); got.Allocation.MilliCPU != int64(tenantWinners[0]+1) {
		t.Errorf("Tenants.Get(contested).Allocation.MilliCPU = %d, want the winner's %d", got.Allocation.MilliCPU, tenantWinners[0]+1)
	}
	if len(agentWinners) != 1 {
		t.Errorf("%d concurrent Agents.Create(contested-agent) calls succeeded (%v), want exactly 1", len(agentWinners), agentWinners)
	} else if got, want := mustGetAgent(t, s, "home-0", "contested-agent").CreatedAt, at(time.Duration(agentWinners[0])*time.Millisecond); !got.Equal(want) {
		t.Errorf("Agents.Get(contested-agent).CreatedAt = %v, want the winner's %v", got, want)
	}
	if list := mustListTenants(t, s); len(list) != contenders+1 {
		t.Errorf("Tenants.List after the race = %q, want %d tenants", tenantNames(list), contenders+1)
	}
	if list := mustListAgents(t, s, ""); len(list) != 1+contenders {
		t.Errorf("Agents.List after the race = %q, want %d agents", agentNames(list), 1+contenders)
	}
}

// testTenantCancelled checks that tenant and agent calls honour ctx: a call
// made with a cancelled context fails with context.Canceled and changes
// nothing.
func testTenantCancelled(t *testing.T, open OpenFunc) {
	s := openStore(t, open)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	tn := newTenant("acme", t0)
	if err := s.Tenants().Create(ctx, tn); !errors.Is(err, context.Canceled) {
		t.Errorf("Tenants.Create(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Tenants().Get(t.Context(), tn.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Tenants.Get after cancelled create = %v, want ErrNotFound", err)
	}
	mustCreateTenant(t, s, tn)

	upd := tn
	upd.Allocation.MilliCPU = 1
	upd.Policy = sandbox.PolicyOverrides{}
	upd.UpdatedAt = at(time.Hour)
	if err := s.Tenants().Update(ctx, upd); !errors.Is(err, context.Canceled) {
		t.Errorf("Tenants.Update(cancelled ctx) = %v, want context.Canceled", err)
	}
	checkTenant(t, "Tenants.Get after cancelled update", mustGetTenant(t, s, tn.Name), tn)

	a := sandbox.Agent{Name: "claude-1", Tenant: tn.Name, CreatedAt: t0}
	if err := s.Agents().Create(ctx, a); !errors.Is(err, context.Canceled) {
		t.Errorf("Agents.Create(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Agents().Get(t.Context(), a.Tenant, a.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Agents.Get after cancelled create = %v, want ErrNotFound", err)
	}
	mustCreateAgent(t, s, a)

	if _, err := s.Tenants().Get(ctx, tn.Name); !errors.Is(err, context.Canceled) {
		t.Errorf("Tenants.Get(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Tenants().List(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Tenants.List(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Agents().Get(ctx, a.Tenant, a.Name); !errors.Is(err, context.Canceled) {
		t.Errorf("Agents.Get(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Agents().List(ctx, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("Agents.List(cancelled ctx) = %v, want context.Canceled", err)
	}
}
