package sqlite

import (
	"database/sql"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/store/schema"
)

// TestEmbeddedMigrations checks the migrations the binary ships with.
func TestEmbeddedMigrations(t *testing.T) {
	migs, err := loadMigrations()
	if err != nil || len(migs) == 0 {
		t.Fatalf("loadMigrations() = %d migrations, %v; want some, nil", len(migs), err)
	}
}

// TestMigrateIsAtomic applies a good migration and a broken one: neither
// may stick, so the next binary starts from a known version.
func TestMigrateIsAtomic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	db, err := sql.Open("sqlite", dsn(path, map[string][]string{"_txlock": {"immediate"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	good := schema.Migration{Version: 1, Name: "0001_good.sql", SQL: "CREATE TABLE a (x INTEGER); CREATE TABLE b (y INTEGER);"}
	bad := schema.Migration{Version: 2, Name: "0002_bad.sql", SQL: "CREATE TABLE c (z INTEGER); THIS IS NOT SQL;"}
	err = migrate(t.Context(), db, []schema.Migration{good, bad}, log)
	if err == nil || !strings.Contains(err.Error(), "0002_bad.sql") {
		t.Fatalf("migrate(good, bad) = %v, want an error naming 0002_bad.sql", err)
	}
	var v, tables int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT count(*) FROM sqlite_schema").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if v != 0 || tables != 0 {
		t.Errorf("after a failed migration: user_version %d, %d schema objects; want 0, 0", v, tables)
	}

	// Multi-statement migrations run every statement.
	if err := migrate(t.Context(), db, []schema.Migration{good}, log); err != nil {
		t.Fatalf("migrate(good) = %v", err)
	}
	if err := db.QueryRow("SELECT count(*) FROM sqlite_schema").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 2 {
		t.Errorf("after migrate(good): %d tables, want 2", tables)
	}
}
