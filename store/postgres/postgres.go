// Package postgres is a store.Store in a PostgreSQL database, for control
// planes whose state outlives one machine (a replicated or managed
// Postgres). It behaves as store/sqlite does, and passes the same
// conformance suite (store/storetest); the differences are listed under
// Times and Text below.
//
// # Driver
//
// It uses pgx's native interface and its pool (pgxpool), not database/sql
// through pgx's stdlib adapter: errors arrive as *pgconn.PgError with their
// SQLSTATE and constraint name, which the store maps to its sentinels; a
// connection can be held for the whole of a migration, whose session-level
// advisory lock lives and dies with it; arrays and timestamptz are encoded
// natively; and there is one pool, not database/sql's wrapped around
// pgx's.
//
// # Concurrency
//
// Every connection runs at READ COMMITTED (set at connect time, whatever
// the server's or the database's default): each single-statement method is
// atomic and sees only committed rows. Uniqueness is the schema's: two
// creates of one name race to the unique index, the loser waits for the
// winner's commit and gets store.ErrExists (unique_violation, SQLSTATE
// 23505); a row that refers to a missing sandbox or tenant gets
// store.ErrNotFound (foreign_key_violation, 23503). Images.Put and
// Images.SetPublic, which change several rows of one image name, take a
// transaction-level advisory lock on that name first, so that two switches
// of the current version never interleave. A write that fails with
// serialization_failure (40001) or deadlock_detected (40P01) changed
// nothing and is tried again, up to maxAttempts times, so callers never
// see these transient errors.
//
// # Durability
//
// A method returns nil once its transaction has committed, which with the
// server's default synchronous_commit=on means flushed to the server's
// WAL (and, with synchronous replication, to the standbys it names).
//
// # Schema
//
// The schema is an ordered list of SQL migrations embedded in the binary
// (migrations/NNNN_*.sql), recorded in the table schema_migrations (one
// row per applied version). Open applies the missing ones on a dedicated
// connection holding a session-level advisory lock (migrationLockKey), so
// that daemons opening one empty database at once migrate it exactly once,
// in one transaction; it refuses, with ErrSchemaTooNew, a database that a
// newer binary migrated.
//
// # Times
//
// Times are timestamptz: microsecond precision, so a time comes back
// truncated to the microsecond (the contract's minimum; store/sqlite keeps
// nanoseconds), in UTC, without a monotonic reading. Two times that differ
// by less than a microsecond are equal here, and lists order them by
// insertion, as the contract says of equal times. As in store/sqlite,
// times outside years 0000–9999 are refused, so that whatever one store
// accepts the other does.
//
// # Text
//
// Names, ids and keys are text COLLATE "C", so that lists are in byte
// order whatever the database's locale. Postgres text cannot hold a NUL
// byte, nor, in a UTF8 database, invalid UTF-8: a string with either is
// refused with an error (store/sqlite keeps any bytes).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/fanout"
)

// ErrSchemaTooNew is returned by Open for a database whose schema has
// versions this binary does not know: a newer hearth migrated it, and an
// older one must not guess at its meaning. Upgrade hearth, or restore a
// backup taken before the upgrade.
var ErrSchemaTooNew = errors.New("postgres: database schema is newer than this binary")

// maxAttempts is how many times a write is tried when it fails with a
// serialization failure or a deadlock, which roll it back whole.
const maxAttempts = 5

// Options tune Open. The zero value (or a nil *Options) is what the daemon
// uses.
type Options struct {
	// MaxConns is the pool's size. Zero means the DSN's pool_max_conns,
	// or pgxpool's default (the larger of 4 and the number of CPUs).
	MaxConns int32
	// Logger receives a line for each schema migration Open applies. Nil
	// discards.
	Logger *slog.Logger
}

// DB is a store.Store in one Postgres database. It is safe for concurrent
// use. Its views (Sandboxes, Checkpoints, …) are values that hold only the
// DB, so getting one costs nothing and they all share its pool.
type DB struct {
	pool  *pgxpool.Pool
	locks *pgxpool.Pool   // connections that hold admission locks
	cfg   *pgxpool.Config // what pool was made with: the listener's too
	where string          // host:port/database, without credentials
	hub   fanout.Hub      // the listeners of change notices

	mu         sync.Mutex
	closed     bool
	held       map[*pgxpool.Conn]struct{} // connections holding admission locks
	stopListen func()                     // stops the listener; nil when none runs
}

// errClosed is returned by the methods that need no connection after
// Close.
var errClosed = errors.New("postgres: store is closed")

// lockConns is the size of the pool of admission locks: a daemon holds a
// tenant's lock for one create at a time (its own lock queues the
// others), so this is how many tenants it admits at once.
const lockConns = 16

var _ store.Store = (*DB)(nil)

// Open connects to the database dsn names (a postgres:// URL or a
// keyword=value string, as libpq takes; PG* environment variables fill in
// what it leaves out) and applies any missing schema migrations, under an
// advisory lock that makes concurrent Opens of one database migrate it
// once. The database must exist, and its user must be allowed to create
// tables in the first schema of its search_path (public by default). It
// returns ErrSchemaTooNew if a newer binary has migrated the database. ctx
// bounds the connection and the migrations only.
func Open(ctx context.Context, dsn string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, dsnErr(err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	// Every connection, the migration's too: the isolation this package's
	// reasoning assumes, and a name in pg_stat_activity.
	params := cfg.ConnConfig.RuntimeParams
	params["default_transaction_isolation"] = "read committed"
	if params["application_name"] == "" {
		params["application_name"] = "hearth"
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		// Times come back in UTC, whatever the client's or server's zone.
		c.TypeMap().RegisterType(&pgtype.Type{
			Name: "timestamptz", OID: pgtype.TimestamptzOID,
			Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC},
		})
		return nil
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	if err := migrate(ctx, cfg.ConnConfig, o.Logger); err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w", where, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w", where, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open %s: %w", where, err)
	}
	lcfg := cfg.Copy()
	lcfg.MaxConns, lcfg.MinConns = lockConns, 0
	locks, err := pgxpool.NewWithConfig(ctx, lcfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open %s: %w", where, err)
	}
	return &DB{pool: pool, locks: locks, cfg: cfg, where: where}, nil
}

