package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/pgtest"
)

// smalls is the allocation whose every dimension holds n small sandboxes.
func smalls(n int64) sandbox.Resources {
	small := sandbox.Sizes()["small"]
	return sandbox.Resources{MilliCPU: n * small.MilliCPU, MemoryBytes: n * small.MemoryBytes, DiskBytes: n * small.DiskBytes}
}

// guardedTenant makes, through op (an operator's client), tenant name
// with allocation alloc, policy o and the agents named, and returns a
// token of each agent by name.
func guardedTenant(t *testing.T, ctx context.Context, op *client.Client, name string, alloc sandbox.Resources, o sandbox.PolicyOverrides, agents ...string) map[string]string {
	t.Helper()
	if _, err := op.Admin().CreateTenant(ctx, sandbox.Tenant{Name: name, Allocation: alloc, Policy: o}); err != nil {
		t.Fatalf("CreateTenant(%s) = %v", name, err)
	}
	tokens := map[string]string{}
	for _, a := range agents {
		if _, err := op.Admin().CreateAgent(ctx, sandbox.Agent{Name: a, Tenant: name}); err != nil {
			t.Fatalf("CreateAgent(%s/%s) = %v", name, a, err)
		}
		secret, _, err := op.Admin().CreateToken(ctx, sandbox.TokenRequest{Tenant: name, Agent: a})
		if err != nil {
			t.Fatalf("CreateToken(%s/%s) = %v", name, a, err)
		}
		tokens[a] = secret
	}
	return tokens
}

func intp(v int) *int { return &v }

// storeRow is what the database holds of one sandbox.
type storeRow struct{ tenant, owner, name, node, status string }

