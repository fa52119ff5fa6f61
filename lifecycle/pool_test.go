package lifecycle_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
)

// members returns the warm pool's members, straight from the store.
func (e *env) members(t *testing.T) []sandbox.Sandbox {
	t.Helper()
	list, err := e.db.Sandboxes().List(t.Context(), store.Filter{Tenant: "system", Owner: "pool"})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// wantMembers wants n running members of size small in the pool, and
// returns them.
func (e *env) wantMembers(t *testing.T, n int) []sandbox.Sandbox {
	t.Helper()
	ms := e.members(t)
	for _, m := range ms {
		if m.Status != sandbox.StatusRunning || m.Size != "small" || !m.ExpiresAt.IsZero() {
			t.Errorf("pool member %+v; want running, small, never expiring", m)
		}
	}
	if len(ms) != n {
		t.Fatalf("the pool holds %d members, want %d", len(ms), n)
	}
	return ms
}

// poolEnv is an env whose service keeps two small sandboxes warm, filled.
func poolEnv(t *testing.T, adjust func(*envOptions)) *env {
	t.Helper()
	e := newEnv(t, func(o *envOptions) {
		o.WarmPool = map[string]int{"small": 2}
		if adjust != nil {
			adjust(o)
		}
	})
	lifecycle.FillPool(t.Context(), e.svc)
	e.wantMembers(t, 2)
	return e
}

// TestWarmPoolClaim: a create of the default image and a pooled size
// claims a running member: the caller's name, owner and TTL, created, no
// runtime start, and as usable as a fresh sandbox; members stay hidden.
func TestWarmPoolClaim(t *testing.T) {
	ctx := t.Context()
	e := poolEnv(t, nil)
	members := e.wantMembers(t, 2)

	for _, p := range []sandbox.Principal{a1, admin, op} {
		if list, err := e.svc.Sandboxes.List(ctx, p); err != nil || len(list) != 0 {
			t.Errorf("List(%s) = %+v, %v; want no pool member listed", p.Agent, list, err)
		}
		wantCode(t, "Get(pool member)", func() error { _, err := e.svc.Sandboxes.Get(ctx, p, members[0].Name); return err }(), sandbox.CodeNotFound)
	}
	_, _, err := e.svc.Sandboxes.Create(ctx, op, sandbox.CreateRequest{Name: members[0].Name})
	wantCode(t, "Create(a pool member's name) by an operator", err, sandbox.CodeAlreadyExists)

	starts := len(e.drv.Calls())
	sb, created, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "web", TTL: sandbox.Duration(time.Hour)})
	if err != nil || !created {
		t.Fatalf("Create(web) = %+v, %v, %v; want created", sb, created, err)
	}
	if !slices.Contains(ids(members...), sb.ID) {
		t.Errorf("Create(web).ID = %s, want one of the members %q", sb.ID, ids(members...))
	}
	if e.drv.Count(driverfake.OpStart, sb.ID) != 1 || len(e.drv.Calls()) != starts {
		t.Errorf("the claim called the runtime: %+v", e.drv.Calls()[starts:])
	}
	now := e.clock.Now()
	if sb.Name != "agent-a1-web" || sb.Tenant != "t1" || sb.Owner != "a1" || sb.Status != sandbox.StatusRunning ||
		!sb.CreatedAt.Equal(now) || !sb.ExpiresAt.Equal(now.Add(time.Hour)) || sb.Reason != "created (from the warm pool)" || sb.Size != "small" {
		t.Errorf("Create(web) = %+v; want agent-a1-web of t1/a1, running, created now, expiring in 1h", sb)
	}
	if row := e.row(t, "web"); !sandboxEqual(row, sb) {
		t.Errorf("stored row = %+v, want %+v", row, sb)
	}
	if list, err := e.svc.Sandboxes.List(ctx, a1); err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("List(a1) = %+v, %v; want web alone", list, err)
	}
	e.wantMembers(t, 1)
	wantPool(t, e, sandbox.PoolSize{Size: "small", Image: "default", Target: 2, Ready: 1})

	// As usable as a fresh sandbox: exec, files, checkpoints, and a
	// hostname and environment that name no sandbox.
	spec, _ := e.drv.Spec(sb.ID)
	if spec.Hostname != "sandbox" || slices.ContainsFunc(spec.Env, func(kv string) bool {
		return kv == "HEARTH_SANDBOX="+members[0].Name || kv == "HEARTH_SANDBOX="+members[1].Name
	}) {
		t.Errorf("Spec(%s) = %+v; want hostname sandbox and no pool name", sb.ID, spec)
	}
	e.write(t, "web", "v1")
	ck := e.checkpoint(t, "web", "first")
	e.write(t, "web", "v2")
	e.restore(t, "web", ck.ID)
	e.wantData(t, "web", "v1")
	if _, err := e.svc.Sandboxes.Get(ctx, a2, "web"); err == nil {
		t.Errorf("Get(a2, web) = nil error, want a1's sandbox hidden from a2")
	}

	// The next refill brings the pool back to its count.
	lifecycle.FillPool(ctx, e.svc)
	e.wantMembers(t, 2)
	wantPool(t, e, sandbox.PoolSize{Size: "small", Image: "default", Target: 2, Ready: 2})
	if err := e.svc.Sandboxes.Destroy(ctx, a1, "web"); err != nil {
		t.Fatalf("Destroy(web) = %v", err)
	}
	e.wantHeld(t, ids(e.members(t)...)...)
}

