package sqlite

import "context"

// LatestVersion is the schema version Open brings a database to.
func LatestVersion() (int, error) {
	migs, err := loadMigrations()
	return len(migs), err
}

// Pragmas reads PRAGMA name on the writer connection and on a reader one,
// for tests of per-connection settings.
func (db *DB) Pragmas(ctx context.Context, name string) (writer, reader string, err error) {
	if err := db.w.QueryRowContext(ctx, "PRAGMA "+name).Scan(&writer); err != nil {
		return "", "", err
	}
	if err := db.r.QueryRowContext(ctx, "PRAGMA "+name).Scan(&reader); err != nil {
		return "", "", err
	}
	return writer, reader, nil
}