// storeRows reads every sandbox row of the database dsn names, bypassing
// the daemons.
func storeRows(t *testing.T, ctx context.Context, dsn string) []storeRow {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the store: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tenant, owner, name, node, status FROM sandboxes ORDER BY seq`)
	if err != nil {
		t.Fatalf("query the store's sandboxes: %v", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storeRow, error) {
		var s storeRow
		return s, r.Scan(&s.tenant, &s.owner, &s.name, &s.node, &s.status)
	})
	if err != nil {
		t.Fatalf("read the store's sandboxes: %v", err)
	}
	return out
}

// TestSharedStoreAdmission: 100 concurrent creates of small sandboxes by
// ten agents of two tenants, spread round-robin over four daemons of one
// Postgres store, admit exactly what the guardrails allow, counted
// through the API and in the database: tenant "quota" (4 agents, a budget
// of 100 small) exactly each agent's quota of 5; tenant "budget" (6
// agents, a budget of 20 small) exactly 20 in all and no agent over 5.
// Every refusal is quota_exceeded or budget_exceeded (in "quota" only
// the former); every admitted sandbox runs on the node that admitted it
// and answers an exec forwarded by another node.
func TestSharedStoreAdmission(t *testing.T) {
	ds, dsn := sharedStore(t, bins.Runtimes[0], 4)
	ctx := ctxT(t)
	op := ds[0].Client()
	const quota = 5
	o := sandbox.PolicyOverrides{AgentQuota: intp(quota), AgentSharePercent: intp(100), AlarmCreatesPerMinute: intp(1000)}
	tenants := []struct {
		name   string
		alloc  sandbox.Resources
		agents []string
		fit    int // small sandboxes the tenant's budget holds
	}{
		{"quota", smalls(400), []string{"q0", "q1", "q2", "q3"}, 100},
		{"budget", smalls(80), []string{"b0", "b1", "b2", "b3", "b4", "b5"}, 20},
	}
	small := sandbox.Sizes()["small"]
	tokens := map[string]string{} // by agent
	for _, tn := range tenants {
		if got := policy.Fit(policy.Budget(tn.alloc, policy.Defaults()), small); got != tn.fit {
			t.Fatalf("the default budget of tenant %s fits %d small sandboxes, want %d", tn.name, got, tn.fit)
		}
		for a, tok := range guardedTenant(t, ctx, op, tn.name, tn.alloc, o, tn.agents...) {
			tokens[a] = tok
		}
		// The daemon's own account of the limits, before the storm.
		rep, err := client.New(ds[1].URL, tokens[tn.agents[0]], nil).Limits(ctx)
		if err != nil || rep.Sandboxes == nil || rep.Sandboxes.Limit != quota || rep.Budget == nil || policy.Fit(rep.Budget.Limit, small) != tn.fit {
			t.Fatalf("Limits of %s/%s = %+v, %+v, %v; want a quota of %d and a budget of %d small", tn.name, tn.agents[0], rep.Sandboxes, rep.Budget, err, quota, tn.fit)
		}
	}

	// Each agent makes 10 creates, spread over the four daemons: call i
	// goes to daemon i%4, and four consecutive calls share an agent.
	type call struct {
		tenant, agent, name string
		d                   int // index of the daemon it goes to
		sb                  sandbox.Sandbox
		created             bool
		err                 error
		took                time.Duration
	}
	var calls []*call
	for i := range 40 {
		a := tenants[0].agents[(i/4)%4]
		calls = append(calls, &call{tenant: "quota", agent: a, name: fmt.Sprintf("q-%02d", i)})
	}
	for j := range 60 {
		a := tenants[1].agents[(j/4)%6]
		calls = append(calls, &call{tenant: "budget", agent: a, name: fmt.Sprintf("b-%02d", j)})
	}
	for i, c := range calls {
		c.d = i % len(ds)
	}
	var wg sync.WaitGroup
	fire := make(chan struct{})
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := client.New(ds[c.d].URL, tokens[c.agent], nil)
			<-fire
			began := time.Now()
			c.sb, c.created, c.err = cl.Create(ctx, sandbox.CreateRequest{Name: c.name, Size: "small"})
			c.took = time.Since(began)
		}()
	}
	began := time.Now()
	close(fire)
	wg.Wait()
	wall := time.Since(began)

	admitted := map[string]*call{} // by attributed name
	codes := map[string]map[sandbox.Code]int{}
	var slowest time.Duration
	for _, c := range calls {
		slowest = max(slowest, c.took)
		switch {
		case c.err == nil:
			want := "agent-" + c.agent + "-" + c.name
			if !c.created || c.sb.Name != want || c.sb.Tenant != c.tenant || c.sb.Owner != c.agent ||
				c.sb.Status != sandbox.StatusRunning || c.sb.Node != fmt.Sprintf("n%d", c.d) {
				t.Errorf("Create(%s) as %s/%s through n%d = %+v, created %v; want %s running on n%d, created", c.name, c.tenant, c.agent, c.d, c.sb, c.created, want, c.d)
			}
			admitted[c.sb.Name] = c
		case sandbox.IsCode(c.err, sandbox.CodeQuotaExceeded), sandbox.IsCode(c.err, sandbox.CodeBudgetExceeded):
			if codes[c.tenant] == nil {
				codes[c.tenant] = map[sandbox.Code]int{}
			}
			codes[c.tenant][sandbox.ErrorCode(c.err)]++
		default:
			t.Errorf("Create(%s) as %s/%s through n%d = %v (%s); want success, quota_exceeded or budget_exceeded", c.name, c.tenant, c.agent, c.d, c.err, sandbox.ErrorCode(c.err))
		}
	}
	t.Logf("100 concurrent creates over 4 daemons: %s wall, slowest call %s; admitted %d (%.1f/s), refused %d (quota: %v; budget: %v)",
		wall.Round(time.Millisecond), slowest.Round(time.Millisecond), len(admitted), float64(len(admitted))/wall.Seconds(),
		len(calls)-len(admitted), codes["quota"], codes["budget"])
	if n := codes["quota"][sandbox.CodeBudgetExceeded]; n > 0 {
		t.Errorf("%d creates in tenant quota, whose budget holds 100 small, were refused for the budget; want the quota only", n)
	}

	// The API's count, as the operator sees every tenant, through a
	// daemon other than the first.
	list, err := ds[3].Client().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]int{}
	for _, sb := range list {
		listed[sb.Tenant+"/"+sb.Owner]++
		if _, ok := admitted[sb.Name]; !ok || sb.Status != sandbox.StatusRunning {
			t.Errorf("listed %s/%s (%s, %s) is not a sandbox a create admitted, or does not run", sb.Tenant, sb.Name, sb.Status, sb.Reason)
		}
	}
	// The database's count, behind every daemon.
	rows := storeRows(t, ctx, dsn)
	stored := map[string]int{}
	names := map[string]int{}
	for _, r := range rows {
		stored[r.tenant+"/"+r.owner]++
		names[r.tenant+"/"+r.name]++
		if c, ok := admitted[r.name]; !ok || r.tenant != c.tenant || r.status != string(sandbox.StatusRunning) || r.node != fmt.Sprintf("n%d", c.d) {
			t.Errorf("row %+v in the store is not a sandbox a create admitted, running on the node that admitted it", r)
		}
	}
	for name, n := range names {
		if n != 1 {
			t.Errorf("the store holds %d rows of %s, want 1", n, name)
		}
	}
	if len(list) != len(admitted) || len(rows) != len(admitted) {
		t.Errorf("%d creates succeeded, the API lists %d sandboxes, the store holds %d rows; want them equal", len(admitted), len(list), len(rows))
	}
	for _, tn := range tenants {
		total := 0
		for _, a := range tn.agents {
			key := tn.name + "/" + a
			total += stored[key]
			if listed[key] != stored[key] {
				t.Errorf("agent %s: the API lists %d sandboxes, the store holds %d", key, listed[key], stored[key])
			}
			if tn.name == "quota" && stored[key] != quota {
				t.Errorf("agent %s holds %d sandboxes, want exactly its quota of %d", key, stored[key], quota)
			}
			if stored[key] > quota {
				t.Errorf("agent %s holds %d sandboxes, over its quota of %d", key, stored[key], quota)
			}
		}
		if want := min(tn.fit, quota*len(tn.agents)); total != want {
			t.Errorf("tenant %s holds %d small sandboxes, want exactly %d", tn.name, total, want)
		}
		// What the daemon now reports as used agrees.
		rep, err := client.New(ds[2].URL, tokens[tn.agents[0]], nil).Limits(ctx)
		if err != nil || rep.Budget == nil || rep.Budget.Used.MilliCPU != int64(total)*small.MilliCPU {
			t.Errorf("Limits of %s after the storm = %+v, %v; want %d small in use", tn.name, rep.Budget, err, total)
		}
	}

	// Every admitted sandbox runs: an exec through the next daemon, which
	// forwards it to the sandbox's node.
	for name, c := range admitted {
		cl := client.New(ds[(c.d+1)%len(ds)].URL, tokens[c.agent], nil)
		res, err := cl.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
		if err != nil || res.ExitCode != 0 {
			t.Errorf("exec true in %s through n%d = %+v, %v", name, (c.d+1)%len(ds), res, err)
		}
	}
}

// TestSharedStorePostgresRestart: Postgres restarts while two daemons of
// one store run a stream of creates (30, one every 100 ms, at most four
// at a time, round-robin, by an agent with room for all). No create is
// admitted twice and none is lost: a create that succeeded has its
// sandbox, listed once by either daemon, one row in the database, running
// and answering an exec; a create that failed failed with a coded error
// and left at most one row, and trying it again (as its hint says) gives
// a running sandbox. Within 30 s of the restart both daemons answer again
// (health with both nodes live, list, an exec in a sandbox made before),
// and each admits a create again.
func TestSharedStorePostgresRestart(t *testing.T) {
	ds, dsn := sharedStore(t, bins.Runtimes[0], 2)
	ctx := ctxT(t)
	tokens := guardedTenant(t, ctx, ds[0].Client(), "flow", smalls(400),
		sandbox.PolicyOverrides{AgentQuota: intp(100), AgentSharePercent: intp(100), AlarmCreatesPerMinute: intp(1000)}, "f0")
	as := func(d *daemon) *client.Client { return client.New(d.URL, tokens["f0"], nil) }
	anchor, _, err := as(ds[0]).Create(ctx, sandbox.CreateRequest{Name: "anchor"})
	if err != nil {
		t.Fatal(err)
	}

	type call struct {
		name       string // as the agent writes it
		d          int
		sb         sandbox.Sandbox
		err        error
		start, end time.Time
	}
	const (
		n, width, before = 30, 4, 6 // creates, at most at once, finished before the restart
		every            = 100 * time.Millisecond
		midCreate        = 25 * time.Millisecond // how long a create takes to write its row
	)
	calls := make([]*call, n)
	for i := range calls {
		calls[i] = &call{name: fmt.Sprintf("s-%02d", i), d: i % len(ds)}
	}
	work := make(chan *call)
	finished := make(chan struct{}, n)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		inFlight = map[*call]time.Time{} // by call, when it started
	)
	for range width {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				c.start = time.Now()
				mu.Lock()
				inFlight[c] = c.start
				mu.Unlock()
				c.sb, _, c.err = as(ds[c.d]).Create(ctx, sandbox.CreateRequest{Name: c.name})
				c.end = time.Now()
				mu.Lock()
				delete(inFlight, c)
				mu.Unlock()
				finished <- struct{}{}
			}
		}()
	}
	began := time.Now()
	go func() {
		defer close(work)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for _, c := range calls {
			work <- c
			<-tick.C
		}
	}()
	for range before {
		<-finished
	}
	// The restart hits a create well under way (its row is likely
	// written, its sandbox starting) when there is one within a second.
	for wait := time.Now(); time.Since(wait) < time.Second; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		var oldest time.Duration
		for _, at := range inFlight {
			oldest = max(oldest, time.Since(at))
		}
		mu.Unlock()
		if oldest > midCreate {
			break
		}
	}
	restartAt := time.Now()
	pgtest.Restart(t)
	restarted := time.Now()

	// Both daemons answer again: health (both nodes live), list, an exec
	// in the sandbox made before, forwarded by the second daemon.
	for i, d := range ds {
		var last error
		for {
			last = answers(ctx, d, as(d), anchor.Name)
			if last == nil {
				t.Logf("n%d answers again %s after Postgres came back", i, time.Since(restarted).Round(time.Millisecond))
				break
			}
			if time.Since(restarted) > 30*time.Second {
				t.Fatalf("n%d does not answer 30s after Postgres restarted: %v", i, last)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wg.Wait()
	t.Logf("%d creates, one every %s, at most %d at a time over 2 daemons, Postgres restarted after %d of them (%s in): %s in all",
		n, every, width, before, restartAt.Sub(began).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))

	rows := storeRows(t, ctx, dsn)
	stored := map[string][]storeRow{}
	for _, r := range rows {
		if r.tenant == "flow" {
			stored[r.name] = append(stored[r.name], r)
		}
	}
	listed := make([]map[string]int, len(ds))
	for i, d := range ds {
		list, err := as(d).List(ctx)
		if err != nil {
			t.Fatalf("list through n%d after the stream: %v", i, err)
		}
		listed[i] = map[string]int{}
		for _, sb := range list {
			listed[i][sb.Name]++
		}
	}
	want := map[string]bool{anchor.Name: true}
	var failed []*call
	for _, c := range calls {
		full := "agent-f0-" + c.name
		want[full] = true
		when := fmt.Sprintf("started %s, ended %s after the restart began", c.start.Sub(restartAt).Round(time.Millisecond), c.end.Sub(restartAt).Round(time.Millisecond))
		if c.err == nil {
			if c.sb.Name != full || c.sb.Status != sandbox.StatusRunning {
				t.Errorf("Create(%s) through n%d = %+v; want %s running", c.name, c.d, c.sb, full)
			}
			if len(stored[full]) != 1 || stored[full][0].status != string(sandbox.StatusRunning) {
				t.Errorf("%s, whose create succeeded (%s), has rows %+v in the store; want one, running", full, when, stored[full])
			}
			for i := range ds {
				if listed[i][full] != 1 {
					t.Errorf("%s, whose create succeeded, is listed %d times through n%d; want once", full, listed[i][full], i)
				}
			}
			if res, err := as(ds[(c.d+1)%len(ds)]).Exec(ctx, full, sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
				t.Errorf("exec true in %s through the other daemon = %+v, %v", full, res, err)
			}
			continue
		}
		failed = append(failed, c)
		var se *sandbox.Error
		if !errors.As(c.err, &se) {
			t.Errorf("Create(%s) through n%d failed (%s) with an uncoded error: %v", c.name, c.d, when, c.err)
		}
		t.Logf("Create(%s) through n%d failed (%s): %s: %v; rows in the store: %+v",
			c.name, c.d, when, sandbox.ErrorCode(c.err), c.err, stored[full])
		if len(stored[full]) > 1 {
			t.Errorf("%s, whose create failed, has %d rows in the store; want at most one", full, len(stored[full]))
		}
		for i := range ds {
			if listed[i][full] > 1 {
				t.Errorf("%s, whose create failed, is listed %d times through n%d; want at most once", full, listed[i][full], i)
			}
		}
	}
	for name, rs := range stored {
		if !want[name] || len(rs) != 1 {
			t.Errorf("the store holds %d rows of %s; want one, of a sandbox the test created", len(rs), name)
		}
	}
	var took []time.Duration
	for _, c := range calls {
		if c.err == nil {
			took = append(took, c.end.Sub(c.start))
		}
	}
	slices.Sort(took)
	if len(took) > 0 {
		t.Logf("%d of %d creates succeeded (median %s, slowest %s), %d failed", len(took), n,
			took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), len(failed))
	}

	// A failed create, tried again as its hint says, gives a sandbox that
	// runs: whatever row the failure left must not stand in its way.
	for _, c := range failed {
		sb, created, err := as(ds[c.d]).Create(ctx, sandbox.CreateRequest{Name: c.name})
		if err != nil || sb.Status != sandbox.StatusRunning {
			t.Errorf("Create(%s) through n%d again, after it failed with %q = %s (%s), created %v, %v; want a running sandbox",
				c.name, c.d, sandbox.ErrorCode(c.err), sb.Status, sb.Reason, created, err)
			continue
		}
		if res, err := as(ds[c.d]).Exec(ctx, sb.Name, sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); err != nil || res.ExitCode != 0 {
			t.Errorf("exec true in %s, made again after its create failed = %+v, %v", sb.Name, res, err)
		}
	}

	// Each daemon admits a create again: its admission lock, reads and
	// writes all reach the restarted server.
	for i, d := range ds {
		if sb, _, err := as(d).Create(ctx, sandbox.CreateRequest{Name: fmt.Sprintf("after-%d", i)}); err != nil || sb.Status != sandbox.StatusRunning {
			t.Errorf("a create through n%d after the restart = %s (%s), %v; want it running", i, sb.Status, sb.Reason, err)
		}
	}
	for _, r := range storeRows(t, ctx, dsn) {
		if r.status != string(sandbox.StatusRunning) {
			t.Errorf("in the end the store holds %+v; want every sandbox running", r)
		}
	}
}

// answers returns why d, asked through the operator's client and through
// the agent's ac, does not serve: its health does not name two live
// nodes, or it cannot list, or an exec in sandbox name fails.
func answers(ctx context.Context, d *daemon, ac *client.Client, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	h, err := d.Client().Health(ctx)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	if h.Cluster == nil || len(h.Cluster.Nodes) != 2 || !h.Cluster.Nodes[0].Live || !h.Cluster.Nodes[1].Live {
		return fmt.Errorf("health = %+v; want both nodes live", h.Cluster)
	}
	if _, err := d.Client().List(ctx); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	res, err := ac.Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
	if err != nil || res.ExitCode != 0 {
		return fmt.Errorf("exec true in %s = %+v, %w", name, res, err)
	}
	return nil
}
