package lifecycle_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
)

const gib = 1 << 30

// guarded adds tenant name with allocation alloc and overrides o, and
// returns an agent principal of it called agent.
func (e *env) guarded(t *testing.T, name string, alloc sandbox.Resources, o sandbox.PolicyOverrides, agent string) sandbox.Principal {
	t.Helper()
	if _, err := e.svc.Tenancy.CreateTenant(t.Context(), op, sandbox.Tenant{Name: name, Allocation: alloc, Policy: o}); err != nil && !sandbox.IsCode(err, sandbox.CodeAlreadyExists) {
		t.Fatal(err)
	}
	return sandbox.Principal{Tenant: name, Agent: agent, Role: sandbox.RoleAgent}
}

// wide is an allocation whose budget (25%) fits 100 small sandboxes by
// CPU, so that the default quota of 5 is what binds.
var wide = sandbox.Resources{MilliCPU: 400_000, MemoryBytes: 1024 * gib, DiskBytes: 4096 * gib}

func intp(v int) *int { return &v }

func durp(d time.Duration) *sandbox.Duration { v := sandbox.Duration(d); return &v }

// TestQuota: the sixth create by one agent fails with the exact words and
// numbers; another agent of the tenant is unaffected; a resume or a
// destroy makes room.
func TestQuota(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	q1 := e.guarded(t, "quota", wide, sandbox.PolicyOverrides{}, "q1")
	q2 := sandbox.Principal{Tenant: "quota", Agent: "q2", Role: sandbox.RoleAgent}
	for i := range 5 {
		e.create(t, q1, fmt.Sprintf("box-%d", i))
	}
	_, _, err := e.svc.Sandboxes.Create(ctx, q1, sandbox.CreateRequest{Name: "box-5"})
	se := wantCode(t, "the 6th Create", err, sandbox.CodeQuotaExceeded)
	if se.Error() != "quota exceeded: 5 of 5 sandboxes in use for agent-q1; destroy one or wait" ||
		se.Details["limit"] != 5 || se.Details["used"] != 5 {
		t.Errorf("the 6th Create = %q %v, want the quota's words and numbers", se.Error(), se.Details)
	}
	if _, err := e.find(t, "agent-q1-box-5"); err == nil {
		t.Errorf("a refused create left a row")
	}
	// A resume is not a new sandbox.
	if sb, created, err := e.svc.Sandboxes.Create(ctx, q1, sandbox.CreateRequest{Name: "box-0"}); err != nil || created || sb.Name != "agent-q1-box-0" {
		t.Errorf("Create(box-0) again at the quota = %+v, %v, %v; want the existing one", sb, created, err)
	}
	e.create(t, q2, "box-0")
	// A fork is a new sandbox too.
	ck, err := e.svc.Checkpoints.Checkpoint(ctx, q1, "box-0", sandbox.CheckpointRequest{Label: ""})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Checkpoints.Fork(ctx, q1, "box-0", ck.ID, "forked")
	wantCode(t, "Fork at the quota", err, sandbox.CodeQuotaExceeded)
	if err := e.svc.Sandboxes.Destroy(ctx, q1, "box-1"); err != nil {
		t.Fatal(err)
	}
	e.create(t, q1, "box-5")
	// Operators are not limited.
	for i := range 6 {
		e.create(t, op, fmt.Sprintf("op-%d", i))
	}
}

// TestQuotaConcurrent: creates racing for the last places get exactly the
// quota, never one more.
func TestQuotaConcurrent(t *testing.T) {
	e := newEnv(t, nil)
	p := e.guarded(t, "race", wide, sandbox.PolicyOverrides{}, "r1")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
	)
	for i := range 12 {
		wg.Go(func() {
			_, ok, err := e.svc.Sandboxes.Create(t.Context(), p, sandbox.CreateRequest{Name: fmt.Sprintf("c-%d", i)})
			if err != nil && !sandbox.IsCode(err, sandbox.CodeQuotaExceeded) {
				t.Errorf("Create(c-%d) = %v", i, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				created++
			}
		})
	}
	wg.Wait()
	if created != 5 {
		t.Errorf("12 racing creates made %d sandboxes, want the quota of 5", created)
	}
}

// TestQuotaShare: the quota never exceeds 10% of the budget in small
// sandboxes, and is at least 1.
func TestQuotaShare(t *testing.T) {
	e := newEnv(t, nil)
	// Budget 25% of 120 CPUs = 30 small sandboxes by CPU: 10% is 3.
	p := e.guarded(t, "share", sandbox.Resources{MilliCPU: 120_000, MemoryBytes: 1024 * gib, DiskBytes: 4096 * gib}, sandbox.PolicyOverrides{}, "s1")
	for i := range 3 {
		e.create(t, p, fmt.Sprintf("s-%d", i))
	}
	_, _, err := e.svc.Sandboxes.Create(t.Context(), p, sandbox.CreateRequest{Name: "s-3"})
	if se := wantCode(t, "the 4th Create", err, sandbox.CodeQuotaExceeded); se.Details["limit"] != 3 {
		t.Errorf("the 4th Create = %v %v; want the limit 3 (10%% of 30)", se, se.Details)
	}
}