// Where names the database as host:port/database, without the user or
// password: what a daemon may print and log.
func (db *DB) Where() string { return db.where }

// dsnErr is the error for a DSN that does not parse, without the DSN,
// which may hold a password that pgx's redaction misses.
func dsnErr(err error) error {
	if inner := errors.Unwrap(err); inner != nil {
		return fmt.Errorf("postgres: open: the DSN does not parse (its text is left out: it may hold a password): %w", inner)
	}
	return errors.New("postgres: open: the DSN does not parse (its text is left out: it may hold a password)")
}

// withDefaults returns opts (which may be nil) with its zero fields set to
// their defaults.
func (opts *Options) withDefaults() Options {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// Close ends the admission locks still held,
// stops the listener of change notices (closing every Listen's channel)
// and closes the pools, waiting for the connections in use to be
// returned. Closing a closed DB does nothing and returns nil. Other
// methods return an error after Close.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	db.releaseLocks()
	stop := db.stopListen
	db.mu.Unlock()
	if stop != nil {
		stop()
	}
	db.hub.Close()
	db.locks.Close()
	db.pool.Close()
	return nil
}

// SQLSTATE codes the store tells apart.
const (
	codeUniqueViolation      = "23505"
	codeForeignKeyViolation  = "23503"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

// sqlState returns err's SQLSTATE, "" when it is not a server error.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// isForeignKey reports whether err is a FOREIGN KEY violation: a row that
// refers to a sandbox or tenant that is not there.
func isForeignKey(err error) bool { return sqlState(err) == codeForeignKeyViolation }

// writeErr maps a failed write's error: key conflicts become
// store.ErrExists, with the server's message (which names the constraint,
// never the values: a token's hash must not reach a log) kept.
func writeErr(err error) error {
	if sqlState(err) == codeUniqueViolation {
		return fmt.Errorf("%w (%v)", store.ErrExists, err)
	}
	return err
}

// retry runs do until it succeeds, fails with an error other than a
// serialization failure or a deadlock (both roll back everything do
// did), ctx is done, or maxAttempts have failed.
func retry(ctx context.Context, do func() error) error {
	for attempt := 1; ; attempt++ {
		err := do()
		switch sqlState(err) {
		case codeSerializationFailure, codeDeadlockDetected:
			if attempt < maxAttempts && ctx.Err() == nil {
				continue
			}
		}
		return err
	}
}

// exec runs one write statement, tried again on transient failures, and
// returns the number of rows it affected.
func (db *DB) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	var tag pgconn.CommandTag
	err := retry(ctx, func() error {
		var err error
		tag, err = db.pool.Exec(ctx, sql, args...)
		return err
	})
	return tag.RowsAffected(), err
}

// inTx runs fn in a transaction, committed when fn returns nil, and tries
// the whole transaction again on transient failures.
func (db *DB) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return retry(ctx, func() error { return pgx.BeginFunc(ctx, db.pool, fn) })
}

// execOne is exec for a statement that must match a row: none is
// store.ErrNotFound, reported as "op what".
func (db *DB) execOne(ctx context.Context, op, what string, sql string, args ...any) error {
	n, err := db.exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("postgres: %s %s: %w", op, what, writeErr(err))
	}
	if n == 0 {
		return fmt.Errorf("postgres: %s %s: %w", op, what, store.ErrNotFound)
	}
	return nil
}

// getOne runs a query for at most one row and scans it with scan; no row
// is store.ErrNotFound. what names the row in errors (`sandbox "x" of
// "acme"`).
func getOne[T any](ctx context.Context, db *DB, what string, scan func(pgx.Row) (T, error), sql string, args ...any) (T, error) {
	var zero T
	v, err := scan(db.pool.QueryRow(ctx, sql, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, fmt.Errorf("postgres: %s: %w", what, store.ErrNotFound)
	}
	if err != nil {
		return zero, fmt.Errorf("postgres: get %s: %w", what, err)
	}
	return v, nil
}

// queryAll runs a query and returns every row scanned by scan, in order;
// no row is an empty slice. what names the list in errors ("list
// tenants").
func queryAll[T any](ctx context.Context, db *DB, what string, scan func(pgx.Row) (T, error), sql string, args ...any) ([]T, error) {
	rows, err := db.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	if out == nil {
		out = []T{}
	}
	return out, nil
}

// checkTimes returns an error for the first of ts whose year is outside
// 0000–9999, which store/sqlite cannot store either.
func checkTimes(ts ...time.Time) error {
	for _, t := range ts {
		if y := t.UTC().Year(); y < 0 || y > 9999 {
			return fmt.Errorf("time %s is outside years 0000-9999", t.UTC())
		}
	}
	return nil
}

// nullTime is t for a nullable timestamptz: the zero time ("never") is
// NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// fromNull reads a nullable timestamptz scanned into p: NULL is the zero
// time.
func fromNull(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return *p
}
