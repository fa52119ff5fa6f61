package postgres_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/postgres"
	"github.com/hearth/hearth/store/storetest"
	"github.com/hearth/hearth/testutil/pgtest"
	"github.com/hearth/hearth/testutil/testenv"
)

// TestMain stops the test binary's Postgres cluster after every test.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// open opens the database dsn names and closes it when the test ends.
func open(t *testing.T, dsn string) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatalf("Open = %v, want nil", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, pgtest.NewDatabase(t))
	})
	storetest.RunReopen(t, func(t *testing.T) (store.Store, func() store.Store) {
		dsn := pgtest.NewDatabase(t)
		return open(t, dsn), func() store.Store { return open(t, dsn) }
	})
}

// TestErrorsWrapContext checks that errors name what they are about, and
// that a conflict names the constraint without the values (a token's hash
// must not reach a log).
func TestErrorsWrapContext(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	db := open(t, dsn)
	ctx := t.Context()
	sb := sandbox.Sandbox{ID: "sb-1", Name: "dup", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := db.Sandboxes().Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	sb.ID = "sb-2"
	err := db.Sandboxes().Create(ctx, sb)
	if !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), `"dup"`) || !strings.Contains(err.Error(), "sandboxes_tenant_name_key") {
		t.Errorf("Sandboxes.Create(dup) = %v, want ErrExists naming the sandbox and the constraint", err)
	}
	_, err = db.Sandboxes().Get(ctx, "acme", "nope")
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Sandboxes.Get(nope) = %v, want ErrNotFound naming the sandbox", err)
	}
	const hash = "5ecre7-hash"
	tok := store.Token{ID: "tok-1", Hash: hash, CreatedAt: time.Now()}
	if err := db.Tokens().Create(ctx, tok); err != nil {
		t.Fatal(err)
	}
	tok.ID = "tok-2"
	err = db.Tokens().Create(ctx, tok)
	if !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), "tokens_hash_key") || strings.Contains(err.Error(), hash) {
		t.Errorf("Tokens.Create(dup hash) = %v, want ErrExists naming the constraint and not the hash", err)
	}
}

// TestCheckpointCascade looks under the store: the checkpoint rows
// themselves are gone with their sandbox, not merely hidden by the join.
func TestCheckpointCascade(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	db := open(t, dsn)
	ctx := t.Context()
	now := time.Now()
	sb := sandbox.Sandbox{ID: "sb-1", Name: "cascade", CreatedAt: now, UpdatedAt: now}
	if err := db.Sandboxes().Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ck-1", "ck-2"} {
		if err := db.Checkpoints().Create(ctx, sandbox.Checkpoint{ID: id, SandboxID: sb.ID, CreatedAt: now}); err != nil {
			t.Fatalf("Checkpoints.Create(%q) = %v", id, err)
		}
	}
	if err := db.Sandboxes().Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := raw(t, dsn).QueryRow(ctx, `SELECT count(*) FROM checkpoints`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d checkpoint rows after their sandbox was deleted, want 0", n)
	}
}

func TestCheckpointErrors(t *testing.T) {
	db := open(t, pgtest.NewDatabase(t))
	ctx := t.Context()
	c := sandbox.Checkpoint{ID: "ck-1", SandboxID: "sb-nope", CreatedAt: time.Now()}
	err := db.Checkpoints().Create(ctx, c)
	if !errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrExists) ||
		!strings.Contains(err.Error(), `"ck-1"`) || !strings.Contains(err.Error(), `"sb-nope"`) {
		t.Errorf("Checkpoints.Create(missing sandbox) = %v, want ErrNotFound naming the checkpoint and the sandbox", err)
	}
	c.CreatedAt = far
	if err := db.Checkpoints().Create(ctx, c); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoints.Create(year 10000) = %v, want a plain error", err)
	}
}

// far is beyond year 9999, which both stores refuse.
var far = time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC)

func TestTenantErrors(t *testing.T) {
	db := open(t, pgtest.NewDatabase(t))
	ctx := t.Context()
	now := time.Now()
	tn := sandbox.Tenant{Name: "acme", CreatedAt: now, UpdatedAt: now}
	if err := db.Tenants().Create(ctx, tn); err != nil {
		t.Fatal(err)
	}
	err := db.Tenants().Create(ctx, tn)
	if !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), `"acme"`) || !strings.Contains(err.Error(), "tenants_pkey") {
		t.Errorf("Tenants.Create(dup) = %v, want ErrExists naming the tenant and the constraint", err)
	}
	err = db.Tenants().Update(ctx, sandbox.Tenant{Name: "nope", UpdatedAt: now})
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Tenants.Update(nope) = %v, want ErrNotFound naming the tenant", err)
	}
	err = db.Agents().Create(ctx, sandbox.Agent{Name: "bob", Tenant: "globex", CreatedAt: now})
	if !errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrExists) ||
		!strings.Contains(err.Error(), `"bob"`) || !strings.Contains(err.Error(), `"globex"`) {
		t.Errorf("Agents.Create(missing tenant) = %v, want ErrNotFound naming the agent and the tenant", err)
	}
	if err := db.Tenants().Create(ctx, sandbox.Tenant{Name: "far", CreatedAt: far, UpdatedAt: far}); err == nil || errors.Is(err, store.ErrExists) {
		t.Errorf("Tenants.Create(year 10000) = %v, want a plain error", err)
	}
	if err := db.Tenants().Update(ctx, sandbox.Tenant{Name: "acme", UpdatedAt: far}); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("Tenants.Update(year 10000) = %v, want a plain error", err)
	}
}

