// Package sqlite is the embedded default store.Store: one SQLite database
// file in the daemon's data directory, opened with modernc.org/sqlite (pure
// Go, no cgo).
//
// # Concurrency
//
// A DB holds two connection pools over the same file. Every write goes
// through a pool of exactly one connection, so writers inside the process
// queue in Go (honouring their contexts) instead of racing for SQLite's
// write lock; they never see SQLITE_BUSY from each other. Reads go through a
// pool of query_only connections and, in WAL mode, neither block the writer
// nor are blocked by it. A busy timeout covers the remaining contention:
// another process on the same file (the sqlite3 shell, a backup) and WAL
// checkpoints.
//
// # Durability
//
// The journal is a write-ahead log (journal_mode=WAL) and synchronous=FULL:
// a call that returned nil has its change in the WAL and the WAL fsynced. A
// kill -9 of the daemon loses nothing that was acknowledged (with WAL,
// synchronous=NORMAL would already guarantee that, since the WAL write
// reaches the kernel before commit returns); FULL also keeps acknowledged
// rows across a power cut or kernel panic, where NORMAL may roll back the
// last transactions. Losing a sandbox row after its container and root
// filesystem were created would orphan them, and the control plane writes a
// few rows a minute, so one fsync per commit is cheap insurance. The audit
// log, a row per call, arrives in batches (package audit): at most a few
// commits a second however busy the API is.
//
// # Schema
//
// The schema is an ordered list of SQL migrations embedded in the binary
// (migrations/NNNN_*.sql); PRAGMA user_version records how many are applied.
// Open applies the missing ones in one transaction, and refuses, with
// ErrSchemaTooNew, a database written by a newer binary.
//
// # Times
//
// Times are stored as TEXT in UTC, in the fixed-width layout
// 2006-01-02T15:04:05.000000000Z, so they sort as text, read plainly in the
// sqlite3 shell, and round-trip exactly to the nanosecond. They come back in
// UTC without a monotonic reading. Times outside years 0000–9999 are
// refused.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/hearth/hearth/store"
	"github.com/hearth/hearth/store/fanout"
	"github.com/hearth/hearth/store/schema"
)

// ErrSchemaTooNew is returned by Open for a database whose schema version is
// newer than this binary knows: a newer hearth wrote it, and an older one
// must not guess at its meaning. Upgrade hearth, or restore a backup taken
// before the upgrade.
var ErrSchemaTooNew = errors.New("sqlite: database schema is newer than this binary")

// Defaults for the zero Options.
const (
	DefaultBusyTimeout = 5 * time.Second
	DefaultReaders     = 4
)

// Options tune Open. The zero value (or a nil *Options) is what the daemon
// uses.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by another
	// process, or by a WAL checkpoint, before failing. Writes from this DB
	// never wait on each other this way: they queue for its one writer
	// connection. Zero means DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Readers is the number of read-only connections. Zero means
	// DefaultReaders.
	Readers int
	// Logger receives a line for each schema migration Open applies. Nil
	// discards.
	Logger *slog.Logger
}

// DB is a store.Store in one SQLite file. It is safe for concurrent use.
// Its views (Sandboxes, Checkpoints, …) are values that hold only the DB,
// so getting one costs nothing and they all share its connections.
type DB struct {
	path string
	w    *sql.DB // exactly one connection: every write is serialized here
	r    *sql.DB // query_only connections

	locks keyedLocks // the tenants' admission locks
	hub   fanout.Hub // the listeners of change notices

	mu     sync.Mutex
	closed bool
}

// errClosed is returned by the methods that touch no connection after
// Close.
var errClosed = errors.New("sqlite: store is closed")

// checkOpen returns errClosed after Close.
func (db *DB) checkOpen() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return errClosed
	}
	return nil
}

var _ store.Store = (*DB)(nil)

