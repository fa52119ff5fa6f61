package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/sqlite"
	"github.com/hearth/hearth/store/storetest"
)

// open opens the database at path and closes it when the test ends.
func open(t *testing.T, path string) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("Open(%s) = %v, want nil", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// tempPath is a database path in a fresh directory.
func tempPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "hearth.db")
}

// raw opens path with no pragmas of ours, as another tool would, to look
// under the store.
func raw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatalf("sql.Open(%s) = %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, tempPath(t))
	})
	storetest.RunReopen(t, func(t *testing.T) (store.Store, func() store.Store) {
		path := tempPath(t)
		return open(t, path), func() store.Store { return open(t, path) }
	})
}

func TestOpenFileMode(t *testing.T) {
	path := tempPath(t)
	db := open(t, path)
	// A write makes SQLite create the -wal and -shm files, which must not
	// be wider than the database either.
	sb := sandbox.Sandbox{ID: "sb-1", Name: "mode", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := db.Sandboxes().Create(t.Context(), sb); err != nil {
		t.Fatalf("Sandboxes.Create = %v", err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("Stat(%s) = %v", p, err)
			continue
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("mode of %s = %v, want -rw-------", filepath.Base(p), got)
		}
	}
}

func TestOpenKeepsExistingMode(t *testing.T) {
	path := tempPath(t)
	if err := os.WriteFile(path, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil { // past the umask
		t.Fatal(err)
	}
	open(t, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o640 {
		t.Errorf("mode after Open = %v, want the operator's -rw-r-----", got)
	}
}

func TestOpenPragmas(t *testing.T) {
	db := open(t, tempPath(t))
	tests := []struct {
		pragma string
		writer string
		reader string
		why    string
	}{
		{"journal_mode", "wal", "wal", "readers must not block the writer"},
		{"synchronous", "2", "2", "FULL: an acknowledged write survives power loss"},
		{"foreign_keys", "1", "1", "referential integrity for later migrations"},
		{"busy_timeout", "5000", "5000", "DefaultBusyTimeout"},
		{"query_only", "0", "1", "readers cannot write by mistake"},
	}
	for _, tt := range tests {
		w, r, err := db.Pragmas(t.Context(), tt.pragma)
		if err != nil {
			t.Errorf("PRAGMA %s: %v", tt.pragma, err)
			continue
		}
		if w != tt.writer || r != tt.reader {
			t.Errorf("PRAGMA %s = writer %s, reader %s; want %s, %s (%s)", tt.pragma, w, r, tt.writer, tt.reader, tt.why)
		}
	}
}

func TestOpenOptions(t *testing.T) {
	path := tempPath(t)
	db, err := sqlite.Open(t.Context(), path, &sqlite.Options{BusyTimeout: 1500 * time.Millisecond, Readers: 1})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	defer db.Close()
	w, r, err := db.Pragmas(t.Context(), "busy_timeout")
	if err != nil || w != "1500" || r != "1500" {
		t.Errorf("busy_timeout = %s, %s, %v; want 1500, 1500, nil", w, r, err)
	}
	if db.Path() != path {
		t.Errorf("Path() = %q, want %q", db.Path(), path)
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
	}{
		{"empty", ""},
		{"memory", ":memory:"},
		{"uri", "file:" + filepath.Join(dir, "x.db")},
		{"missing directory", filepath.Join(dir, "missing", "hearth.db")},
		{"not a database", garbage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := sqlite.Open(t.Context(), tt.path, nil)
			if err == nil {
				db.Close()
				t.Fatalf("Open(%q) = nil, want an error", tt.path)
			}
		})
	}
}

func TestOpenPathNeedsNoEscaping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "odd ?name#%20.db")
	db := open(t, path)
	sb := sandbox.Sandbox{ID: "sb-1", Name: "odd", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := db.Sandboxes().Create(t.Context(), sb); err != nil {
		t.Fatalf("Sandboxes.Create = %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database not at the literal path: %v", err)
	}
}

// TestTimeNanoseconds checks the finer precision this implementation
// documents beyond the contract's microsecond.
func TestTimeNanoseconds(t *testing.T) {
	db := open(t, tempPath(t))
	ctx := t.Context()
	created := time.Date(2025, time.June, 30, 23, 59, 59, 123_456_789, time.FixedZone("UTC+14", 14*3600))
	sb := sandbox.Sandbox{
		ID: "sb-1", Name: "ns", CreatedAt: created,
		UpdatedAt: created.Add(1), ExpiresAt: created.Add(2),
	}
	if err := db.Sandboxes().Create(ctx, sb); err != nil {
		t.Fatalf("Sandboxes.Create = %v", err)
	}
	got, err := db.Sandboxes().Get(ctx, sb.Tenant, sb.Name)
	if err != nil {
		t.Fatalf("Sandboxes.Get = %v", err)
	}
	for _, tc := range []struct {
		field     string
		got, want time.Time
	}{
		{"CreatedAt", got.CreatedAt, sb.CreatedAt},
		{"UpdatedAt", got.UpdatedAt, sb.UpdatedAt},
		{"ExpiresAt", got.ExpiresAt, sb.ExpiresAt},
	} {
		// == rather than Equal: same instant, UTC, no monotonic reading.
		if tc.got != tc.want.UTC() {
			t.Errorf("%s = %v, want exactly %v", tc.field, tc.got, tc.want.UTC())
		}
	}
	// The stored text is the documented fixed-width UTC layout.
	var text string
	if err := raw(t, db.Path()).QueryRow(`SELECT created_at FROM sandboxes`).Scan(&text); err != nil {
		t.Fatal(err)
	}
	if want := "2025-06-30T09:59:59.123456789Z"; text != want {
		t.Errorf("stored created_at = %q, want %q", text, want)
	}
}

func TestTimeOutOfRange(t *testing.T) {
	db := open(t, tempPath(t))
	far := time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC)
	sb := sandbox.Sandbox{ID: "sb-1", Name: "far", CreatedAt: far, UpdatedAt: far}
	err := db.Sandboxes().Create(t.Context(), sb)
	if err == nil || errors.Is(err, store.ErrExists) {
		t.Fatalf("Sandboxes.Create(year 10000) = %v, want a plain error", err)
	}
	if _, err := db.Sandboxes().Get(t.Context(), sb.Tenant, sb.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Sandboxes.Get after refused create = %v, want ErrNotFound", err)
	}
}

