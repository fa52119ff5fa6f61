package lifecycle_test

import (
	"bytes"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/hearth/hearth/driver"
	driverfake "github.com/hearth/hearth/driver/fake"
	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/layers"
	layersfake "github.com/hearth/hearth/layers/fake"
	"github.com/hearth/hearth/lifecycle"
	"github.com/hearth/hearth/node"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/sqlite"
)

// Principals the tests act as: two agents of tenant t1, its admin, an agent
// of tenant t2, t2's own agent called a1 (agent names are unique within a
// tenant only), and an operator.
var (
	a1     = sandbox.Principal{Tenant: "t1", Agent: "a1", Role: sandbox.RoleAgent}
	a2     = sandbox.Principal{Tenant: "t1", Agent: "a2", Role: sandbox.RoleAgent}
	admin  = sandbox.Principal{Tenant: "t1", Agent: "boss", Role: sandbox.RoleTenantAdmin}
	b1     = sandbox.Principal{Tenant: "t2", Agent: "b1", Role: sandbox.RoleAgent}
	twinA1 = sandbox.Principal{Tenant: "t2", Agent: "a1", Role: sandbox.RoleAgent}
	op     = sandbox.Principal{Tenant: "system", Agent: "ops", Role: sandbox.RoleOperator}
)

// epoch is the fake clock's start.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// clock is a fake clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// env is a lifecycle.Service over the real SQLite store in t.TempDir(),
// layers/fake holding the image "default", and driver/fake, with a fake
// clock.
type env struct {
	svc   *lifecycle.Service
	opts  envOptions
	db    store.Store
	drv   *driverfake.Driver
	lay   *layersfake.Store
	clock *clock
}

