package pgtest_test

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/testutil/pgtest"
)

// TestMain stops the cluster after every test.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// TestNewDatabase checks that each call gives a database of its own that
// a test can write to, over 127.0.0.1.
func TestNewDatabase(t *testing.T) {
	ctx := t.Context()
	a, b := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	if a == b {
		t.Fatalf("NewDatabase twice = %q both times, want two databases", a)
	}
	for _, dsn := range []string{a, b} {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("pgx.Connect(%s) = %v", dsn, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE TABLE mine (x int)"); err != nil {
			t.Errorf("CREATE TABLE in %s = %v, want a fresh database", dsn, err)
		}
		var addr string
		if err := conn.QueryRow(ctx, "SELECT host(inet_server_addr())").Scan(&addr); err != nil || addr != "127.0.0.1" {
			t.Errorf("server address = %q, %v; want 127.0.0.1", addr, err)
		}
	}
}