// Open opens the database at path, creating the file with mode 0600 if it is
// missing (an existing file keeps its mode; the -wal and -shm files SQLite
// creates beside it take the same mode), switches it to WAL and applies any
// missing schema migrations. The parent directory must exist. path is a file
// name, never a URI or ":memory:". It returns ErrSchemaTooNew if a newer
// binary has migrated the file. ctx bounds the migrations only.
func Open(ctx context.Context, path string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("sqlite: open %q: want a file path", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := createPrivate(abs); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	migs, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	db := &DB{path: abs}
	if err := db.open(ctx, o, migs); err != nil {
		for _, p := range []*sql.DB{db.r, db.w} {
			if p != nil {
				p.Close()
			}
		}
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	return db, nil
}

// withDefaults returns opts (which may be nil) with its zero fields set to
// their defaults.
func (opts *Options) withDefaults() Options {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.Readers <= 0 {
		o.Readers = DefaultReaders
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// createPrivate creates the file at path, if missing, with mode 0600, so
// that it is never world-readable: SQLite would create it 0644, and it
// holds every tenant's token hashes.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// open opens db's writer pool, switches the file to WAL, applies migs, and
// then opens the reader pool. On an error the caller closes whichever
// pools are set.
func (db *DB) open(ctx context.Context, o Options, migs []schema.Migration) error {
	ms := strconv.FormatInt(o.BusyTimeout.Milliseconds(), 10)
	var err error
	db.w, err = openPool(db.path, 1, url.Values{
		"_busy_timeout": {ms},
		"_foreign_keys": {"on"},
		"_synchronous":  {"FULL"},
		// The one writer may share the file with another process; taking
		// the write lock at BEGIN means a busy wait, never a deadlock on
		// upgrading a read lock.
		"_txlock": {"immediate"},
	})
	if err != nil {
		return err
	}
	var mode string
	if err := db.w.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal_mode is %q, want wal (is the file on a filesystem without shared memory?)", mode)
	}
	if err := migrate(ctx, db.w, migs, o.Logger); err != nil {
		return err
	}
	db.r, err = openPool(db.path, o.Readers, url.Values{
		"_busy_timeout": {ms},
		"_foreign_keys": {"on"},
		"_synchronous":  {"FULL"},
		"_query_only":   {"on"},
	})
	if err != nil {
		return err
	}
	return db.r.PingContext(ctx)
}

// openPool returns a pool of exactly conns connections to the file at
// path with the DSN parameters q, kept open for the life of the pool.
func openPool(path string, conns int, q url.Values) (*sql.DB, error) {
	p, err := sql.Open("sqlite", dsn(path, q))
	if err != nil {
		return nil, err
	}
	p.SetMaxOpenConns(conns)
	p.SetMaxIdleConns(conns)
	p.SetConnMaxLifetime(0)
	p.SetConnMaxIdleTime(0)
	return p, nil
}

// dsn builds a "file:" URI so that any character in path (a '?', a '%')
// reaches SQLite intact.
func dsn(path string, q url.Values) string {
	u := url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}
	return u.String()
}

// Path is the absolute path of the database file.
func (db *DB) Path() string { return db.path }

// Close closes both connection pools; the last connection to go checkpoints
// the WAL into the main file. Closing a closed DB does nothing and returns
// nil. Other methods return an error after Close.
func (db *DB) Close() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil
	}
	db.closed = true
	db.hub.Close()
	// Readers first, so that the writer is the last connection and the one
	// that checkpoints.
	rerr := db.r.Close()
	werr := db.w.Close()
	if err := errors.Join(rerr, werr); err != nil {
		return fmt.Errorf("sqlite: close %s: %w", db.path, err)
	}
	return nil
}

// isConstraint reports whether err is a UNIQUE or PRIMARY KEY violation.
func isConstraint(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}

// isForeignKey reports whether err is a FOREIGN KEY violation: a row that
// refers to a sandbox or tenant that is not there.
func isForeignKey(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// writeErr maps a failed write's error: key conflicts become store.ErrExists,
// with SQLite's text (which names the column) kept for the log.
func writeErr(err error) error {
	if isConstraint(err) {
		return fmt.Errorf("%w (%v)", store.ErrExists, err)
	}
	return err
}
