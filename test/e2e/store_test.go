package e2e_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/pgtest"
)

// TestPostgresStore: `hearth serve --store postgres://…` keeps its state
// in that database: its start line names the store without the password;
// a sandbox made and written survives a SIGKILL of the daemon and a
// restart, files and all, and the operator token still works; without
// --key-file it warns that the store's daemons need one; the database
// holds the sandbox's row.
func TestPostgresStore(t *testing.T) {
	requireDaemon(t)
	dsn := pgtest.NewDatabase(t)
	d := newDaemon(t, bins.Runtimes[0], "--store", dsn)
	ctx := ctxT(t)
	pass := dsn[strings.Index(dsn, ":")+3:]
	pass = pass[strings.Index(pass, ":")+1 : strings.Index(pass, "@")]
	if out := d.Out.String(); !strings.Contains(out, "store postgres 127.0.0.1:") || strings.Contains(out, pass) {
		t.Fatalf("start line does not name the Postgres store, or shows its password:\n%s", out)
	}
	// No --key-file on a shared store: the daemon says every daemon of it
	// needs one; and the start line names the node.
	if out := d.Out.String(); !strings.Contains(out, "level=WARN msg=\"no --key-file on a Postgres store") || !strings.Contains(out, "(node ") {
		t.Errorf("a Postgres daemon without --key-file gives no warning naming --key-file, or its start line no node:\n%s", out)
	}
	c := d.Client()
	if _, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "kept"}); err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, "kept", "echo on-postgres > data.txt")

	d.Kill()
	d.Start()
	c = d.Client()
	sb, err := c.Get(ctx, "kept")
	if err != nil {
		t.Fatalf("Get(kept) after a kill and restart on Postgres = %v", err)
	}
	if got := d.sh(ctx, "kept", "cat data.txt"); got != "on-postgres\n" {
		t.Fatalf("data.txt after the restart = %q", got)
	}
	if sb.Status != sandbox.StatusRunning && sb.Status != sandbox.StatusSleeping {
		t.Errorf("kept after the restart is %s (%s), want running or sleeping", sb.Status, sb.Reason)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sandboxes WHERE name = 'kept'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("rows of kept in the database = %d, %v; want 1", n, err)
	}
}