// newEnv builds an env; adjust, when set, changes the service's options.
func newEnv(t *testing.T, adjust func(*envOptions)) *env {
	t.Helper()
	ctx := t.Context()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hearth.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	lay := layersfake.New(t)
	if err := lay.Import(ctx, "default", fstest.MapFS{
		"etc/hostname": {Data: []byte("default\n"), Mode: 0o644},
		"home/sandbox": {Mode: fs.ModeDir | 0o755},
	}); err != nil {
		t.Fatal(err)
	}
	drv := driverfake.New(driverfake.Options{})
	t.Cleanup(func() { drv.Close() }) // runs before the roots are removed
	e := &env{db: db, drv: drv, lay: lay, clock: &clock{now: epoch}}
	e.opts = envOptions{
		Options:   lifecycle.Options{Store: db, Now: e.clock.Now},
		Driver:    drv,
		Layers:    lay,
		AgentPath: "/nonexistent/hearth-agent",
	}
	if adjust != nil {
		adjust(&e.opts)
		if d, ok := e.opts.Driver.(*driverfake.Driver); ok {
			e.drv = d // the helpers and the crash tests drive the one in use
		}
	}
	e.svc = e.newService(t, e.opts)
	// Tenants with room enough that only the tests of the guardrails
	// meet them (see admission_test.go).
	roomy := sandbox.Resources{MilliCPU: 1 << 30, MemoryBytes: 1 << 50, DiskBytes: 1 << 50}
	quota, share := 1000, 100
	for _, name := range []string{"t1", "t2"} {
		if _, err := e.svc.Tenancy.CreateTenant(ctx, op, sandbox.Tenant{Name: name, Allocation: roomy,
			Policy: sandbox.PolicyOverrides{AgentQuota: &quota, AgentSharePercent: &share}}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// envOptions are a service's options and the parts of the node.Local it
// runs on; crash, when set, is the node's crash hook (see
// node.Options.Crash), which the crash tests set with the service's.
type envOptions struct {
	lifecycle.Options
	Driver    driver.Driver
	Layers    layers.Store
	AgentPath string
	MemInfo   func() (available, total int64, err error)
	// Images and ImageDir, when set, are the node's image store and its
	// spool directory (see node.Options).
	Images   *image.Store
	ImageDir string
	crash    func(point string)
}

// node builds the node.Local of opts.
func (opts envOptions) node(t *testing.T) node.Node {
	t.Helper()
	n, err := node.NewLocal(node.Options{Driver: opts.Driver, Layers: opts.Layers, AgentPath: opts.AgentPath, MemInfo: opts.MemInfo, Crash: opts.crash,
		Images: opts.Images, ImageDir: opts.ImageDir})
	if err != nil {
		t.Fatalf("node.NewLocal() = %v", err)
	}
	return n
}

func (e *env) newService(t *testing.T, opts envOptions) *lifecycle.Service {
	t.Helper()
	lo := opts.Options
	lo.Node = opts.node(t)
	svc, err := lifecycle.New(lo)
	if err != nil {
		t.Fatalf("lifecycle.New(%+v) = %v", lo, err)
	}
	return svc
}

// restart returns the service a restarted daemon builds: same store and
// layers, a new handle on the same runtime. It does not call Recover.
func (e *env) restart(t *testing.T) *lifecycle.Service {
	t.Helper()
	opts := e.opts
	opts.Driver = e.drv.Reopen()
	return e.newService(t, opts)
}

// create makes sandbox name for p and wants it created.
func (e *env) create(t *testing.T, p sandbox.Principal, name string) sandbox.Sandbox {
	t.Helper()
	sb, created, err := e.svc.Sandboxes.Create(t.Context(), p, sandbox.CreateRequest{Name: name})
	if err != nil || !created {
		t.Fatalf("Create(%s, %s) = %+v, %v, %v; want a new sandbox", p.Agent, name, sb, created, err)
	}
	return sb
}

// find returns the stored row of the sandbox whose stored name is name,
// in whichever tenant holds it (the test fails when several do), or
// store.ErrNotFound.
func (e *env) find(t *testing.T, name string) (sandbox.Sandbox, error) {
	t.Helper()
	rows, err := e.db.Sandboxes().List(t.Context(), store.Filter{Name: name})
	switch {
	case err != nil:
		return sandbox.Sandbox{}, err
	case len(rows) == 0:
		return sandbox.Sandbox{}, store.ErrNotFound
	case len(rows) > 1:
		t.Fatalf("%d tenants have a sandbox called %s; name the tenant", len(rows), name)
	}
	return rows[0], nil
}

// row returns the stored row of sandbox name.
func (e *env) row(t *testing.T, name string) sandbox.Sandbox {
	t.Helper()
	sb, err := e.find(t, name)
	for _, p := range []sandbox.Principal{a1, a2, admin, b1} {
		if errors.Is(err, store.ErrNotFound) {
			sb, err = e.find(t, p.Resolve(name)) // a test principal's short name
		}
	}
	if err != nil {
		t.Fatalf("GetSandbox(%s) = %v", name, err)
	}
	return sb
}

// setRow stores sb with status and reason, as an earlier daemon or sweep
// would have left it.
func (e *env) setRow(t *testing.T, sb sandbox.Sandbox, status sandbox.Status, reason string) sandbox.Sandbox {
	t.Helper()
	sb.Status, sb.Reason = status, reason
	if err := e.db.Sandboxes().Update(t.Context(), sb); err != nil {
		t.Fatalf("Sandboxes.Update(%s) = %v", sb.Name, err)
	}
	return sb
}

// stop makes sandbox sb die in the runtime and records it stopped, as the
// sweep does.
func (e *env) stop(t *testing.T, sb sandbox.Sandbox) sandbox.Sandbox {
	t.Helper()
	if err := e.drv.Faults().Die(sb.ID, false); err != nil {
		t.Fatalf("Die(%s) = %v", sb.ID, err)
	}
	return e.setRow(t, sb, sandbox.StatusStopped, "exited")
}

// holdings is what the host holds, by sandbox id: rows, roots and runtime
// sandboxes.
type holdings struct {
	rows, roots, runtime []string
}

func (e *env) holdings(t *testing.T) holdings {
	t.Helper()
	ctx := t.Context()
	var h holdings
	rows, err := e.db.Sandboxes().List(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range rows {
		h.rows = append(h.rows, sb.ID)
	}
	if err := e.lay.Walk(ctx, func(info layers.Info) error {
		if id, ok := strings.CutPrefix(info.Key, "sb-"); ok {
			h.roots = append(h.roots, id)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	states, err := e.drv.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		h.runtime = append(h.runtime, st.ID)
	}
	slices.Sort(h.rows)
	slices.Sort(h.roots)
	slices.Sort(h.runtime)
	return h
}

// wantHeld wants the host to hold exactly the sandboxes ids: a row, a root
// and a runtime sandbox each, and nothing else.
func (e *env) wantHeld(t *testing.T, ids ...string) {
	t.Helper()
	e.wantHoldings(t, ids, ids)
}

// wantHoldings wants the host to hold exactly a row and a root for each of
// owned, and a runtime sandbox for each of inRuntime.
func (e *env) wantHoldings(t *testing.T, owned, inRuntime []string) {
	t.Helper()
	h := e.holdings(t)
	for _, c := range []struct {
		what      string
		got, want []string
	}{{"rows", h.rows, owned}, {"roots", h.roots, owned}, {"runtime sandboxes", h.runtime, inRuntime}} {
		if want := slices.Sorted(slices.Values(c.want)); !slices.Equal(c.got, want) {
			t.Errorf("host holds %s %q, want %q", c.what, c.got, want)
		}
	}
}

// ids returns the ids of sbs.
func ids(sbs ...sandbox.Sandbox) []string {
	out := make([]string, len(sbs))
	for i, sb := range sbs {
		out[i] = sb.ID
	}
	return out
}

// wantCode wants err to be a sandbox.Error with code.
func wantCode(t *testing.T, call string, err error, code sandbox.Code) *sandbox.Error {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("%s = %v, want %s", call, err, code)
	}
	return se
}

// exec runs shell in sandbox name as p and returns its stdout.
func (e *env) exec(t *testing.T, p sandbox.Principal, name, shell string) (string, sandbox.ExecResult) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := e.svc.Processes.Exec(t.Context(), p, name, sandbox.ExecRequest{Shell: shell}, nil, &out, &errb)
	if err != nil {
		t.Fatalf("Exec(%s, %q) = %v (stderr %q)", name, shell, err, errb.String())
	}
	return out.String(), res
}

// started returns how many times the driver was asked to start id.
func (e *env) started(id string) int { return e.drv.Count(driverfake.OpStart, id) }

// killed reports whether the driver was asked to stop or delete id.
func (e *env) killed(id string) bool {
	return e.drv.Count(driverfake.OpStop, id)+e.drv.Count(driverfake.OpDelete, id) > 0
}

// runtimeState returns the driver's state of id.
func (e *env) runtimeState(t *testing.T, id string) (driver.State, error) {
	t.Helper()
	return e.drv.State(t.Context(), id)
}
