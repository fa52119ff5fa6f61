package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/store/postgres"
	"github.com/hearth/hearth/testutil/pgtest"
	"github.com/hearth/hearth/testutil/testenv"
)

// raw connects to dsn as another tool would, to look under the store, and
// closes the connection when the test ends.
func raw(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("pgx.Connect = %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// column returns the one text column of every row of query, in order.
func column(t *testing.T, conn *pgx.Conn, query string, args ...any) []string {
	t.Helper()
	rows, _ := conn.Query(t.Context(), query, args...)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}

// schema describes the tables, columns, constraints and indexes of the
// database's current schema.
func schema(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	return column(t, conn, `
		SELECT table_name || '.' || column_name || ' ' || data_type || coalesce(' ' || collation_name, '')
			FROM information_schema.columns WHERE table_schema = current_schema()
		UNION ALL
		SELECT conrelid::regclass || ' ' || conname || ': ' || pg_get_constraintdef(oid)
			FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
		UNION ALL
		SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()
		ORDER BY 1`)
}

// versions returns the versions schema_migrations records, with their
// names and when they were applied.
func versions(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	return column(t, conn, `SELECT version || ' ' || name || ' ' || applied_at FROM schema_migrations ORDER BY version`)
}

func latest(t *testing.T) int {
	t.Helper()
	v, err := postgres.LatestVersion()
	if err != nil || v < 1 {
		t.Fatalf("LatestVersion() = %d, %v; want at least 1, nil", v, err)
	}
	return v
}

func TestMigrateFresh(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	open(t, dsn).Close()
	conn := raw(t, dsn)
	if got, want := len(versions(t, conn)), latest(t); got != want {
		t.Errorf("versions recorded in a fresh database = %d, want %d", got, want)
	}
	tables := column(t, conn, `SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1`)
	if want := []string{"agents", "audit", "bindings", "build_steps", "checkpoints", "gone", "images", "leases", "nodes", "rates", "registry_logins", "sandboxes", "schema_migrations", "secrets", "tenants", "tokens"}; !reflect.DeepEqual(tables, want) {
		t.Errorf("tables = %q, want %q", tables, want)
	}
}

func TestMigrateReopenIsNoop(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	open(t, dsn).Close()
	conn := raw(t, dsn)
	beforeSchema, beforeVersions := schema(t, conn), versions(t, conn)
	for range 3 {
		open(t, dsn).Close()
	}
	if after := schema(t, conn); !reflect.DeepEqual(after, beforeSchema) {
		t.Errorf("schema changed on reopen:\nbefore %q\nafter  %q", beforeSchema, after)
	}
	if after := versions(t, conn); !reflect.DeepEqual(after, beforeVersions) {
		t.Errorf("schema_migrations changed on reopen:\nbefore %q\nafter  %q", beforeVersions, after)
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	open(t, dsn).Close()
	future := latest(t) + 1
	if _, err := raw(t, dsn).Exec(t.Context(), `INSERT INTO schema_migrations (version, name) VALUES ($1, 'future.sql')`, future); err != nil {
		t.Fatal(err)
	}
	db, err := postgres.Open(t.Context(), dsn, nil)
	if err == nil {
		db.Close()
		t.Fatalf("Open(schema version %d) = nil, want ErrSchemaTooNew", future)
	}
	if !errors.Is(err, postgres.ErrSchemaTooNew) || !strings.Contains(err.Error(), fmt.Sprint(future)) {
		t.Errorf("Open(schema version %d) = %v, want ErrSchemaTooNew naming the version", future, err)
	}
}

// TestMigrateConcurrentOpens opens one empty database from several
// goroutines at once, each with its own pool, as daemons starting together
// would: every Open succeeds, and each migration is applied once.
func TestMigrateConcurrentOpens(t *testing.T) {
	const opens = 8
	dsn := pgtest.NewDatabase(t)
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	start := make(chan struct{})
	errs := make([]error, opens)
	var wg sync.WaitGroup
	for i := range opens {
		wg.Go(func() {
			<-start
			db, err := postgres.Open(t.Context(), dsn, &postgres.Options{Logger: log})
			if err == nil {
				err = db.Close()
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d of %d at once = %v, want nil", i, opens, err)
		}
	}
	for v := 1; v <= latest(t); v++ {
		if n := strings.Count(logs.String(), fmt.Sprintf("msg=\"applied schema migration\" version=%d ", v)); n != 1 {
			t.Errorf("migration %d applied %d times, want once; log:\n%s", v, n, logs.String())
		}
	}
	if got, want := len(versions(t, raw(t, dsn))), latest(t); got != want {
		t.Errorf("schema_migrations has %d rows, want %d", got, want)
	}
}

// TestOpenWaitsForMigrationLock holds the migration lock in another
// session: Open waits for it, until its context ends, and gets on once it
// is released.
func TestOpenWaitsForMigrationLock(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	conn := raw(t, dsn)
	if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_lock($1)`, postgres.MigrationLockKey); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if db, err := postgres.Open(ctx, dsn, nil); err == nil {
		db.Close()
		t.Fatal("Open while another session holds the migration lock = nil, want it to wait until its context ends")
	}
	if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_unlock($1)`, postgres.MigrationLockKey); err != nil {
		t.Fatal(err)
	}
	open(t, dsn)
}
