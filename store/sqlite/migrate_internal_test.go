package sqlite

import (
	"database/sql"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func TestParseMigrations(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []string // names, in order
		wantErr string
	}{
		{"ordered", fstest.MapFS{
			"m/0002_b.sql": file("B"), "m/0001_a.sql": file("A"), "m/README": file("x"),
		}, []string{"0001_a.sql", "0002_b.sql"}, ""},
		{"empty", fstest.MapFS{"m/README": file("x")}, nil, ""},
		{"gap", fstest.MapFS{"m/0001_a.sql": file("A"), "m/0003_c.sql": file("C")}, nil, "0003_c.sql: want a name starting 0002_"},
		{"duplicate", fstest.MapFS{"m/0001_a.sql": file("A"), "m/0001_b.sql": file("B")}, nil, "0001_b.sql"},
		{"unnumbered", fstest.MapFS{"m/init.sql": file("A")}, nil, "init.sql"},
		{"zero", fstest.MapFS{"m/0000_a.sql": file("A")}, nil, "0000_a.sql"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			migs, err := parseMigrations(tt.files, "m")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseMigrations = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseMigrations = %v", err)
			}
			var got []string
			for i, m := range migs {
				got = append(got, m.name)
				if m.version != i+1 {
					t.Errorf("migration %s version = %d, want %d", m.name, m.version, i+1)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("parseMigrations = %q, want %q", got, tt.want)
			}
		})
	}
}

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

	good := migration{version: 1, name: "0001_good.sql", sql: "CREATE TABLE a (x INTEGER); CREATE TABLE b (y INTEGER);"}
	bad := migration{version: 2, name: "0002_bad.sql", sql: "CREATE TABLE c (z INTEGER); THIS IS NOT SQL;"}
	err = migrate(t.Context(), db, []migration{good, bad}, log)
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
	if err := migrate(t.Context(), db, []migration{good}, log); err != nil {
		t.Fatalf("migrate(good) = %v", err)
	}
	if err := db.QueryRow("SELECT count(*) FROM sqlite_schema").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 2 {
		t.Errorf("after migrate(good): %d tables, want 2", tables)
	}
}
