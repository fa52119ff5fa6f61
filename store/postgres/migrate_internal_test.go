package postgres

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/store/schema"
	"github.com/hearth/hearth/testutil/pgtest"
)

// TestEmbeddedMigrations checks the migrations the binary ships with.
func TestEmbeddedMigrations(t *testing.T) {
	migs, err := loadMigrations()
	if err != nil || len(migs) == 0 {
		t.Fatalf("loadMigrations() = %d migrations, %v; want some, nil", len(migs), err)
	}
}

// TestApplyMigrationsIsAtomic applies a good migration and a broken one:
// neither may stick, so the next binary starts from a known version.
func TestApplyMigrationsIsAtomic(t *testing.T) {
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	count := func(table string) (n int) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	tables := func() int {
		return count(`information_schema.tables WHERE table_schema = current_schema() AND table_name <> 'schema_migrations'`)
	}

	good := schema.Migration{Version: 1, Name: "0001_good.sql", SQL: "CREATE TABLE a (x integer); CREATE TABLE b (y integer);"}
	bad := schema.Migration{Version: 2, Name: "0002_bad.sql", SQL: "CREATE TABLE c (z integer); THIS IS NOT SQL;"}
	err = applyMigrations(ctx, conn, []schema.Migration{good, bad}, log)
	if err == nil || !strings.Contains(err.Error(), "0002_bad.sql") {
		t.Fatalf("applyMigrations(good, bad) = %v, want an error naming 0002_bad.sql", err)
	}
	if v, n := count("schema_migrations"), tables(); v != 0 || n != 0 {
		t.Errorf("after a failed migration: %d versions recorded, %d tables; want 0, 0", v, n)
	}

	// Multi-statement migrations run every statement.
	if err := applyMigrations(ctx, conn, []schema.Migration{good}, log); err != nil {
		t.Fatalf("applyMigrations(good) = %v", err)
	}
	if v, n := count("schema_migrations"), tables(); v != 1 || n != 2 {
		t.Errorf("after applyMigrations(good): %d versions recorded, %d tables; want 1, 2", v, n)
	}
}
