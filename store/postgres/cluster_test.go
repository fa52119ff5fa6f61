package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/store/storetest"
	"github.com/hearth/hearth/testutil/pgtest"
)

// TestLockAcrossDaemons: a tenant's admission lock taken through one DB
// (one daemon) holds against another DB of the same database; Close of
// the holder frees it at once, and so does the end of the holder's
// session (its process dying), which the server notices.
func TestLockAcrossDaemons(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b, c := open(t, dsn), open(t, dsn), open(t, dsn)
	ctx := t.Context()
	if _, err := a.Admissions().Lock(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.Admissions().Lock(short, "acme"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock through b of the tenant a holds = %v, want context.DeadlineExceeded", err)
	}
	if u, err := b.Admissions().Lock(ctx, "globex"); err != nil {
		t.Fatalf("Lock through b of another tenant = %v", err)
	} else {
		u()
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close of a DB holding a tenant's lock did not return within 10s")
	}
	got, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if _, err := b.Admissions().Lock(got, "acme"); err != nil {
		t.Fatalf("Lock through b once a closed = %v, want the lock", err)
	}
	// b now holds it; its session is killed, as when its process dies.
	terminate(t, dsn, `pid <> pg_backend_pid() AND query LIKE '%pg_advisory_lock%'`)
	got3, cancel3 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel3()
	if _, err := c.Admissions().Lock(got3, "acme"); err != nil {
		t.Fatalf("Lock through c once b's session ended = %v, want the lock", err)
	}
}

// TestNoticesAcrossDaemons: a notice sent through one DB reaches the
// listeners of another within a second, the sender's own too.
func TestNoticesAcrossDaemons(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := open(t, dsn), open(t, dsn)
	ctx := t.Context()
	onB, err := b.Changes().Listen(ctx, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	onA, err := a.Changes().Listen(ctx, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	if err := a.Changes().Notify(ctx, "tokens", "tok-abc revoked"); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Receive(t, onB); got != "tok-abc revoked" {
		t.Fatalf("b got %q", got)
	}
	if d := time.Since(sent); d > time.Second {
		t.Errorf("the notice took %s to reach another daemon, want under 1s", d)
	}
	if got := storetest.Receive(t, onA); got != "tok-abc revoked" {
		t.Fatalf("the sender's own listener got %q", got)
	}
}

// TestListenReconnects: when the listener's session is lost (the server
// restarted, the network dropped), it comes back by itself, tells its
// listeners "" (what was sent meanwhile is lost), and notices flow again.
func TestListenReconnects(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := open(t, dsn), open(t, dsn)
	ctx := t.Context()
	ch, err := b.Changes().Listen(ctx, "policy")
	if err != nil {
		t.Fatal(err)
	}
	terminate(t, dsn, `query LIKE 'LISTEN%'`)
	if got := storetest.Receive(t, ch); got != "" {
		t.Fatalf("first value after the listener's session ended = %q, want \"\"", got)
	}
	if err := a.Changes().Notify(ctx, "policy", "acme"); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Receive(t, ch); got != "acme" {
		t.Fatalf("after the reconnect the listener got %q, want acme", got)
	}
}

// terminate ends the sessions of dsn's database matching where (SQL over
// pg_stat_activity), failing t unless there is one.
func terminate(t *testing.T, dsn, where string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND `+where).Scan(&n)
	if err != nil || n == 0 {
		t.Fatalf("terminating the sessions where %s: %d ended, %v", where, n, err)
	}
}

// TestLockAfterSessionsEnd: a lock connection the server ended while it
// sat in the pool (a restart) does not fail the next Lock: it is asked
// for again on a fresh connection.
func TestLockAfterSessionsEnd(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	db := open(t, dsn)
	ctx := t.Context()
	unlock, err := db.Admissions().Lock(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	unlock() // the connection goes back to the pool
	terminate(t, dsn, `query LIKE '%pg_advisory_unlock%'`)
	unlock, err = db.Admissions().Lock(ctx, "acme")
	if err != nil {
		t.Fatalf("Lock after the pooled lock session ended = %v, want the lock", err)
	}
	unlock()
}