// TestTimeMicroseconds checks the precision this implementation documents:
// times come back truncated to the microsecond, in UTC, whatever the
// session's time zone.
func TestTimeMicroseconds(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	db := open(t, dsn+"&timezone=Pacific%2FKiritimati")
	ctx := t.Context()
	created := time.Date(2025, time.June, 30, 23, 59, 59, 123_456_789, time.FixedZone("UTC+14", 14*3600))
	sb := sandbox.Sandbox{ID: "sb-1", Name: "us", CreatedAt: created, UpdatedAt: created.Add(1), ExpiresAt: created.Add(2)}
	if err := db.Sandboxes().Create(ctx, sb); err != nil {
		t.Fatalf("Sandboxes.Create = %v", err)
	}
	got, err := db.Sandboxes().Get(ctx, sb.Tenant, sb.Name)
	if err != nil {
		t.Fatalf("Sandboxes.Get = %v", err)
	}
	want := created.Truncate(time.Microsecond).UTC()
	for field, got := range map[string]time.Time{"CreatedAt": got.CreatedAt, "UpdatedAt": got.UpdatedAt, "ExpiresAt": got.ExpiresAt} {
		// == rather than Equal: same instant, UTC, no monotonic reading.
		if got != want {
			t.Errorf("%s = %v, want exactly %v", field, got, want)
		}
	}
	sb = sandbox.Sandbox{ID: "sb-2", Name: "far", CreatedAt: far, UpdatedAt: far}
	if err := db.Sandboxes().Create(ctx, sb); err == nil || errors.Is(err, store.ErrExists) {
		t.Fatalf("Sandboxes.Create(year 10000) = %v, want a plain error", err)
	}
}

// TestTenantPolicyJSON looks under the store: the policy column is the
// JSON of sandbox.PolicyOverrides, unset overrides absent and ones set to
// zero present.
func TestTenantPolicyJSON(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	db := open(t, dsn)
	ctx := t.Context()
	now := time.Now()
	for _, tt := range []struct {
		name   string
		policy sandbox.PolicyOverrides
		want   string
	}{
		{"defaults", sandbox.PolicyOverrides{}, `{}`},
		{"mixed", sandbox.PolicyOverrides{
			AgentQuota: new(0),
			MaxTTL:     new(sandbox.Duration(90 * time.Minute)),
		}, `{"max_ttl": "1h30m0s", "agent_quota": 0}`},
	} {
		if err := db.Tenants().Create(ctx, sandbox.Tenant{Name: tt.name, Policy: tt.policy, CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatalf("Tenants.Create(%q) = %v", tt.name, err)
		}
		var got string
		if err := raw(t, dsn).QueryRow(ctx, `SELECT policy::text FROM tenants WHERE name = $1`, tt.name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("stored policy of %q = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestImagePutRace puts different versions of one new image name at once,
// a few names over: every Put succeeds (none mistakes the partial unique
// index for a conflict), and exactly one version of each name is current.
func TestImagePutRace(t *testing.T) {
	const names, writers = 5, 8
	db := open(t, pgtest.NewDatabase(t))
	ctx := t.Context()
	for n := range names {
		name := fmt.Sprintf("tools-%d", n)
		start := make(chan struct{})
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				<-start
				img := sandbox.Image{Tenant: "acme", Name: name, Digest: fmt.Sprintf("sha256:%064d", i),
					Layers: []string{"base"}, CreatedAt: time.Now()}
				errs[i] = db.Images().Put(ctx, img)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("Images.Put(%s) %d of %d at once = %v, want nil", name, i, writers, err)
			}
		}
	}
	list, err := db.Images().List(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	currents := map[string]int{}
	for _, img := range list {
		if img.Current {
			currents[img.Name]++
		}
	}
	for n := range names {
		if name := fmt.Sprintf("tools-%d", n); currents[name] != 1 {
			t.Errorf("after %d Puts of %s at once: %d current versions, want 1", writers, name, currents[name])
		}
	}
	if len(list) != names*writers {
		t.Errorf("after the Puts: %d versions, want %d", len(list), names*writers)
	}
}

// TestOpenRefuses checks that Open fails, without the DSN's password in
// its error, where there is no database to open.
func TestOpenRefuses(t *testing.T) {
	const password = "s3cret-pw"
	for _, tt := range []struct{ name, dsn string }{
		{"garbage", "postgres://u:" + password + "@127.0.0.1:%zz/db"},
		{"nothing listens", fmt.Sprintf("postgres://u:%s@127.0.0.1:%d/db?connect_timeout=5&sslmode=disable", password, testenv.FreePort(t))},
		{"missing database", strings.Replace(pgtest.NewDatabase(t), "/pgtest_", "/nope_", 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db, err := postgres.Open(t.Context(), tt.dsn, nil)
			if err == nil {
				db.Close()
				t.Fatalf("Open(%s) = nil, want an error", tt.name)
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("Open(%s) = %v, which shows the password", tt.name, err)
			}
		})
	}
}
