package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"strconv"
	"strings"
)

// migrationFiles holds the schema history. Files are named NNNN_what.sql,
// numbered from 0001 without gaps; a migration, once released, is never
// edited, only followed by a new one.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one step of the schema; applying it takes the database from
// version-1 to version.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the embedded migrations in order and checks their
// numbering.
func loadMigrations() ([]migration, error) {
	return parseMigrations(migrationFiles, "migrations")
}

// parseMigrations reads dir's *.sql files as migrations; their numbers must
// run 1, 2, 3… in file-name order.
func parseMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read migrations: %w", err)
	}
	var migs []migration
	for _, e := range entries { // ReadDir sorts by name
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != len(migs)+1 {
			return nil, fmt.Errorf("sqlite: migration %s: want a name starting %04d_", e.Name(), len(migs)+1)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("sqlite: read migration %s: %w", e.Name(), err)
		}
		migs = append(migs, migration{version: v, name: e.Name(), sql: string(b)})
	}
	return migs, nil
}

// migrate brings db to the latest version in migs. The check and every
// pending migration run in one IMMEDIATE transaction, so a failure leaves the
// database as it was, and two processes opening the same file migrate it
// once. A database newer than migs is refused with ErrSchemaTooNew.
func migrate(ctx context.Context, db *sql.DB, migs []migration, log *slog.Logger) (err error) {
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
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate: apply %s: %w", m.name, err)
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
