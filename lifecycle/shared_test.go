package lifecycle_test

import (
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	driverfake "github.com/hearth/hearth/driver/fake"
	layersfake "github.com/hearth/hearth/layers/fake"

	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/postgres"
	"github.com/hearth/hearth/testutil/pgtest"
)

// TestMain stops the test binary's Postgres cluster (see pgtest) after
// every test.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// sharedEnv is an env whose store is a Postgres database, and n more
// services on the same database through stores of their own: the
// daemons of one replicated control plane.
func sharedEnv(t *testing.T, n int) (*env, []*lifecycle.Service) {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	openPG := func() store.Store {
		db, err := postgres.Open(t.Context(), dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	e := newEnv(t, func(o *envOptions) { o.Store = openPG() })
	e.db = e.opts.Store
	svcs := []*lifecycle.Service{e.svc}
	for range n {
		opts := e.opts
		opts.Store = openPG()
		svcs = append(svcs, e.newService(t, opts))
	}
	return e, svcs
}

// TestAdmissionAcrossDaemons: 100 concurrent creates spread over 4
// daemons of one Postgres store admit exactly each agent's quota where
// the quota binds, and exactly the tenant's budget where it binds, never
// one more: each create is decided under the tenant's lock in the store.
func TestAdmissionAcrossDaemons(t *testing.T) {
	e, svcs := sharedEnv(t, 3)
	ctx := t.Context()
	small := sandbox.Sizes()["small"]
	// quota: 4 agents, room for 100 small; budget: 6 agents, room for 20.
	roomy := sandbox.Resources{MilliCPU: 400 * small.MilliCPU, MemoryBytes: 400 * small.MemoryBytes, DiskBytes: 400 * small.DiskBytes}
	twenty := sandbox.Resources{MilliCPU: 80 * small.MilliCPU, MemoryBytes: 80 * small.MemoryBytes, DiskBytes: 80 * small.DiskBytes}
	o := sandbox.PolicyOverrides{AgentQuota: intp(5), AgentSharePercent: intp(100), AlarmCreatesPerMinute: intp(1000)}
	e.guarded(t, "quota", roomy, o, "")
	e.guarded(t, "budget", twenty, o, "")
	type call struct {
		p    sandbox.Principal
		name string
	}
	var calls []call
	for i := range 40 {
		calls = append(calls, call{sandbox.Principal{Tenant: "quota", Agent: fmt.Sprintf("q%d", i%4), Role: sandbox.RoleAgent}, fmt.Sprintf("q-%d", i)})
	}
	for i := range 60 {
		calls = append(calls, call{sandbox.Principal{Tenant: "budget", Agent: fmt.Sprintf("b%d", i%6), Role: sandbox.RoleAgent}, fmt.Sprintf("b-%d", i)})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(calls))
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := svcs[i%len(svcs)].Sandboxes.Create(ctx, c.p, sandbox.CreateRequest{Name: c.name, Size: "small"})
			if err != nil && !sandbox.IsCode(err, sandbox.CodeQuotaExceeded) && !sandbox.IsCode(err, sandbox.CodeBudgetExceeded) {
				errs <- fmt.Errorf("create %s by %s: %w", c.name, c.p.Agent, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rows, err := e.db.Sandboxes().List(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	tenants := map[string]int{}
	for _, sb := range rows {
		per[sb.Tenant+"/"+sb.Owner]++
		tenants[sb.Tenant]++
	}
	for i := range 4 {
		if got := per[fmt.Sprintf("quota/q%d", i)]; got != 5 {
			t.Errorf("agent q%d holds %d sandboxes, want exactly its quota of 5", i, got)
		}
	}
	for i := range 6 {
		if got := per[fmt.Sprintf("budget/b%d", i)]; got > 5 {
			t.Errorf("agent b%d holds %d sandboxes, over its quota of 5", i, got)
		}
	}
	if tenants["budget"] != 20 {
		t.Errorf("tenant budget holds %d small sandboxes, want exactly its budget of 20", tenants["budget"])
	}
}

// TestRateSharedAndKept: the create-rate breaker is the store's: opened
// through one daemon it refuses through another, and a restarted daemon
// still refuses.
func TestRateSharedAndKept(t *testing.T) {
	e, svcs := sharedEnv(t, 1)
	ctx := t.Context()
	o := sandbox.PolicyOverrides{AgentQuota: intp(100), AgentSharePercent: intp(100), AlarmCreatesPerMinute: intp(2), BreakerFactor: intp(2), BreakerCooldown: durp(5 * time.Minute)}
	p := e.guarded(t, "fast", wide, o, "f1")
	for i := range 4 {
		if _, _, err := svcs[i%2].Sandboxes.Create(ctx, p, sandbox.CreateRequest{Name: fmt.Sprintf("n-%d", i)}); err != nil {
			t.Fatalf("create %d of the 4 the breaker allows = %v", i+1, err)
		}
	}
	for i, svc := range append(svcs, e.restart(t)) {
		_, _, err := svc.Sandboxes.Create(ctx, p, sandbox.CreateRequest{Name: "one-more"})
		wantCode(t, fmt.Sprintf("the 5th create in a minute, through daemon %d", i), err, sandbox.CodeCircuitOpen)
		rep, err := svc.Tenancy.Limits(ctx, p)
		if err != nil || rep.CreateRate == nil || rep.CreateRate.Breaker != "open" {
			t.Errorf("Limits through daemon %d = %+v, %v; want the breaker open", i, rep.CreateRate, err)
		}
	}
}

// otherNode returns a service on e's store as another node, name, with
// a runtime and layer store of its own.
func (e *env) otherNode(t *testing.T, name string) *lifecycle.Service {
	t.Helper()
	svc, _ := e.otherNodeWith(t, name, driverfake.Options{})
	return svc
}

// otherNodeWith is otherNode with a runtime of drvOpts, which it returns.
func (e *env) otherNodeWith(t *testing.T, name string, drvOpts driverfake.Options) (*lifecycle.Service, *driverfake.Driver) {
	t.Helper()
	lay := layersfake.New(t)
	if err := lay.Import(t.Context(), "default", fstest.MapFS{"etc/hostname": {Data: []byte("default\n"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	drv := driverfake.New(drvOpts)
	t.Cleanup(func() { drv.Close() })
	opts := e.opts
	opts.Driver, opts.Layers, opts.NodeName = drv, lay, name
	return e.newService(t, opts), drv
}

// TestNodesApart: two nodes on one store each reconcile and sweep their
// own sandboxes only — neither takes the other's for vanished — and a call
// on a sandbox through the node that does not run it is unavailable,
// naming the node that does.
func TestNodesApart(t *testing.T) {
	e, _ := sharedEnv(t, 0)
	ctx := t.Context()
	b := e.otherNode(t, "b")
	onA := e.create(t, a1, "on-a")
	if onA.Node != "local" {
		t.Fatalf("a sandbox created through node local names node %q", onA.Node)
	}
	onB, _, err := b.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "on-b"})
	if err != nil || onB.Node != "b" {
		t.Fatalf("Create through node b = %+v, %v; want a sandbox of node b", onB, err)
	}
	if err := b.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	lifecycle.Sweep(ctx, b)
	lifecycle.Sweep(ctx, e.svc)
	for _, name := range []string{"on-a", "on-b"} {
		if sb := e.row(t, a1.Resolve(name)); sb.Status != sandbox.StatusRunning {
			t.Errorf("%s after both nodes recovered and swept = %s (%s), want running", name, sb.Status, sb.Reason)
		}
	}
	_, err = b.Processes.Exec(ctx, a1, "on-a", sandbox.ExecRequest{Argv: []string{"true"}}, nil, io.Discard, io.Discard)
	if se := wantCode(t, "exec through b on a's sandbox", err, sandbox.CodeUnavailable); se.Details["node"] != "local" {
		t.Errorf("details = %v, want node local", se.Details)
	}
	if list, err := b.Sandboxes.List(ctx, a1); err != nil || len(list) != 2 {
		t.Errorf("List through b = %d sandboxes, %v; want both nodes'", len(list), err)
	}
}

// TestAdoptsRowsWithoutNode: a row from before nodes (no node) is adopted
// by the node that recovers it, and then runs there.
func TestAdoptsRowsWithoutNode(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	sb := e.create(t, a1, "old")
	sb.Node = ""
	if err := e.db.Sandboxes().Update(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.row(t, sb.Name); got.Node != "local" || got.Status != sandbox.StatusRunning {
		t.Fatalf("row after Recover = node %q, %s; want adopted by local, running", got.Node, got.Status)
	}
}

// TestPolicyChangeReachesOtherNodes: a tenant's egress policy changed
// through one node reaches the running sandboxes of another at once,
// pushed through the store (Run's watch), not at their next start.
func TestPolicyChangeReachesOtherNodes(t *testing.T) {
	e, _ := sharedEnv(t, 0)
	ctx := t.Context()
	b, drvB := e.otherNodeWith(t, "b", driverfake.Options{Egress: true})
	go b.Run(ctx)
	sb, _, err := b.Sandboxes.Create(ctx, a1, sandbox.CreateRequest{Name: "out", Network: sandbox.NetworkEgress})
	if err != nil {
		t.Fatal(err)
	}
	deny := sandbox.EgressPolicy{Deny: []string{"192.0.2.1"}}
	if _, err := e.svc.Tenancy.UpdateTenant(ctx, op, "t1", sandbox.TenantUpdate{Policy: sandbox.PolicyOverrides{Egress: &deny}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rules, _ := drvB.EgressOf(sb.ID)
		if fmt.Sprint(rules.Deny) == "[192.0.2.1/32]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node b's sandbox's rules 5s after the tenant's change through node local = %+v", rules)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
