package sqlite_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

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
	if want := []string{"sandboxes:", "tokens:"}; !reflect.DeepEqual(tables, want) {
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