// wantPool wants the operator to see the pool as want, and every other
// caller to be refused.
func wantPool(t *testing.T, e *env, want ...sandbox.PoolSize) {
	t.Helper()
	got, err := e.svc.Pool.Status(t.Context(), op)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Pool(operator) = %+v, %v; want %+v", got, err, want)
	}
	for _, p := range []sandbox.Principal{a1, admin} {
		_, err := e.svc.Pool.Status(t.Context(), p)
		wantCode(t, "Pool("+p.Agent+")", err, sandbox.CodePermissionDenied)
	}
}

// TestWarmPoolFallback: without a member to claim (no pool, another size,
// another image, the pool empty), create starts a sandbox as before.
func TestWarmPoolFallback(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, nil)
	sb := e.create(t, a1, "plain")
	if sb.Reason != "created" || e.started(sb.ID) != 1 {
		t.Errorf("Create(plain) without a pool = %+v, started %d times; want a fresh start", sb, e.started(sb.ID))
	}

	e = newEnv(t, func(o *envOptions) { o.WarmPool = map[string]int{"small": 1} })
	lifecycle.FillPool(ctx, e.svc)
	e.wantMembers(t, 1)
	sb, created, err := e.svc.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "big", Size: "medium"})
	if err != nil || !created || sb.Reason != "created" {
		t.Errorf("Create(big, medium) = %+v, %v, %v; want a fresh start", sb, created, err)
	}
	e.create(t, a1, "first") // takes the member
	sb = e.create(t, a1, "second")
	if sb.Reason != "created" || e.started(sb.ID) != 1 {
		t.Errorf("Create(second) from an empty pool = %+v; want a fresh start", sb)
	}
}

// TestWarmPoolConcurrentClaims: two creates at once never take one member.
func TestWarmPoolConcurrentClaims(t *testing.T) {
	e := poolEnv(t, nil)
	var wg sync.WaitGroup
	got := make([]sandbox.Sandbox, 2)
	for i, name := range []string{"one", "two"} {
		wg.Go(func() {
			sb, _, err := e.svc.Sandboxes.Create(t.Context(), a1, sandbox.CreateRequest{Name: name})
			if err != nil {
				t.Errorf("Create(%s) = %v", name, err)
			}
			got[i] = sb
		})
	}
	wg.Wait()
	if got[0].ID == got[1].ID || got[0].Reason != got[1].Reason || got[0].Reason != "created (from the warm pool)" {
		t.Errorf("concurrent creates = %+v and %+v; want two different members", got[0], got[1])
	}
	e.wantMembers(t, 0)
}

// TestWarmPoolRefill: Run fills the pool, and refills it after a claim
// without the caller waiting.
func TestWarmPoolRefill(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.WarmPool = map[string]int{"small": 2} })
	e.run(t)
	e.waitMembers(t, 2)
	if sb := e.create(t, a1, "web"); sb.Reason != "created (from the warm pool)" {
		t.Fatalf("Create(web) = %+v, want a claim", sb)
	}
	e.waitMembers(t, 2)
	e.wantMembers(t, 2)
}

