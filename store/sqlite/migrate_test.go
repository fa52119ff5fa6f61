package sqlite_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/sqlite"
)

// userVersion reads PRAGMA user_version from the file at path.
func userVersion(t *testing.T, path string) int {
	t.Helper()
	var v int
	if err := raw(t, path).QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatalf("PRAGMA user_version: %v", err)
	}
	return v
}

// schema returns the database's schema as SQLite keeps it.
func schema(t *testing.T, path string) []string {
	t.Helper()
	rows, err := raw(t, path).Query(`SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_schema ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func latest(t *testing.T) int {
	t.Helper()
	v, err := sqlite.LatestVersion()
	if err != nil {
		t.Fatalf("LatestVersion() = %v", err)
	}
	if v < 1 {
		t.Fatalf("LatestVersion() = %d, want at least 1", v)
	}
	return v
}

func TestMigrateFresh(t *testing.T) {
	path := tempPath(t)
	open(t, path).Close()
	if got, want := userVersion(t, path), latest(t); got != want {
		t.Errorf("user_version of a fresh database = %d, want %d", got, want)
	}
	var tables []string
	for _, s := range schema(t, path) {
		if strings.HasPrefix(s, "table ") {
			tables = append(tables, strings.Fields(s)[1])
		}
	}
	if want := []string{"agents:", "audit:", "bindings:", "build_steps:", "checkpoints:", "gone:", "images:", "leases:", "nodes:", "rates:", "registry_logins:", "sandboxes:", "secrets:", "sqlite_sequence:", "tenants:", "tokens:"}; !reflect.DeepEqual(tables, want) {
		t.Errorf("tables = %q, want %q", tables, want)
	}
}

func TestMigrateReopenIsNoop(t *testing.T) {
	path := tempPath(t)
	open(t, path).Close()
	before := schema(t, path)
	for range 3 {
		open(t, path).Close()
	}
	if got, want := userVersion(t, path), latest(t); got != want {
		t.Errorf("user_version after reopening = %d, want %d", got, want)
	}
	if after := schema(t, path); !reflect.DeepEqual(after, before) {
		t.Errorf("schema changed on reopen:\nbefore %q\nafter  %q", before, after)
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	path := tempPath(t)
	open(t, path).Close()
	future := latest(t) + 1
	if _, err := raw(t, path).Exec(fmt.Sprintf("PRAGMA user_version = %d", future)); err != nil {
		t.Fatal(err)
	}
	before := schema(t, path)

	db, err := sqlite.Open(t.Context(), path, nil)
	if err == nil {
		db.Close()
		t.Fatalf("Open(database at version %d) = nil, want ErrSchemaTooNew", future)
	}
	if !errors.Is(err, sqlite.ErrSchemaTooNew) {
		t.Fatalf("Open(database at version %d) = %v, want ErrSchemaTooNew", future, err)
	}
	// The message must let an operator act without reading code.
	for _, want := range []string{path, fmt.Sprint(future), fmt.Sprint(latest(t)), "backup"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open error %q does not mention %q", err, want)
		}
	}
	if got := userVersion(t, path); got != future {
		t.Errorf("user_version after refused Open = %d, want %d untouched", got, future)
	}
	if after := schema(t, path); !reflect.DeepEqual(after, before) {
		t.Errorf("refused Open changed the schema")
	}
}

// TestMigrateFromV1 opens, with this binary, a database an older hearth
// left at schema version 1 with rows in it: the rows must survive, with no
// head, and checkpoints must work on them at once.
func TestMigrateFromV1(t *testing.T) {
	path := tempPath(t)
	// Released migrations are never edited, so 0001 as shipped is exactly
	// what a version-1 binary ran.
	v1, err := os.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	old := raw(t, path)
	for _, q := range []string{
		string(v1),
		`INSERT INTO sandboxes VALUES ('sb-1', 'old', 'acme', 'alice', 'debian:12', 'small', 'runsc',
			'stopped', 'oom', '2025-03-14T14:09:26.535897000Z', '2025-03-14T14:10:00.000000000Z',
			NULL, '["exec"]', 1000, 1073741824, 512)`,
		`INSERT INTO tokens VALUES ('tok-1', 'aa01', 'acme', 'alice', 'agent',
			'2025-03-14T14:09:26.535897000Z', NULL, NULL)`,
		`PRAGMA user_version = 1`,
	} {
		if _, err := old.Exec(q); err != nil {
			t.Fatalf("building a version-1 database: %v", err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	db := open(t, path)
	ctx := t.Context()
	if got, want := userVersion(t, path), latest(t); got != want {
		t.Errorf("user_version after migrating from 1 = %d, want %d", got, want)
	}
	created := time.Date(2025, time.March, 14, 14, 9, 26, 535_897_000, time.UTC)
	want := sandbox.Sandbox{
		ID: "sb-1", Name: "old", Tenant: "acme", Owner: "alice", Image: "debian:12",
		Size: "small", Runtime: "runsc", Status: sandbox.StatusStopped, Reason: "oom",
		CreatedAt: created, UpdatedAt: time.Date(2025, time.March, 14, 14, 10, 0, 0, time.UTC),
		Capabilities: []string{sandbox.CapExec},
		Labels:       []string{},          // 0008 gives every row an empty list
		PublicPorts:  []int{},             // and 0009
		Network:      sandbox.NetworkNone, // and 0010
		Resources:    sandbox.Resources{MilliCPU: 1000, MemoryBytes: 1 << 30, Pids: 512},
		Head:         "",
		ImageKey:     "debian:12", // 0015: the key of an image from before versions is its name
	}
	got, err := db.Sandboxes().Get(ctx, "acme", "old")
	if err != nil {
		t.Fatalf("Sandboxes.Get(old) after migration = %v, want the row", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Sandboxes.Get(old) after migration =\n\t%+v\nwant\n\t%+v", got, want)
	}
	if tok, err := db.Tokens().ByHash(ctx, "aa01"); err != nil || tok.ID != "tok-1" || !tok.CreatedAt.Equal(created) {
		t.Errorf("Tokens.ByHash(aa01) after migration = %+v, %v; want tok-1 created %v", tok, err, created)
	}

	// The migrated row takes checkpoints and a head, and cascades.
	c := sandbox.Checkpoint{ID: "ck-1", SandboxID: "sb-1", CreatedAt: created.Add(time.Hour), Memory: true}
	if err := db.Checkpoints().Create(ctx, c); err != nil {
		t.Fatalf("Checkpoints.Create on a migrated sandbox = %v, want nil", err)
	}
	want.Head = c.ID
	if err := db.Sandboxes().Update(ctx, want); err != nil {
		t.Fatalf("Sandboxes.Update(head) on a migrated sandbox = %v, want nil", err)
	}
	if got, err := db.Sandboxes().Get(ctx, "acme", "old"); err != nil || got.Head != c.ID {
		t.Errorf("Sandboxes.Get(old).Head = %q, %v; want %q, nil", got.Head, err, c.ID)
	}
	if err := db.Sandboxes().Delete(ctx, "sb-1"); err != nil {
		t.Fatalf("Sandboxes.Delete = %v", err)
	}
	if _, err := db.Checkpoints().Get(ctx, "sb-1", c.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoints.Get after Sandboxes.Delete on a migrated database = %v, want ErrNotFound", err)
	}
}

// TestMigrateFromV3 opens, with this binary, a database an older hearth left
// at schema version 3 with rows in it: the rows must survive as they were,
// and tenants and agents must work at once, beside sandboxes and tokens of
// tenants that have no row (tenants were not stored before).
func TestMigrateFromV3(t *testing.T) {
	path := tempPath(t)
	// Released migrations are never edited, so 0001–0003 as shipped are
	// exactly what a version-3 binary ran.
	old := raw(t, path)
	for _, f := range []string{"0001_init.sql", "0002_checkpoints.sql", "0003_disk.sql"} {
		q, err := os.ReadFile("migrations/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.Exec(string(q)); err != nil {
			t.Fatalf("building a version-3 database: %s: %v", f, err)
		}
	}
	for _, q := range []string{
		`INSERT INTO sandboxes (id, name, tenant, owner, image, size, runtime, status, reason,
			created_at, updated_at, expires_at, capabilities, millicpu, memory_bytes, pids, head, disk_bytes)
		VALUES ('sb-1', 'old', 'acme', 'alice', 'debian:12', 'small', 'runsc',
			'running', 'created', '2025-03-14T14:09:26.535897000Z', '2025-03-14T14:10:00.000000000Z',
			'2025-03-15T14:09:26.535897000Z', '["exec"]', 1000, 1073741824, 512, 'ck-1', 10737418240)`,
		`INSERT INTO checkpoints VALUES ('ck-1', 'sb-1', 'before', '', '2025-03-14T14:09:30.000000000Z', 4096, 1)`,
		`INSERT INTO tokens VALUES ('tok-1', 'aa01', 'acme', 'alice', 'agent',
			'2025-03-14T14:09:26.535897000Z', NULL, NULL)`,
		`PRAGMA user_version = 3`,
	} {
		if _, err := old.Exec(q); err != nil {
			t.Fatalf("building a version-3 database: %v", err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	db := open(t, path)
	ctx := t.Context()
	if got, want := userVersion(t, path), latest(t); got != want {
		t.Errorf("user_version after migrating from 3 = %d, want %d", got, want)
	}
	created := time.Date(2025, time.March, 14, 14, 9, 26, 535_897_000, time.UTC)
	want := sandbox.Sandbox{
		ID: "sb-1", Name: "old", Tenant: "acme", Owner: "alice", Image: "debian:12",
		Size: "small", Runtime: "runsc", Status: sandbox.StatusRunning, Reason: "created",
		CreatedAt: created, UpdatedAt: time.Date(2025, time.March, 14, 14, 10, 0, 0, time.UTC),
		ExpiresAt:    created.Add(24 * time.Hour),
		Capabilities: []string{sandbox.CapExec},
		Labels:       []string{},          // 0008 gives every row an empty list
		PublicPorts:  []int{},             // and 0009
		Network:      sandbox.NetworkNone, // and 0010
		Resources:    sandbox.Resources{MilliCPU: 1000, MemoryBytes: 1 << 30, Pids: 512, DiskBytes: 10 << 30},
		Head:         "ck-1",
		ImageKey:     "debian:12", // 0015
	}
	got, err := db.Sandboxes().Get(ctx, "acme", "old")
	if err != nil {
		t.Fatalf("Sandboxes.Get(old) after migration = %v, want the row", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Sandboxes.Get(old) after migration =\n\t%+v\nwant\n\t%+v", got, want)
	}
	wantCk := sandbox.Checkpoint{ID: "ck-1", SandboxID: "sb-1", Sandbox: "old", Label: "before",
		CreatedAt: time.Date(2025, time.March, 14, 14, 9, 30, 0, time.UTC), SizeBytes: 4096, Memory: true}
	if ck, err := db.Checkpoints().Get(ctx, "sb-1", "ck-1"); err != nil || ck != wantCk {
		t.Errorf("Checkpoints.Get(ck-1) after migration = %+v, %v; want %+v", ck, err, wantCk)
	}
	if tok, err := db.Tokens().ByHash(ctx, "aa01"); err != nil || tok.ID != "tok-1" || !tok.CreatedAt.Equal(created) {
		t.Errorf("Tokens.ByHash(aa01) after migration = %+v, %v; want tok-1 created %v", tok, err, created)
	}

	// No tenant rows came from nowhere; the ones the old rows name can be
	// created now, and agents in them.
	if list, err := db.Tenants().List(ctx); err != nil || len(list) != 0 {
		t.Errorf("Tenants.List after migration = %d tenants, %v; want none", len(list), err)
	}
	tenant := sandbox.Tenant{
		Name:       "acme",
		Allocation: sandbox.Resources{MilliCPU: 16_000, MemoryBytes: 64 << 30, DiskBytes: 1 << 40},
		Policy:     sandbox.PolicyOverrides{BudgetPercent: new(0)},
		CreatedAt:  created.Add(time.Hour), UpdatedAt: created.Add(time.Hour),
	}
	if err := db.Tenants().Create(ctx, tenant); err != nil {
		t.Fatalf("Tenants.Create on a migrated database = %v, want nil", err)
	}
	if got, err := db.Tenants().Get(ctx, "acme"); err != nil || got.Policy.BudgetPercent == nil || *got.Policy.BudgetPercent != 0 {
		t.Errorf("Tenants.Get(acme) on a migrated database = %+v, %v; want budget 0", got, err)
	}
	agent := sandbox.Agent{Name: "alice", Tenant: "acme", CreatedAt: created.Add(time.Hour)}
	if err := db.Agents().Create(ctx, agent); err != nil {
		t.Fatalf("Agents.Create on a migrated database = %v, want nil", err)
	}
	if err := db.Agents().Create(ctx, sandbox.Agent{Name: "bob", Tenant: "globex", CreatedAt: created}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Agents.Create(missing tenant) on a migrated database = %v, want ErrNotFound", err)
	}
}

// TestMigrateFromV13 opens, with this binary, a database an older hearth
// left at schema version 13, when names were unique across tenants, with
// rows in every table 0014 rebuilds: every row survives as it was (a
// checkpoint too, which the rebuild of sandboxes must not cascade away),
// and names are then unique within each tenant only.
func TestMigrateFromV13(t *testing.T) {
	path := tempPath(t)
	v13Database(t, path)
	db := open(t, path)
	ctx := t.Context()
	if got, want := userVersion(t, path), latest(t); got != want {
		t.Errorf("user_version after migrating from 13 = %d, want %d", got, want)
	}
	sb, err := db.Sandboxes().Get(ctx, "acme", "agent-alice-web")
	if err != nil {
		t.Fatalf("Sandboxes.Get(acme, agent-alice-web) after migration = %v, want the row", err)
	}
	if sb.ID != "x1" || sb.Head != "c1" || sb.Network != sandbox.NetworkEgress || !reflect.DeepEqual(sb.PublicPorts, []int{8080}) ||
		!reflect.DeepEqual(sb.Labels, []string{"team"}) || sb.Resources.NetConns != 64 || sb.Resources.DiskBytes != 2<<30 ||
		!reflect.DeepEqual(sb.Egress.Allow, []string{"example.com"}) {
		t.Errorf("sandbox after migration = %+v, want every column kept", sb)
	}
	cps, err := db.Checkpoints().List(ctx, "x1")
	if err != nil || len(cps) != 2 || cps[0].ID != "c0" || cps[1].ID != "c1" || cps[1].Parent != "c0" || !cps[1].Memory || cps[1].Sandbox != "agent-alice-web" {
		t.Errorf("Checkpoints.List(x1) after migration = %+v, %v; want c0 and c1 as they were", cps, err)
	}
	if a, err := db.Agents().Get(ctx, "acme", "alice"); err != nil || a.Tenant != "acme" {
		t.Errorf("Agents.Get(acme, alice) after migration = %+v, %v", a, err)
	}
	// 0020: a tenant from before pools runs on any node.
	if tn, err := db.Tenants().Get(ctx, "acme"); err != nil || tn.Pool != "" || tn.Allocation.MilliCPU != 1000 {
		t.Errorf("Tenants.Get(acme) after migration = %+v, %v; want its allocation kept and no pool", tn, err)
	}
	if g, err := db.Gone().Get(ctx, "acme", "agent-alice-old"); err != nil || g.ID != "x0" || g.Last != "oom" {
		t.Errorf("Gone.Get(acme, agent-alice-old) after migration = %+v, %v", g, err)
	}
	if m, err := db.Sandboxes().Get(ctx, "system", "pool-1"); err != nil || m.ID != "x2" {
		t.Errorf("Sandboxes.Get(system, pool-1) after migration = %+v, %v", m, err)
	}

	// Names are now per tenant: globex takes acme's agent and sandbox
	// names, and acme still cannot have two.
	if err := db.Agents().Create(ctx, sandbox.Agent{Name: "alice", Tenant: "globex", CreatedAt: time.Now()}); err != nil {
		t.Errorf("Agents.Create(alice in globex) after migration = %v, want nil", err)
	}
	twin := sb
	twin.ID, twin.Tenant = "x3", "globex"
	if err := db.Sandboxes().Create(ctx, twin); err != nil {
		t.Errorf("Sandboxes.Create(agent-alice-web in globex) after migration = %v, want nil", err)
	}
	dup := sb
	dup.ID = "x4"
	if err := db.Sandboxes().Create(ctx, dup); !errors.Is(err, store.ErrExists) {
		t.Errorf("Sandboxes.Create(a second agent-alice-web in acme) after migration = %v, want ErrExists", err)
	}
	if err := db.Agents().Create(ctx, sandbox.Agent{Name: "alice", Tenant: "acme", CreatedAt: time.Now()}); !errors.Is(err, store.ErrExists) {
		t.Errorf("Agents.Create(a second alice in acme) after migration = %v, want ErrExists", err)
	}
	// The rebuilt tables keep their foreign keys: checkpoints still go
	// with their sandbox, and an agent still needs its tenant.
	if err := db.Sandboxes().Delete(ctx, "x1"); err != nil {
		t.Fatal(err)
	}
	if cps, err := db.Checkpoints().List(ctx, "x1"); err != nil || len(cps) != 0 {
		t.Errorf("Checkpoints.List(x1) after Sandboxes.Delete = %d, %v; want none (the cascade)", len(cps), err)
	}
	if err := db.Agents().Create(ctx, sandbox.Agent{Name: "bob", Tenant: "initech", CreatedAt: time.Now()}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Agents.Create(in a missing tenant) after migration = %v, want ErrNotFound", err)
	}
	checkIntegrity(t, path)
}

// oldDatabase leaves at path a database an older hearth left at schema
// version, as its migrations made it (released migrations are never
// edited), with the rows inserts add.
func oldDatabase(t *testing.T, path string, version int, inserts []string) {
	t.Helper()
	old := raw(t, path)
	for v := 1; v <= version; v++ {
		matches, err := filepath.Glob(fmt.Sprintf("migrations/%04d_*.sql", v))
		if err != nil || len(matches) != 1 {
			t.Fatalf("migration %d: %v, %q", v, err, matches)
		}
		q, err := os.ReadFile(matches[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.Exec(string(q)); err != nil {
			t.Fatalf("building a version-%d database: %s: %v", version, matches[0], err)
		}
	}
	for _, q := range append(inserts, fmt.Sprintf("PRAGMA user_version = %d", version)) {
		if _, err := old.Exec(q); err != nil {
			t.Fatalf("building a version-%d database: %v", version, err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
}

// v13Database leaves at path a database an older hearth left at schema
// version 13, with rows in the tables 0014 rebuilds.
func v13Database(t *testing.T, path string) {
	t.Helper()
	oldDatabase(t, path, 13, []string{
		`INSERT INTO tenants VALUES ('acme', 1000, 1073741824, 1073741824, '{}', '2025-03-14T14:00:00.000000000Z', '2025-03-14T14:00:00.000000000Z')`,
		`INSERT INTO tenants VALUES ('globex', 1000, 1073741824, 1073741824, '{}', '2025-03-14T14:00:00.000000000Z', '2025-03-14T14:00:00.000000000Z')`,
		`INSERT INTO agents VALUES ('alice', 'acme', '2025-03-14T14:00:01.000000000Z')`,
		`INSERT INTO sandboxes (id, name, tenant, owner, image, size, runtime, status, reason,
			created_at, updated_at, expires_at, capabilities, millicpu, memory_bytes, pids, head, disk_bytes,
			labels, public_ports, network, net_bits_per_sec, net_conns, egress)
		VALUES ('x1', 'agent-alice-web', 'acme', 'alice', 'default', 'small', 'runsc',
			'running', 'created', '2025-03-14T14:09:26.535897000Z', '2025-03-14T14:10:00.000000000Z',
			NULL, '["exec"]', 1000, 1073741824, 512, 'c1', 2147483648,
			'["team"]', '[8080]', 'egress', 1000000, 64, '{"allow":["example.com"]}')`,
		`INSERT INTO sandboxes (id, name, tenant, owner, image, size, runtime, status, reason,
			created_at, updated_at, expires_at, capabilities, millicpu, memory_bytes, pids)
		VALUES ('x2', 'pool-1', 'system', 'pool', 'default', 'small', 'runsc',
			'running', 'warm pool member', '2025-03-14T14:09:27.000000000Z', '2025-03-14T14:09:27.000000000Z',
			NULL, '[]', 1000, 1073741824, 512)`,
		`INSERT INTO checkpoints VALUES ('c0', 'x1', 'first', '', '2025-03-14T14:09:29.000000000Z', 2048, 0)`,
		`INSERT INTO checkpoints VALUES ('c1', 'x1', 'second', 'c0', '2025-03-14T14:09:30.000000000Z', 4096, 1)`,
		`INSERT INTO gone VALUES ('agent-alice-old', 'x0', 'acme', 'alice', 'destroyed by alice (agent)', 'oom', '2025-03-14T14:00:02.000000000Z')`,
	})
}

// TestMigrateFromV14 opens, with this binary, a database an older hearth
// left at schema version 14, before images had versions: every sandbox's
// image key is its image's name (the old default image's layer key was
// "default"), with no digest and a zero config, so that the layer its
// root came from is still known and in use; images and registry logins
// work at once.
func TestMigrateFromV14(t *testing.T) {
	path := tempPath(t)
	oldDatabase(t, path, 14, []string{
		`INSERT INTO sandboxes (id, name, tenant, owner, image, size, runtime, status, reason,
			created_at, updated_at, expires_at, capabilities, millicpu, memory_bytes, pids, head)
		VALUES ('x1', 'web', 'acme', 'alice', 'default', 'small', 'runsc',
			'running', 'created', '2025-03-14T14:09:26.535897000Z', '2025-03-14T14:10:00.000000000Z',
			NULL, '["exec"]', 1000, 1073741824, 512, 'c1')`,
		`INSERT INTO checkpoints VALUES ('c1', 'x1', 'first', '', '2025-03-14T14:09:30.000000000Z', 2048, 1)`,
	})
	db := open(t, path)
	ctx := t.Context()
	if got, want := userVersion(t, path), latest(t); got != want {
		t.Errorf("user_version after migrating from 14 = %d, want %d", got, want)
	}
	sb, err := db.Sandboxes().Get(ctx, "acme", "web")
	if err != nil {
		t.Fatalf("Sandboxes.Get(acme, web) after migration = %v, want the row", err)
	}
	if sb.Image != "default" || sb.ImageKey != "default" || sb.ImageDigest != "" ||
		!reflect.DeepEqual(sb.ImageConfig, sandbox.ImageConfig{}) || sb.Head != "c1" {
		t.Errorf("sandbox after migration = image %q, key %q, digest %q, config %+v, head %q; want default, default, \"\", zero, c1",
			sb.Image, sb.ImageKey, sb.ImageDigest, sb.ImageConfig, sb.Head)
	}
	if users, err := db.Sandboxes().UsingImage(ctx, []string{"default"}, 1); err != nil || len(users) != 1 || users[0].ID != "x1" {
		t.Errorf("Sandboxes.UsingImage(default) after migration = %+v, %v; want x1", users, err)
	}
	if cps, err := db.Checkpoints().List(ctx, "x1"); err != nil || len(cps) != 1 {
		t.Errorf("Checkpoints.List(x1) after migration = %+v, %v; want c1 kept", cps, err)
	}
	img := sandbox.Image{Tenant: sandbox.SystemTenant, Name: "default", Digest: "sha256:" + strings.Repeat("0", 64),
		Source: sandbox.ImageSourceDefault, Public: true, Layers: []string{"default"}, CreatedAt: time.Now()}
	if err := db.Images().Put(ctx, img); err != nil {
		t.Fatalf("Images.Put(default) after migration = %v", err)
	}
	if got, err := db.Images().Get(ctx, sandbox.SystemTenant, "default"); err != nil || got.Key() != sb.ImageKey {
		t.Errorf("Images.Get(system, default) = key %q, %v; want the old sandbox's key %q", got.Key(), err, sb.ImageKey)
	}
	login := sandbox.RegistryLogin{Tenant: "acme", Host: "127.0.0.1:5000", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := db.RegistryLogins().Put(ctx, login, []byte("sealed")); err != nil {
		t.Errorf("RegistryLogins.Put after migration = %v", err)
	}
	checkIntegrity(t, path)
}

// TestImageSchema looks under the store: the schema itself refuses a
// second current version of a name, a version without layers and a
// sandbox's image config that is not an object, whatever the code that
// writes them.
func TestImageSchema(t *testing.T) {
	db := open(t, tempPath(t))
	ctx := t.Context()
	img := sandbox.Image{Tenant: "acme", Name: "tools", Digest: "sha256:1", Layers: []string{"l1"}, CreatedAt: time.Now()}
	if err := db.Images().Put(ctx, img); err != nil {
		t.Fatal(err)
	}
	sb := sandbox.Sandbox{ID: "x1", Name: "web", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := db.Sandboxes().Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	w := raw(t, db.Path())
	// The row the refused ones differ from, taken.
	if _, err := w.Exec(`INSERT INTO images VALUES ('acme', 'tools', 'sha256:2', '', '', 0, 0, '{}', 0, '["l2"]', '2025-03-14T14:00:00.000000000Z')`); err != nil {
		t.Fatalf("an older version, not current: %v", err)
	}
	for _, tt := range []struct{ what, q string }{
		{"a second current version", `UPDATE images SET current = 1 WHERE digest = 'sha256:2'`},
		{"no layers", `INSERT INTO images VALUES ('acme', 'other', 'sha256:3', '', '', 0, 1, '{}', 0, '[]', '2025-03-14T14:00:00.000000000Z')`},
		{"an empty tenant", `INSERT INTO images VALUES ('', 'other', 'sha256:3', '', '', 0, 1, '{}', 0, '["l"]', '2025-03-14T14:00:00.000000000Z')`},
		{"a sandbox's image config not an object", `UPDATE sandboxes SET image_config = '[]'`},
	} {
		if _, err := w.Exec(tt.q); err == nil {
			t.Errorf("the schema took %s", tt.what)
		}
	}
}
