package pgtest_test

import (
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// TestRestart checks that Restart restarts the postmaster in place: a
// connection made before is ended, a pool made before reconnects on the
// same DSN, and the rows written before are there.
func TestRestart(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgx.Connect = %v", err)
	}
	defer conn.Close(ctx)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("pgxpool.New = %v", err)
	}
	defer pool.Close()
	var started time.Time
	if err := pool.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}

	pgtest.Restart(t)

	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("a connection made before Restart still works after it; want its session ended")
	}
	var restarted time.Time
	deadline := time.Now().Add(5 * time.Second)
	for {
		// A pooled connection from before fails once and is dropped.
		err = pool.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&restarted)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || !restarted.After(started) {
		t.Fatalf("postmaster start time through the pool after Restart = %v, %v; want after %v", restarted, err, started)
	}
	again, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgx.Connect(the same DSN) after Restart = %v", err)
	}
	defer again.Close(ctx)
	var x int
	if err := again.QueryRow(ctx, "SELECT x FROM kept").Scan(&x); err != nil || x != 42 {
		t.Errorf("SELECT x FROM kept after Restart = %d, %v; want the 42 written before", x, err)
	}
	// A second database made after the restart works too.
	if c, err := pgx.Connect(ctx, pgtest.NewDatabase(t)); err != nil {
		t.Errorf("a new database after Restart: %v", err)
	} else {
		c.Close(ctx)
	}
}