func TestErrorsWrapContext(t *testing.T) {
	db := open(t, tempPath(t))
	ctx := t.Context()
	sb := sandbox.Sandbox{ID: "sb-1", Name: "dup", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := db.Sandboxes().Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	sb.ID = "sb-2"
	err := db.Sandboxes().Create(ctx, sb)
	if !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), `"dup"`) || !strings.Contains(err.Error(), "sandboxes.name") {
		t.Errorf("Sandboxes.Create(dup) = %v, want ErrExists naming the sandbox and the column", err)
	}
	_, err = db.Sandboxes().Get(ctx, "acme", "nope")
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Sandboxes.Get(nope) = %v, want ErrNotFound naming the sandbox", err)
	}
}

// TestCheckpointCascade looks under the store: the checkpoint rows
// themselves are gone with their sandbox, not merely hidden by the join.
func TestCheckpointCascade(t *testing.T) {
	db := open(t, tempPath(t))
	ctx := t.Context()
	now := time.Now()
	sb := sandbox.Sandbox{ID: "sb-1", Name: "cascade", CreatedAt: now, UpdatedAt: now}
	if err := db.Sandboxes().Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ck-1", "ck-2"} {
		c := sandbox.Checkpoint{ID: id, SandboxID: sb.ID, CreatedAt: now}
		if err := db.Checkpoints().Create(ctx, c); err != nil {
			t.Fatalf("Checkpoints.Create(%q) = %v", id, err)
		}
	}
	if err := db.Sandboxes().Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := raw(t, db.Path()).QueryRow(`SELECT count(*) FROM checkpoints`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d checkpoint rows after their sandbox was deleted, want 0", n)
	}
}

