package postgres

// MigrationLockKey is the advisory lock Open migrates under, for the
// test that holds it.
const MigrationLockKey = migrationLockKey