// TestWarmPoolRefillWaitsForQuiet: the refill after a claim waits while the
// claimed sandbox runs a command and until it has been quiet for a while,
// but no longer than its bound.
func TestWarmPoolRefillWaitsForQuiet(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.WarmPool = map[string]int{"small": 2} })
	lifecycle.SetRefillWait(e.svc, 500*time.Millisecond, 5*time.Second)
	ctx := e.run(t)
	e.waitMembers(t, 2)

	// The claimant's command, at once: nothing refills while it runs, nor
	// as it ends.
	e.create(t, a1, "web")
	e.exec(t, a1, "web", "sleep 1")
	if n := len(e.members(t)); n != 1 {
		t.Fatalf("the pool holds %d members as the claimant's command ends, want 1: the refill did not wait", n)
	}
	e.waitMembers(t, 2)

	// A command that outlasts the bound: the refill goes anyway.
	lifecycle.SetRefillWait(e.svc, 500*time.Millisecond, time.Second)
	e.create(t, a1, "db")
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Processes.Exec(ctx, a1, "db", sandbox.ExecRequest{Shell: "sleep 4"}, nil, nil, nil)
		done <- err
	}()
	e.waitMembers(t, 2)
	select {
	case err := <-done:
		t.Fatalf("the command ended (%v) before the pool refilled; want the refill after 1 s, while it runs", err)
	default:
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// run runs the service (its sweeps and refiller) until the test ends, and
// returns the context it runs under.
func (e *env) run(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { e.svc.Run(ctx) })
	return ctx
}

// waitMembers waits up to 10 s until the pool holds n running members.
func (e *env) waitMembers(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(e.members(t)) != n || anyCreating(e.members(t)); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %+v, want %d running members", e.members(t), n)
		}
	}
}

func anyCreating(sbs []sandbox.Sandbox) bool {
	return slices.ContainsFunc(sbs, func(sb sandbox.Sandbox) bool { return sb.Status != sandbox.StatusRunning })
}

// TestWarmPoolMemoryPressure: under memory pressure each sweep removes one
// member and nothing refills; once it passes, the pool fills again.
func TestWarmPoolMemoryPressure(t *testing.T) {
	ctx := t.Context()
	var pressure atomic.Bool
	e := poolEnv(t, func(o *envOptions) {
		o.MemInfo = func() (int64, int64, error) {
			if pressure.Load() {
				return 5 << 20, 100 << 20, nil
			}
			return 50 << 20, 100 << 20, nil
		}
	})
	user := e.create(t, a1, "web") // a claimed sandbox is no member: it stays
	lifecycle.FillPool(ctx, e.svc)
	e.wantMembers(t, 2)

	pressure.Store(true)
	lifecycle.Sweep(ctx, e.svc)
	e.wantMembers(t, 1)
	lifecycle.Sweep(ctx, e.svc)
	lifecycle.FillPool(ctx, e.svc)
	e.wantMembers(t, 0)
	e.wantHeld(t, user.ID)

	pressure.Store(false)
	lifecycle.FillPool(ctx, e.svc)
	e.wantMembers(t, 2)
}

// TestWarmPoolSweep: members never sleep nor expire, and one the runtime
// lost is replaced.
func TestWarmPoolSweep(t *testing.T) {
	ctx := t.Context()
	e := poolEnv(t, func(o *envOptions) { o.IdleTimeout = time.Minute })
	members := e.wantMembers(t, 2)
	e.clock.Advance(48 * time.Hour)
	lifecycle.Sweep(ctx, e.svc)
	lifecycle.FillPool(ctx, e.svc)
	if got := e.wantMembers(t, 2); !slices.Equal(ids(got...), ids(members...)) {
		t.Errorf("after a sweep two days on, the members are %q, want %q untouched", ids(got...), ids(members...))
	}

	if err := e.drv.Faults().Die(members[0].ID, false); err != nil {
		t.Fatal(err)
	}
	lifecycle.Sweep(ctx, e.svc)
	lifecycle.FillPool(ctx, e.svc)
	got := e.wantMembers(t, 2)
	if slices.Contains(ids(got...), members[0].ID) {
		t.Errorf("the dead member %s is still in the pool", members[0].ID)
	}
	e.wantHeld(t, ids(got...)...)
}

// TestWarmPoolRecover: members survive a daemon restart and are claimed
// after it.
func TestWarmPoolRecover(t *testing.T) {
	ctx := t.Context()
	e := poolEnv(t, nil)
	members := e.wantMembers(t, 2)
	e.svc = e.restart(t)
	if err := e.svc.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	e.wantMembers(t, 2)
	e.wantHeld(t, ids(members...)...)
	if sb := e.create(t, a1, "web"); !slices.Contains(ids(members...), sb.ID) {
		t.Errorf("Create(web) after a restart = %+v, want one of the members %q", sb, ids(members...))
	}
}
