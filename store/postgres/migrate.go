package postgres

import (
	"context"
	"embed"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/hearth/hearth/store/schema"
)

// migrationFiles holds the schema history. Files are named NNNN_what.sql,
// numbered from 0001 without gaps; a migration, once released, is never
// edited, only followed by a new one. They are Postgres's own, not
// translations of store/sqlite's: the first ones make today's schema.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockKey is the session-level advisory lock (the one-bigint key
// space, which the two-int keys of imageLockClass do not share) that
// Opens hold while they migrate: "hearthdb" in ASCII, unlikely to be
// another program's in the same database.
const migrationLockKey int64 = 0x6865617274686462

// LatestVersion is the schema version Open brings a database to.
func LatestVersion() (int, error) {
	migs, err := loadMigrations()
	return len(migs), err
}

// loadMigrations reads the embedded migrations in order and checks their
// numbering.
func loadMigrations() ([]schema.Migration, error) {
	migs, err := schema.Parse(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return migs, nil
}

// migrate brings the database cfg connects to up to the embedded
// migrations, on a connection of its own that holds the advisory lock
// migrationLockKey throughout: a second Open of the same database waits
// for the first to finish, then finds nothing to do. The lock is the
// session's, so closing the connection releases it whatever went wrong.
func migrate(ctx context.Context, cfg *pgx.ConnConfig, log *slog.Logger) error {
	migs, err := loadMigrations()
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockKey); err != nil {
		return fmt.Errorf("migrate: take the migration lock: %w", err)
	}
	return applyMigrations(ctx, conn, migs, log)
}

// applyMigrations applies the migrations of migs that schema_migrations
// does not list, in one transaction with their rows there, so that a
// failure leaves the database as it was. The caller holds the migration
// lock. A database with versions beyond migs is refused with
// ErrSchemaTooNew.
func applyMigrations(ctx context.Context, conn *pgx.Conn, migs []schema.Migration, log *slog.Logger) (err error) {
	current, err := appliedVersion(ctx, conn, len(migs))
	if err != nil || current == len(migs) {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback(context.Background()) // after Commit, does nothing
	for _, m := range migs[current:] {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate: apply %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return fmt.Errorf("migrate: record %s: %w", m.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	for _, m := range migs[current:] {
		log.Info("applied schema migration", "version", m.Version, "name", m.Name)
	}
	log.Info("migrated database schema", "from", current, "to", len(migs))
	return nil
}

// appliedVersion creates schema_migrations if it is missing and returns
// the version it records: n when it lists exactly 1…n. A version beyond
// latest is ErrSchemaTooNew; a gap is an error.
func appliedVersion(ctx context.Context, conn *pgx.Conn, latest int) (int, error) {
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer     NOT NULL PRIMARY KEY CHECK (version > 0),
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return 0, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		return 0, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	if n := len(applied); n > 0 && applied[n-1] > latest {
		return 0, fmt.Errorf("%w: the database has schema version %d, this binary knows versions up to %d; run a hearth at least as new as the one that last opened it, or restore a backup taken before that upgrade",
			ErrSchemaTooNew, applied[n-1], latest)
	}
	for i, v := range applied {
		if v != i+1 {
			return 0, fmt.Errorf("migrate: schema_migrations lists version %d without version %d; the database was not migrated by hearth", v, i+1)
		}
	}
	return len(applied), nil
}

// Schema returns the schema version the database records and the latest
// this binary knows: they differ once a newer hearth has migrated the
// database under this one.
func (db *DB) Schema(ctx context.Context) (applied, known int, err error) {
	known, err = LatestVersion()
	if err != nil {
		return 0, 0, err
	}
	err = db.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&applied)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: read the schema version: %w", err)
	}
	return applied, known, nil
}
