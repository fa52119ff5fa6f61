package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"log/slog"

	"github.com/hearth/hearth/store/schema"
)

// migrationFiles holds the schema history. Files are named NNNN_what.sql,
// numbered from 0001 without gaps; a migration, once released, is never
// edited, only followed by a new one.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// loadMigrations reads the embedded migrations in order and checks their
// numbering.
func loadMigrations() ([]schema.Migration, error) {
	migs, err := schema.Parse(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return migs, nil
}

// migrate brings db to the latest version in migs. The check and every
// pending migration run in one IMMEDIATE transaction, so a failure leaves the
// database as it was, and two processes opening the same file migrate it
// once. A database newer than migs is refused with ErrSchemaTooNew.
func migrate(ctx context.Context, db *sql.DB, migs []schema.Migration, log *slog.Logger) (err error) {
	latest := len(migs)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()

	var current int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&current); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", err)
	}
	switch {
	case current > latest:
		return fmt.Errorf("%w: the file is at schema version %d, this binary knows versions up to %d; run a hearth at least as new as the one that last opened it, or restore a backup taken before that upgrade",
			ErrSchemaTooNew, current, latest)
	case current < 0:
		return fmt.Errorf("migrate: schema version %d is negative; the file was not written by hearth", current)
	case current == latest:
		return tx.Commit()
	}

	for _, m := range migs[current:] {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate: apply %s: %w", m.Name, err)
		}
	}
	// PRAGMA takes no bound parameters; latest is an int we computed.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", latest)); err != nil {
		return fmt.Errorf("migrate: set schema version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	log.Info("migrated database schema", "from", current, "to", latest)
	return nil
}

// Schema returns the schema version the file records and the latest this
// binary knows: they differ once a newer hearth has migrated the file
// under this one.
func (db *DB) Schema(ctx context.Context) (applied, known int, err error) {
	migs, err := loadMigrations()
	if err != nil {
		return 0, 0, err
	}
	if err := db.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&applied); err != nil {
		return 0, 0, fmt.Errorf("sqlite: read the schema version: %w", err)
	}
	return applied, len(migs), nil
}