// TestBudget: a tenant's sandboxes together stay within 25% of its
// allocation, whoever creates them.
func TestBudget(t *testing.T) {
	e := newEnv(t, nil)
	// 8 CPUs: a budget of 2, two small sandboxes.
	b1 := e.guarded(t, "budget", sandbox.Resources{MilliCPU: 8000, MemoryBytes: 1024 * gib, DiskBytes: 4096 * gib}, sandbox.PolicyOverrides{}, "b1")
	b2 := sandbox.Principal{Tenant: "budget", Agent: "b2", Role: sandbox.RoleAgent}
	b3 := sandbox.Principal{Tenant: "budget", Agent: "b3", Role: sandbox.RoleAgent}
	e.create(t, b1, "one")
	e.create(t, b2, "two")
	_, _, err := e.svc.Sandboxes.Create(t.Context(), b3, sandbox.CreateRequest{Name: "three"})
	se := wantCode(t, "Create over the budget", err, sandbox.CodeBudgetExceeded)
	if want := "budget exceeded: tenant budget's sandboxes would use 3 of 2 CPUs"; se.Message != want || se.Details["resource"] != "cpu" {
		t.Errorf("Create over the budget = %q %v, want %q", se.Message, se.Details, want)
	}
	// Another tenant's budget is its own.
	e.create(t, sandbox.Principal{Tenant: "t1", Agent: "a9", Role: sandbox.RoleAgent}, "elsewhere")
}

// TestTTLCap: a tenant's max TTL caps what a create may ask for and is the
// default when it is shorter than the daemon's.
func TestTTLCap(t *testing.T) {
	e := newEnv(t, nil)
	p := e.guarded(t, "short", wide, sandbox.PolicyOverrides{MaxTTL: durp(time.Hour)}, "t1")
	_, _, err := e.svc.Sandboxes.Create(t.Context(), p, sandbox.CreateRequest{Name: "long", TTL: sandbox.Duration(2 * time.Hour)})
	se := wantCode(t, "Create(ttl 2h)", err, sandbox.CodeInvalidArgument)
	if se.Message != "ttl 2h0m0s is longer than the 1h0m0s cap" || se.Details["limit_seconds"] != int64(3600) {
		t.Errorf("Create(ttl 2h) = %q %v", se.Message, se.Details)
	}
	sb := e.create(t, p, "default-ttl")
	if !sb.ExpiresAt.Equal(epoch.Add(time.Hour)) {
		t.Errorf("Create() expires at %v, want the tenant's cap of 1h", sb.ExpiresAt)
	}
	// The platform reaps it at its TTL; nothing depends on the agent.
	e.clock.Advance(time.Hour)
	lifecycle.Sweep(t.Context(), e.svc)
	_, err = e.svc.Sandboxes.Get(t.Context(), p, "default-ttl")
	wantCode(t, "Get after the TTL", err, sandbox.CodeNotFound)
}