func TestCheckpointErrors(t *testing.T) {
	db := open(t, tempPath(t))
	ctx := t.Context()
	c := sandbox.Checkpoint{ID: "ck-1", SandboxID: "sb-nope", CreatedAt: time.Now()}
	err := db.Checkpoints().Create(ctx, c)
	if !errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrExists) ||
		!strings.Contains(err.Error(), `"ck-1"`) || !strings.Contains(err.Error(), `"sb-nope"`) {
		t.Errorf("Checkpoints.Create(missing sandbox) = %v, want ErrNotFound naming the checkpoint and the sandbox", err)
	}
	_, err = db.Checkpoints().Get(ctx, "sb-nope", "ck-1")
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"ck-1"`) {
		t.Errorf("Checkpoints.Get(nope) = %v, want ErrNotFound naming the checkpoint", err)
	}
	far := time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC)
	c.CreatedAt = far
	if err := db.Checkpoints().Create(ctx, c); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoints.Create(year 10000) = %v, want a plain error", err)
	}
}

// TestTenantPolicyJSON looks under the store: the policy column is the
// JSON of sandbox.PolicyOverrides, with unset overrides absent and ones set
// to zero present, readable in the sqlite3 shell.
func TestTenantPolicyJSON(t *testing.T) {
	db := open(t, tempPath(t))
	ctx := t.Context()
	now := time.Now()
	tenants := []struct {
		name   string
		policy sandbox.PolicyOverrides
		want   string
	}{
		{"defaults", sandbox.PolicyOverrides{}, `{}`},
		{"mixed", sandbox.PolicyOverrides{
			AgentQuota: new(0),
			MaxTTL:     new(sandbox.Duration(90 * time.Minute)),
		}, `{"agent_quota":0,"max_ttl":"1h30m0s"}`},
	}
	for _, tt := range tenants {
		tn := sandbox.Tenant{Name: tt.name, Policy: tt.policy, CreatedAt: now, UpdatedAt: now}
		if err := db.Tenants().Create(ctx, tn); err != nil {
			t.Fatalf("Tenants.Create(%q) = %v", tt.name, err)
		}
		var got string
		if err := raw(t, db.Path()).QueryRow(`SELECT policy FROM tenants WHERE name = ?`, tt.name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("stored policy of %q = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestTenantErrors(t *testing.T) {
	db := open(t, tempPath(t))
	ctx := t.Context()
	now := time.Now()
	tn := sandbox.Tenant{Name: "acme", CreatedAt: now, UpdatedAt: now}
	if err := db.Tenants().Create(ctx, tn); err != nil {
		t.Fatal(err)
	}
	err := db.Tenants().Create(ctx, tn)
	if !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), `"acme"`) || !strings.Contains(err.Error(), "tenants.name") {
		t.Errorf("Tenants.Create(dup) = %v, want ErrExists naming the tenant and the column", err)
	}
	_, err = db.Tenants().Get(ctx, "nope")
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Tenants.Get(nope) = %v, want ErrNotFound naming the tenant", err)
	}
	err = db.Tenants().Update(ctx, sandbox.Tenant{Name: "nope", UpdatedAt: now})
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Tenants.Update(nope) = %v, want ErrNotFound naming the tenant", err)
	}

	a := sandbox.Agent{Name: "claude-1", Tenant: "acme", CreatedAt: now}
	if err := db.Agents().Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	err = db.Agents().Create(ctx, a)
	if !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), `"claude-1"`) || !strings.Contains(err.Error(), "agents.name") {
		t.Errorf("Agents.Create(dup) = %v, want ErrExists naming the agent and the column", err)
	}
	err = db.Agents().Create(ctx, sandbox.Agent{Name: "bob", Tenant: "globex", CreatedAt: now})
	if !errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrExists) ||
		!strings.Contains(err.Error(), `"bob"`) || !strings.Contains(err.Error(), `"globex"`) {
		t.Errorf("Agents.Create(missing tenant) = %v, want ErrNotFound naming the agent and the tenant", err)
	}
	_, err = db.Agents().Get(ctx, "acme", "nope")
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Agents.Get(nope) = %v, want ErrNotFound naming the agent", err)
	}

	far := time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC)
	if err := db.Tenants().Create(ctx, sandbox.Tenant{Name: "far", CreatedAt: far, UpdatedAt: far}); err == nil || errors.Is(err, store.ErrExists) {
		t.Errorf("Tenants.Create(year 10000) = %v, want a plain error", err)
	}
	if err := db.Tenants().Update(ctx, sandbox.Tenant{Name: "acme", UpdatedAt: far}); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("Tenants.Update(year 10000) = %v, want a plain error", err)
	}
	if err := db.Agents().Create(ctx, sandbox.Agent{Name: "far", Tenant: "acme", CreatedAt: far}); err == nil || errors.Is(err, store.ErrExists) {
		t.Errorf("Agents.Create(year 10000) = %v, want a plain error", err)
	}
}