// TestBreaker: the create-rate alarm at the threshold, the breaker at
// BreakerFactor times it, half-open after the cool-down, each reported to
// Options.Alarms; another identity is unaffected.
func TestBreaker(t *testing.T) {
	var (
		mu     sync.Mutex
		alarms []sandbox.Alarm
	)
	e := newEnv(t, func(o *envOptions) {
		o.Alarms = func(a sandbox.Alarm) { mu.Lock(); alarms = append(alarms, a); mu.Unlock() }
	})
	ctx := t.Context()
	o := sandbox.PolicyOverrides{AgentQuota: intp(100), AgentSharePercent: intp(100), AlarmCreatesPerMinute: intp(2), BreakerFactor: intp(2), BreakerCooldown: durp(5 * time.Minute)}
	p := e.guarded(t, "fast", wide, o, "f1")
	create := func(name string) error {
		_, _, err := e.svc.Sandboxes.Create(ctx, p, sandbox.CreateRequest{Name: name})
		return err
	}
	for i := range 4 {
		if err := create(fmt.Sprintf("n-%d", i)); err != nil {
			t.Fatalf("create %d of 4 allowed = %v", i+1, err)
		}
	}
	se := wantCode(t, "the 5th create in a minute", create("n-4"), sandbox.CodeCircuitOpen)
	if fmt.Sprint(se.Details["retry_after_seconds"]) != "300" || se.Details["limit"] != 4 {
		t.Errorf("circuit_open = %v %v; want retry after 300 s and the limit 4", se, se.Details)
	}
	mu.Lock()
	if len(alarms) != 2 || alarms[0].Kind != "create_rate" || alarms[0].Agent != "f1" || alarms[1].Kind != "circuit_open" || alarms[1].Tenant != "fast" {
		t.Errorf("alarms = %+v; want create_rate at the 2nd create, then circuit_open", alarms)
	}
	mu.Unlock()
	rep, err := e.svc.Tenancy.Limits(ctx, p)
	if err != nil || rep.CreateRate == nil || rep.CreateRate.Breaker != "open" || !rep.CreateRate.Until.Equal(epoch.Add(5*time.Minute)) {
		t.Errorf("Limits while open = %+v, %v", rep.CreateRate, err)
	}
	// Another identity of the same tenant is not affected.
	if _, _, err := e.svc.Sandboxes.Create(ctx, sandbox.Principal{Tenant: "fast", Agent: "f2", Role: sandbox.RoleAgent}, sandbox.CreateRequest{Name: "x"}); err != nil {
		t.Errorf("Create by f2 while f1's breaker is open = %v", err)
	}
	e.clock.Advance(4 * time.Minute)
	se = wantCode(t, "a create a minute before the cool-down ends", create("n-4"), sandbox.CodeCircuitOpen)
	if fmt.Sprint(se.Details["retry_after_seconds"]) != "60" {
		t.Errorf("retry_after_seconds = %v, want 60", se.Details["retry_after_seconds"])
	}
	// Half-open: the alarm threshold (2) is the limit.
	e.clock.Advance(time.Minute)
	for _, name := range []string{"h-1", "h-2"} {
		if err := create(name); err != nil {
			t.Fatalf("half-open create %s = %v", name, err)
		}
	}
	wantCode(t, "the 3rd half-open create in a minute", create("h-3"), sandbox.CodeCircuitOpen)
}

// TestLimitsReport: the caller sees its quota, its tenant's budget and
// its create rate, with what it uses of each.
func TestLimitsReport(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	p := e.guarded(t, "report", wide, sandbox.PolicyOverrides{IdleTimeout: durp(time.Minute)}, "r1")
	e.create(t, p, "a")
	e.create(t, p, "b")
	rep, err := e.svc.Tenancy.Limits(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	small := sandbox.Sizes()["small"]
	if rep.Sandboxes == nil || *rep.Sandboxes != (sandbox.Quota{Limit: 5, Used: 2}) ||
		rep.Budget == nil || rep.Budget.Limit.MilliCPU != 100_000 || rep.Budget.Used.MilliCPU != 2*small.MilliCPU ||
		rep.Allocation == nil || *rep.Allocation != wide ||
		time.Duration(rep.MaxTTL) != lifecycle.DefaultTTL || time.Duration(rep.IdleTimeout) != time.Minute ||
		rep.CreateRate == nil || rep.CreateRate.Recent != 2 || rep.CreateRate.Breaker != "closed" || !rep.CreateRate.ResetsAt.Equal(epoch.Add(time.Minute)) ||
		rep.Network != sandbox.NetworkNone || !rep.AllowEgress {
		t.Errorf("Limits = %+v (sandboxes %+v, budget %+v, rate %+v)", rep, rep.Sandboxes, rep.Budget, rep.CreateRate)
	}
	opRep, err := e.svc.Tenancy.Limits(ctx, op)
	if err != nil || opRep.Sandboxes != nil || opRep.Role != sandbox.RoleOperator {
		t.Errorf("Limits(operator) = %+v, %v; want no limits", opRep, err)
	}
}

// TestTenantIdleTimeout: a tenant's idle timeout puts its sandboxes to
// sleep sooner than the daemon's.
func TestTenantIdleTimeout(t *testing.T) {
	e := newEnv(t, nil)
	p := e.guarded(t, "sleepy", wide, sandbox.PolicyOverrides{IdleTimeout: durp(time.Minute)}, "z1")
	e.create(t, p, "nap")
	e.create(t, a1, "awake")
	e.clock.Advance(2 * time.Minute)
	lifecycle.Sweep(t.Context(), e.svc)
	if got := e.row(t, "agent-z1-nap"); got.Status != sandbox.StatusSleeping || got.Reason != "idle for 1m0s" {
		t.Errorf("after 2m idle, nap = %s %q; want sleeping, idle for 1m0s", got.Status, got.Reason)
	}
	if got := e.row(t, "awake"); got.Status != sandbox.StatusRunning {
		t.Errorf("after 2m idle, a t1 sandbox (10m timeout) = %s, want running", got.Status)
	}
}
